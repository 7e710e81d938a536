"""TF's tracing entry points, wrapped while a recorder listens (see retrace.py) and, once a
watch() exists, for good (passing straight through for functions nobody records).

tracing_compilation._maybe_define_function runs on every call of every tf.function;
_create_concrete_function only when TF traces. The first counts the call; the second
describes the arguments and the calling context, and watches the trace for side effects.
Two kinds of listener: `active`, the monitor() blocks, hear every function; `watched`
maps one tf.function's trace cache to the watch() recorders that hear that function only,
whoever calls it (so a watched call runs no code of watch()'s own before TF's).
"""

import builtins
import contextlib
import inspect
import sys

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import function_context as _fc
from tensorflow.python.eager.polymorphic_function import tracing_compilation as _tc

from tf_inspector import userframes
from tf_inspector.calls import describe_call, describe_context


def python_function(tracing_options):
    fn = tracing_options.python_function
    return inspect.unwrap(getattr(fn, "__func__", fn))


def captures(fn):
    """{name: (where, value)} of the closure cells and globals the function's code reads;
    `where` is the cell, or the globals dict, to read the value again on a later call."""
    found = {}
    code = getattr(fn, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            found[name] = (cell, cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    globals_ = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in globals_:
            found[name] = (globals_, globals_[name])
    return found


def read_capture(where, name, default):
    if isinstance(where, dict):
        return where.get(name, default)
    try:
        return where.cell_contents
    except ValueError:
        return default


def is_simple(value):
    return isinstance(value, (int, float, complex, str, bytes, bool)) and not callable(value)


active = []  # monitor() recorders, innermost last
watched = {}  # a tf.function's FunctionCache -> its watch() recorders
_originals = {}
_original_maybe_define = _tc._maybe_define_function  # read on every call: a global, not a dict


def _patched_maybe_define(args, kwargs, tracing_options):
    # Every call of every tf.function comes here: it stays as short as a loop over the
    # monitors and one dictionary lookup. In TF's call path each Python or C call costs
    # about 0.4 us (its ~500 calls take ~200 us), so the arguments are not kept per call:
    # a trace finds them in this frame (_traced_call).
    for recorder in active:
        recorder.before_call(tracing_options)
    for recorder in watched.get(tracing_options.function_cache, ()):
        recorder.before_call(tracing_options)
    return _original_maybe_define(args, kwargs, tracing_options)


def listeners(tracing_options):
    """The recorders that hear this function: every monitor, and its own watches."""
    return active + watched.get(tracing_options.function_cache, [])


def watch_cache(cache, recorder):
    """Makes recorder hear every call of the tf.function whose trace cache is `cache`."""
    keep()
    watched.setdefault(cache, []).append(recorder)


def unwatch_cache(cache, recorder):
    recorders = watched.get(cache, [])
    if recorder in recorders:
        recorders.remove(recorder)
    if not recorders:
        watched.pop(cache, None)


def _traced_call():
    """(args, kwargs) of the innermost call in _patched_maybe_define, or None if there is none."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code is not _patched_maybe_define.__code__:
        frame = frame.f_back
    return None if frame is None else (frame.f_locals["args"], frame.f_locals["kwargs"])


def _patched_create(function_type, type_context, func_graph, tracing_options):
    create = _originals["_create_concrete_function"]
    traced = _traced_call()
    if traced is None:  # not a call through the hook: nothing to record it against
        return create(function_type, type_context, func_graph, tracing_options)
    args, kwargs = traced
    states = [(r, s, s.pending) for r in listeners(tracing_options)
              for s in [r.state_for(tracing_options)]]
    fn = python_function(tracing_options)
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_name == "initialize_variables" and userframes.is_library(
            code.co_filename):
        # TF's lifted initialiser for the variables a first call created: part of that call.
        states = [(r, s, f) for r, s, f in states if r.pending_initial() is None]
    if not states:
        return create(function_type, type_context, func_graph, tracing_options)
    call = describe_call(args or (), kwargs or {})
    context = describe_context(_fc.make_function_context(tracing_options.scope_type))
    site = userframes.call_site() if any(s.library for _, s, _ in states) else None
    events = [(r, s, first, r.on_trace(s, first, call, context, site)) for r, s, first in states]
    captured_before = {k: len(v) for k, (_, v) in captures(fn).items()
                       if isinstance(v, (list, dict, set))}
    printed, created = [], []
    real_print = builtins.print

    def recording_print(*a, **k):
        printed.append(" ".join(map(str, a)))
        return real_print(*a, **k)

    def recording_creator(next_creator, **kw):
        variable = next_creator(**kw)
        created.append(variable.name.split(":")[0])
        return variable

    builtins.print = recording_print
    try:
        with tf.variable_creator_scope(recording_creator):
            concrete = create(function_type, type_context, func_graph, tracing_options)
    except BaseException:
        for recorder, state, first, event in events:
            recorder.trace_failed(state, first, event)
        raise
    finally:
        builtins.print = real_print
    signature = concrete.structured_input_signature
    for recorder, state, _, event in events:
        recorder.after_trace(state, event, fn, signature, call, created)
        if printed:
            recorder.side_effect(state, "print() ran while tracing (%r): it prints once per "
                                        "trace, not on every call" % printed[0])
        for name, (_, value) in captures(fn).items():
            if name in captured_before and len(value) != captured_before[name]:
                recorder.side_effect(state, "%s changed size while tracing (%d -> %d): a Python "
                                            "append runs once per trace, not per call"
                                     % (name, captured_before[name], len(value)))
    return concrete


_kept = False  # keep() was called: the hooks stay for the process's life


def installed():
    return _tc._maybe_define_function is _patched_maybe_define


def keep():
    """Installs the hooks for good (a watch() hears its function's calls without wrapping
    them). Every tf.function call in the process then passes the hook: a loop over no
    monitors and one dictionary lookup."""
    global _kept
    _kept = True
    install()


def install():
    global _original_maybe_define
    if installed():
        return
    _original_maybe_define = _tc._maybe_define_function
    _originals["_maybe_define_function"] = _tc._maybe_define_function
    _originals["_create_concrete_function"] = _tc._create_concrete_function
    _tc._maybe_define_function = _patched_maybe_define
    _tc._create_concrete_function = _patched_create


def uninstall():
    if not installed():
        return
    _tc._maybe_define_function = _originals["_maybe_define_function"]
    _tc._create_concrete_function = _originals["_create_concrete_function"]


@contextlib.contextmanager
def recording(recorder):
    if not active:
        install()
    active.append(recorder)
    try:
        yield recorder
    finally:
        active.remove(recorder)
        if not active and not _kept:
            uninstall()


