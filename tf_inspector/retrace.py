"""Which call retraced a tf.function, and why; and the silent traps that need no retrace.

    f = tf_inspector.watch(my_tf_function)     # calls pass through unchanged
    f(x); f(y)
    print(f.explain())                          # every trace, its reason and the fix

    with tf_inspector.monitor() as m:           # every tf.function called in the block
        train()
    m.events, m.warnings

Reasons (a fixed vocabulary): initial, shape, dtype, python_value, structure
(nesting, list length or dict keys), new_function (a tf.function object made
anew for the same Python code, as in a loop). Warnings: stale_capture (a
closure or global value changed after tracing; the graph keeps the old one)
and side_effect (print, a list or dict changed, a tf.Variable created, while
tracing: these run once per trace, not once per call).

How: while a watch()ed call or a monitor() block runs, TF's tracing entry
points (tracing_compilation._maybe_define_function, which every call of every
tf.function goes through, and _create_concrete_function, which runs only when
it traces) are wrapped to see each call's arguments and each new trace.
"""

import builtins
import contextlib
import dataclasses
import inspect
import numbers

import numpy as np
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import tracing_compilation as _tc

REASONS = ("initial", "shape", "dtype", "python_value", "structure", "new_function")

FIXES = {
    "shape": "give the tf.function an input_signature with None for the varying dimensions "
             "(tf.TensorSpec([None, ...])), or reduce_retracing=True",
    "dtype": "cast the inputs to one dtype before the call",
    "python_value": "pass tensors instead of Python numbers or strings (tf.constant(x)): every "
                    "new Python value is a new graph",
    "structure": "keep the nesting, list lengths and dict keys of the arguments the same between "
                 "calls (or pass tensors of varying size instead of varying lists)",
    "new_function": "create the tf.function once, outside the loop or function that runs it, "
                    "and reuse it",
    "stale_capture": "pass the value as an argument (a tensor), or keep it in a tf.Variable: "
                     "Python values read by traced code are frozen into the graph",
    "side_effect": "use tf.print instead of print, keep Python lists and dicts out of traced code "
                   "(or use tf.TensorArray), and create tf.Variables outside the tf.function",
}


@dataclasses.dataclass
class Change:
    argument: str
    reason: str
    before: str
    after: str


@dataclasses.dataclass
class TraceEvent:
    function: str
    call_index: int  # 1-based, counting the calls of this tf.function object
    reasons: list
    changes: list

    @property
    def argument(self):
        return self.changes[0].argument if self.changes else None

    @property
    def before(self):
        return self.changes[0].before if self.changes else None

    @property
    def after(self):
        return self.changes[0].after if self.changes else None


@dataclasses.dataclass
class TraceWarning:
    kind: str  # stale_capture or side_effect
    function: str
    message: str


# -- describing arguments -------------------------------------------------------------------

_SIMPLE = (numbers.Number, str, bytes, bool, type(None), np.generic)


def _leaves(value, path, out):
    """Flattens nested lists/tuples/dicts into {path: ("container"|"tensor"|"python", desc)}."""
    if isinstance(value, (tf.Tensor, tf.Variable, np.ndarray, tf.TensorSpec)):
        shape = tuple(tf.TensorShape(value.shape).as_list()) if value.shape is not None else None
        dtype = tf.as_dtype(value.dtype).name
        out[path] = ("tensor", (dtype, shape))
    elif isinstance(value, dict):
        out[path] = ("container", "dict with keys %s" % sorted(map(str, value)))
        for key in sorted(value, key=str):
            _leaves(value[key], "%s[%r]" % (path, key), out)
    elif isinstance(value, (list, tuple)):
        out[path] = ("container", "%s of %d" % (type(value).__name__, len(value)))
        for i, item in enumerate(value):
            _leaves(item, "%s[%d]" % (path, i), out)
    elif isinstance(value, _SIMPLE):
        out[path] = ("python", repr(value))
    else:
        out[path] = ("python", "<%s>" % type(value).__name__)
    return out


def describe_call(args, kwargs):
    out = {}
    for i, a in enumerate(args):
        _leaves(a, "args[%d]" % i, out)
    for k in sorted(kwargs):
        _leaves(kwargs[k], k, out)
    return out


def _show(leaf):
    kind, value = leaf
    if kind == "tensor":
        dtype, shape = value
        return "%s%s" % (dtype, "[?]" if shape is None else
                         "[" + ",".join("?" if d is None else str(d) for d in shape) + "]")
    return value


def diff_calls(before, after):
    """The Changes from one call description to another, in argument order."""
    changes = []
    for path in sorted(set(before) | set(after), key=lambda p: (p.count("["), p)):
        old, new = before.get(path), after.get(path)
        if old is None or new is None:
            continue  # reported at the container whose description changed
        if old[0] != new[0]:
            reason = "python_value" if "python" in (old[0], new[0]) else "structure"
        elif old[0] == "container":
            reason = None if old[1] == new[1] else "structure"
        elif old[0] == "python":
            reason = None if old[1] == new[1] else "python_value"
        else:
            reason = None
            if old[1][0] != new[1][0]:
                reason = "dtype"
            elif old[1][1] != new[1][1]:
                reason = "shape"
        if reason:
            changes.append(Change(path, reason, _show(old), _show(new)))
    # A changed container explains everything below it.
    return [c for c in changes if not any(c.argument.startswith(p.argument + "[")
                                          for p in changes if p.reason == "structure")]


# -- captured values and side effects ------------------------------------------------------

def _python_function(tracing_options):
    fn = tracing_options.python_function
    fn = getattr(fn, "__func__", fn)
    return inspect.unwrap(fn)


def _captured(fn):
    """{name: value} of the closure cells and globals the function's code reads."""
    found = {}
    code = getattr(fn, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    globals_ = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in globals_:
            found[name] = globals_[name]
    return found


def _simple_values(captured):
    return {k: v for k, v in captured.items() if isinstance(v, _SIMPLE) and not callable(v)}


def _sizes(captured):
    return {k: len(v) for k, v in captured.items() if isinstance(v, (list, dict, set))}


# -- the recorder ---------------------------------------------------------------------------

class _FunctionState:
    def __init__(self, name, code, cache):
        self.name, self.code = name, code
        # Held so that its id, the recorder's key, is not reused while recording:
        # once a tf.function is collected a new one's cache can get the same id,
        # and its first trace would read as a retrace (FunctionCache takes no weakref).
        self.cache = cache
        self.calls = 0
        self.traces = []   # call descriptions of past traces
        self.frozen = {}   # simple captured values at the last trace
        self.reported = set()


class Recorder:
    """Collects trace events and warnings; see watch() and monitor()."""

    def __init__(self, accept=None):
        self.accept = accept  # a predicate on the Python function, or None for all
        self.events, self.warnings = [], []
        self._states = {}
        self._codes_seen = set()

    @property
    def trace_count(self):
        return len(self.events)

    # Called by the patched TF entry points.
    def _state(self, tracing_options):
        fn = _python_function(tracing_options)
        if self.accept is not None and not self.accept(fn):
            return None
        key = id(tracing_options.function_cache)
        if key not in self._states:
            name = getattr(fn, "__qualname__", getattr(fn, "__name__", tracing_options.name))
            self._states[key] = _FunctionState(
                name, getattr(fn, "__code__", None), tracing_options.function_cache)
        return self._states[key]

    def _before_call(self, state, tracing_options):
        state.calls += 1
        if not state.traces:
            return
        current = _simple_values(_captured(_python_function(tracing_options)))
        for name, old in state.frozen.items():
            new = current.get(name, old)
            if new is not old and new != old and (name, repr(new)) not in state.reported:
                state.reported.add((name, repr(new)))
                self.warnings.append(TraceWarning("stale_capture", state.name, (
                    "%s read %s = %r when it was last traced; at call %d it is %r, but the graph "
                    "still uses %r (a changed Python value does not retrace)"
                    % (state.name, name, old, state.calls, new, old))))

    def _on_trace(self, state, tracing_options, call):
        if state.traces:
            best = min((diff_calls(t, call) for t in state.traces), key=len)
            reasons = list(dict.fromkeys(c.reason for c in best)) or ["structure"]
            event = TraceEvent(state.name, state.calls, reasons, best)
        else:
            first = "new_function" if state.code is not None and state.code in self._codes_seen else "initial"
            event = TraceEvent(state.name, state.calls, [first], [])
        self.events.append(event)
        state.traces.append(call)
        if state.code is not None:
            self._codes_seen.add(state.code)
        state.frozen = _simple_values(_captured(_python_function(tracing_options)))

    def _side_effect(self, state, message):
        self.warnings.append(TraceWarning("side_effect", state.name, message))

    def explain(self):
        lines = []
        by_function = {}
        for e in self.events:
            by_function.setdefault(e.function, []).append(e)
        for name, events in by_function.items():
            # Several tf.function objects can share a name (new_function): count all their calls.
            calls = sum(s.calls for s in self._states.values() if s.name == name)
            lines.append("%s: traced %d time%s in %d call%s" % (
                name, len(events), "" if len(events) == 1 else "s", calls, "" if calls == 1 else "s"))
            for e in events:
                what = ", ".join("%s %s: %s -> %s" % (c.argument, c.reason, c.before, c.after)
                                 for c in e.changes) or e.reasons[0]
                lines.append("  call %d traced (%s): %s" % (e.call_index, ", ".join(e.reasons), what))
        for w in self.warnings:
            lines.append("warning %s in %s: %s" % (w.kind, w.function, w.message))
        kinds = [r for e in self.events for r in e.reasons if r != "initial"] + [w.kind for w in self.warnings]
        if kinds:
            lines.append("")
            lines.append("How to fix:")
            for kind in dict.fromkeys(kinds):
                lines.append("- %s: %s" % (kind, FIXES[kind]))
        elif not lines:
            lines.append("no tf.function was traced")
        return "\n".join(lines)


_active = []  # recorders, innermost last
_originals = {}
_tracing = []  # the calls in progress, innermost last: (recorder states, call description)


def _patched_maybe_define(args, kwargs, tracing_options):
    states = [(r, r._state(tracing_options)) for r in _active]
    states = [(r, s) for r, s in states if s is not None]
    for recorder, state in states:
        recorder._before_call(state, tracing_options)
    call = describe_call(args or (), kwargs or {}) if states else None
    _tracing.append((states, call))
    try:
        return _originals["_maybe_define_function"](args, kwargs, tracing_options)
    finally:
        _tracing.pop()


def _patched_create(function_type, type_context, func_graph, tracing_options):
    states, call = _tracing[-1] if _tracing else ([], None)
    if not states:
        return _originals["_create_concrete_function"](function_type, type_context, func_graph,
                                                        tracing_options)
    for recorder, state in states:
        recorder._on_trace(state, tracing_options, call)
    fn = _python_function(tracing_options)
    sizes_before = _sizes(_captured(fn))
    printed, created = [], []
    real_print = builtins.print

    def recording_print(*a, **k):
        printed.append(" ".join(map(str, a)))
        return real_print(*a, **k)

    def recording_creator(next_creator, **kw):
        created.append(kw.get("name") or "unnamed")
        return next_creator(**kw)

    builtins.print = recording_print
    try:
        with tf.variable_creator_scope(recording_creator):
            return _originals["_create_concrete_function"](function_type, type_context, func_graph,
                                                            tracing_options)
    finally:
        builtins.print = real_print
        sizes_after = _sizes(_captured(fn))
        for recorder, state in states:
            if printed:
                recorder._side_effect(state, "print() ran while tracing (%r): it prints once per "
                                             "trace, not on every call" % printed[0])
            for name in created:
                recorder._side_effect(state, "a tf.Variable (%s) was created while tracing" % name)
            for name, size in sizes_after.items():
                if sizes_before.get(name, size) != size:
                    recorder._side_effect(state, "%s changed size while tracing (%d -> %d): a "
                                                 "Python append runs once per trace, not per call"
                                          % (name, sizes_before[name], size))


@contextlib.contextmanager
def _recording(recorder):
    if not _active:
        _originals["_maybe_define_function"] = _tc._maybe_define_function
        _originals["_create_concrete_function"] = _tc._create_concrete_function
        _tc._maybe_define_function = _patched_maybe_define
        _tc._create_concrete_function = _patched_create
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)
        if not _active:
            _tc._maybe_define_function = _originals["_maybe_define_function"]
            _tc._create_concrete_function = _originals["_create_concrete_function"]


def monitor():
    """A context manager recording the traces of every tf.function called inside it."""
    return _recording(Recorder())


class watch:
    """Wraps a tf.function (or a Python function, made one): calls pass through unchanged,
    and every trace is recorded with its reason. See the module docstring."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError("watch needs a tf.function or a Python function, got %s"
                            % type(fn).__name__)
        self.function = fn if hasattr(fn, "python_function") else tf.function(fn)
        target = inspect.unwrap(getattr(self.function.python_function, "__func__",
                                        self.function.python_function))
        self._recorder = Recorder(accept=lambda f: f is target)

    def __call__(self, *args, **kwargs):
        with _recording(self._recorder):
            return self.function(*args, **kwargs)

    def __getattr__(self, name):  # get_concrete_function, experimental_*...
        return getattr(self.function, name)

    @property
    def events(self):
        return self._recorder.events

    @property
    def warnings(self):
        return self._recorder.warnings

    @property
    def trace_count(self):
        return self._recorder.trace_count

    def explain(self):
        return self._recorder.explain()
