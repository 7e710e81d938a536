"""Which call retraced a tf.function, and why; and the silent traps that need no retrace.

    f = tf_inspector.watch(my_tf_function)     # calls pass through unchanged
    f(x); f(y)
    print(f.explain())                          # every trace, its reason and the fix

    with tf_inspector.monitor() as m:           # every tf.function called in the block
        train()
    m.events, m.warnings

Reasons (a fixed vocabulary, REASONS): initial; shape; dtype; python_value (a new
Python number or string, or a tensor passed where a Python value was); python_object
(a different Python object: TF compares them by identity); structure (nesting, list
length or dict keys); context (called eagerly vs. from another graph, another device
scope); new_function (a tf.function object made anew for the same Python code, as in
a loop); unexplained (TF's cache key changed in a part tf_inspector cannot see).
A first call that creates tf.Variables is one "initial" event although TF traces it
twice. Functions TensorFlow and Keras define for themselves (fit's train step,
tf.data's map wrappers) are grouped under the user's call that made them.
Warnings: stale_capture (a closure or global value changed after tracing; the graph
keeps the old one) and side_effect (print, or a list or dict changed, while tracing:
these run once per trace, not once per call).

How: TF's tracing entry points (tracing_compilation._maybe_define_function, which every
call of every tf.function goes through, and _create_concrete_function, which runs only
when it traces) are wrapped while a monitor() block runs, and for good once a watch()
exists; a monitor() block puts its recorder on the list the wrappers serve, a watch()
registers its recorder for its tf.function's trace cache. A call that does not trace
costs one dictionary lookup per recorder; the arguments are described only when TF traces.
"""

import copy
import dataclasses
import inspect
import operator
import weakref

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import tracing_compilation as _tc

from tf_inspector import tracehooks, userframes
from tf_inspector.calls import Change, describe_call, diff_calls, diff_contexts, generalised
from tf_inspector.tracehooks import captures, is_simple, python_function, read_capture

REASONS = ("initial", "shape", "dtype", "python_value", "python_object", "structure", "context",
           "new_function", "unexplained")

FIXES = {
    "shape": "give the tf.function an input_signature with None for the varying dimensions "
             "(tf.TensorSpec([None, ...])), or reduce_retracing=True",
    "dtype": "cast the inputs to one dtype before the call",
    "python_value": "pass tensors instead of Python numbers or strings (tf.constant(x)), and "
                    "always the same kind: every new Python value is a new graph",
    "python_object": "reuse one object across calls, pass the tensors it holds as arguments, or "
                     "give its class a __tf_tracing_type__ (tf.types.experimental."
                     "SupportsTracingProtocol) equal for objects that may share a graph: TF "
                     "compares other Python objects by identity",
    "structure": "keep the nesting, list lengths and dict keys of the arguments the same between "
                 "calls (or pass tensors of varying size instead of varying lists)",
    "context": "call the tf.function from one context (eagerly, or from one enclosing "
               "tf.function, under one device scope): each context keeps its own graphs",
    "new_function": "create the tf.function once, outside the loop or function that runs it, "
                    "and reuse it",
    "unexplained": "TF's trace cache key changed in a part tf_inspector does not read (the "
                   "types of by-reference captures, for one); compare the traces' "
                   "function.get_concrete_function(...).function_type",
    "stale_capture": "pass the value as an argument (a tensor), or keep it in a tf.Variable: "
                     "Python values read by traced code are frozen into the graph",
    "side_effect": "use tf.print instead of print, and keep Python lists and dicts out of "
                   "traced code (or use tf.TensorArray)",
}
_NO_VARIABLE_CREATION = _tc.ScopeType.NO_VARIABLE_CREATION
# A retrace is explained against the trace it differs from least: in the fewest arguments,
# then in the mildest kind of change, then the deepest in the nesting (more of the call
# matched). A tensor's new shape beside a trace of another shape is the comparison a user
# makes, not "a tensor where a Python number was" against an older trace that took a number,
# though both are one change; and [x, (x,)] differs from [x, [x]] in its inner list, from
# {"a": x} as a whole. Equal ones go to the earliest trace.
_MILDEST_FIRST = ("shape", "dtype", "context", "python_value", "python_object", "structure")


def _closeness(changes):
    return (len(changes), max((_MILDEST_FIRST.index(c.reason) for c in changes), default=0),
            -min((c.argument.count("[") for c in changes), default=0))


@dataclasses.dataclass
class TraceEvent:
    function: str
    call_index: int  # 1-based, counting the calls of this tf.function object
    reasons: list
    changes: list
    site: str = None  # for TF's and Keras's own functions: the user's call that traced them
    variables: list = dataclasses.field(default_factory=list)  # made by the first trace
    traced_as: dict = dataclasses.field(default_factory=dict)  # {argument: generalised shape}

    @property
    def argument(self):
        return self.changes[0].argument if self.changes else None

    @property
    def before(self):
        return self.changes[0].before if self.changes else None

    @property
    def after(self):
        return self.changes[0].after if self.changes else None

    def describe(self):
        if self.reasons == ["initial"] and self.variables:
            what = ("initial, with variable creation (%s): TF traces twice, once creating the "
                    "variables and once using them" % ", ".join(self.variables))
        else:
            what = ", ".join("%s %s: %s -> %s" % (c.argument, c.reason, c.before, c.after)
                             for c in self.changes) or self.reasons[0]
        if self.traced_as:
            what += "; traced as %s, which later calls of those shapes reuse" % ", ".join(
                "%s %s" % kv for kv in self.traced_as.items())
        return "call %d traced (%s): %s" % (self.call_index, ", ".join(self.reasons), what)


@dataclasses.dataclass
class TraceWarning:
    kind: str  # stale_capture or side_effect
    function: str
    message: str


# -- the recorder ---------------------------------------------------------------------------

class _FunctionState:
    def __init__(self, name, code, cache, library):
        self.name, self.code, self.library = name, code, library
        # Held so that its id, the recorder's key, is not reused while recording:
        # once a tf.function is collected a new one's cache can get the same id,
        # and its first trace would read as a retrace (FunctionCache takes no weakref).
        self.cache = cache
        self.calls = 0
        self.traces = []   # (call description, context description) of past traces
        self.frozen = []   # (name, where, value) of simple captured values at the last trace
        self.pending = None  # see Recorder.before_call
        self.reported = set()
        self.initial = None  # the first trace's event while TF still owes its second trace


class Recorder:
    """Collects trace events and warnings; see watch() and monitor()."""

    def __init__(self):
        self.events, self.warnings = [], []
        self._states = {}
        self._codes_seen = set()

    @property
    def trace_count(self):
        return len(self.events)

    def state_for(self, tracing_options):
        cache = tracing_options.function_cache
        state = self._states.get(id(cache))
        if state is not None:
            return state
        fn = python_function(tracing_options)
        code = getattr(fn, "__code__", None)
        state = _FunctionState(getattr(fn, "__qualname__", tracing_options.name), code, cache,
                               code is not None and userframes.is_library(code.co_filename))
        # Traces made before this recorder heard the function are earlier traces all the
        # same: its next trace is a retrace against them, not its initial one. Their
        # calling contexts are not kept (None). (TF's own one-off functions have no cache.)
        state.traces = [(describe_call(*c.structured_input_signature), None)
                        for c in (cache.values() if cache is not None else ())]
        self._states[id(cache)] = state
        return state

    def before_call(self, tracing_options):
        """Counts a call of a recorded function and checks its captures. state.pending is
        the first trace's event when this is TF's second pass of a first call that created
        variables (not a new call), else None; a trace in this call reads it."""
        state = self._states.get(id(tracing_options.function_cache))  # the common case, inline
        if state is None:
            state = self.state_for(tracing_options)
        first, state.initial = state.initial, None
        state.pending = first
        if first is not None and tracing_options.scope_type == _NO_VARIABLE_CREATION:
            return
        state.calls += 1
        for name, where, old in state.frozen:
            new = read_capture(where, name, old)
            if new is not old and new != old and (name, repr(new)) not in state.reported:
                state.reported.add((name, repr(new)))
                self.warnings.append(TraceWarning("stale_capture", state.name, (
                    "%s read %s = %r when it was last traced; at call %d it is %r, but the graph "
                    "still uses %r (a changed Python value does not retrace)"
                    % (state.name, name, old, state.calls, new, old))))

    def on_trace(self, state, first, call, context, site):
        if first is not None:
            return first  # TF's second trace of a first call that created variables
        if state.traces:
            best = min((diff_calls(c, call) or (diff_contexts(x, context) if x is not None else [])
                        for c, x in state.traces), key=_closeness)
            best = best or [Change("the cache key", "unexplained", "the earlier traces",
                                   "a key none of them matched")]
            event = TraceEvent(state.name, state.calls, list(dict.fromkeys(c.reason for c in best)),
                               best)
        else:
            again = state.code is not None and state.code in self._codes_seen and not state.library
            event = TraceEvent(state.name, state.calls, ["new_function" if again else "initial"], [])
        if state.library:
            event.site = site or "TensorFlow's own calls"
        self.events.append(event)
        state.traces.append((call, context))
        return event

    def trace_failed(self, state, first, event):
        """Undoes on_trace for a trace that raised: TF keeps no graph of it and counts none,
        so the next call that traces is not a retrace of it."""
        if first is None:
            self.events.remove(event)
            state.traces.pop()

    def after_trace(self, state, event, fn, signature, call, variables):
        event.traced_as.update(generalised(call, signature))
        if state.code is not None:  # only once traced: a trace that raised makes no graph
            self._codes_seen.add(state.code)
        if variables and event.reasons == ["initial"] and not event.variables:
            event.variables.extend(variables)
            state.initial = event  # TF calls (and traces) again, without variable creation
        state.frozen = [(name, where, value) for name, (where, value) in captures(fn).items()
                        if is_simple(value)]

    def pending_initial(self):
        """The first-trace event whose variables TF's initialiser function is for, if any."""
        return next((s.initial for s in self._states.values() if s.initial is not None), None)

    def side_effect(self, state, message):
        self.warnings.append(TraceWarning("side_effect", state.name, message))

    def explain(self):
        lines, groups = [], {}
        for e in self.events:
            groups.setdefault((e.site, None if e.site else e.function), []).append(e)
        for (site, name), events in groups.items():
            if site:
                names = ", ".join(dict.fromkeys(e.function.rpartition(".")[2] for e in events))
                lines.append("%s: TensorFlow/Keras traced %d function%s of their own (%s)" % (
                    site, len(events), "" if len(events) == 1 else "s", names))
                events = [e for e in events if e.reasons != ["initial"]]
            else:
                # Several tf.function objects can share a name (new_function): count all their calls.
                calls = sum(s.calls for s in self._states.values() if s.name == name)
                lines.append("%s: traced %d time%s in %d call%s" % (
                    name, len(events), "" if len(events) == 1 else "s", calls,
                    "" if calls == 1 else "s"))
            lines.extend("  " + e.describe() for e in events)
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


def _is_unbound_method(function):
    """A tf.function defined in a class body, read from the class: calls through instances
    go to per-instance copies of it (Function.__get__), never to its own trace cache."""
    python = inspect.unwrap(function.python_function)
    owner = getattr(python, "__qualname__", "").split(".")[-2:-1]
    try:
        first = next(iter(inspect.signature(python).parameters), None)
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False
    return first == "self" and owner not in ([], ["<locals>"])


def monitor():
    """A context manager recording the traces of every tf.function called inside it."""
    return tracehooks.recording(Recorder())


class watch:
    """Wraps a tf.function (or a Python function, made one) and records every trace of it
    with its reason. It hears every call of that tf.function, made through it or not, and
    calls through it go straight to the tf.function. See the module docstring. A copy
    wraps the same tf.function, with the events recorded so far (from then on both hear
    its calls); an unpickled one an untraced copy."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError("watch needs a tf.function or a Python function, got %s"
                            % type(fn).__name__)
        if hasattr(fn, "python_function") and _is_unbound_method(fn):
            name = fn.python_function.__qualname__
            raise TypeError("watch(%s) would hear no calls: TF gives each instance its own "
                            "tf.function and trace cache; watch the bound method "
                            "(instance.%s)" % (name, name.rpartition(".")[2]))
        self.function = fn if hasattr(fn, "python_function") else tf.function(fn)
        cache = getattr(self.function, "_function_cache", None)  # TF keeps it private
        if cache is None:
            raise TypeError("watch needs a tf.function or a Python function, got %s (it has "
                            "python_function but no trace cache)" % type(fn).__name__)
        self._recorder = Recorder()
        tracehooks.watch_cache(cache, self._recorder)
        weakref.finalize(self, tracehooks.unwatch_cache, cache, self._recorder)

    # A call is the tf.function's own: Python finds __call__ on the class, and this property
    # hands it the tf.function through C (attrgetter), with no Python frame of watch()'s own
    # in the call path (where each one cost about 2 us on an AMD EPYC).
    __call__ = property(operator.attrgetter("function"))

    def __getattr__(self, name):  # get_concrete_function, experimental_*...
        if name.startswith("__") or "function" not in self.__dict__:
            raise AttributeError(name)  # copy and pickle probe dunders before __init__ ran
        return getattr(self.function, name)

    def __copy__(self):
        clone = watch(self.function)
        clone.__setstate__({"events": self.events, "warnings": self.warnings})
        return clone

    def __deepcopy__(self, memo):  # a traced tf.function cannot be deep-copied: share it
        clone = watch(self.function)
        clone.__setstate__(copy.deepcopy({"events": self.events, "warnings": self.warnings}, memo))
        return clone

    def __reduce__(self):
        # TF pickles a tf.function only untraced: an unpickled watch traces anew on first call.
        untraced = self.function._clone(None)  # noqa: SLF001 - the same options, no graphs
        return watch, (untraced,), {"events": list(self.events), "warnings": list(self.warnings)}

    def __setstate__(self, state):
        self._recorder.events.extend(state["events"])
        self._recorder.warnings.extend(state["warnings"])

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
