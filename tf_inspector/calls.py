"""A tf.function call as TF's trace cache sees it, and what changed from one call to another.

describe_call flattens the arguments into {path: leaf}; a leaf is ("tensor", (dtype, shape,
composite)) for what TF traces as a tensor (NumPy scalars too), shape None for an unknown
rank, composite the class of a ragged or sparse tensor, or "Variable" (else None);
("container", text); ("python", repr) for Python numbers and strings; or ("object",
(class name, address, TraceType, repr if its class has its own)) for any other Python
object, compared the way TF compares it (by identity, through a weakref, unless the object
defines __tf_tracing_type__).
diff_calls turns two descriptions into Changes with a reason from retrace.REASONS.
"""

import dataclasses
import numbers
import re

import numpy as np
import tensorflow as tf
from tensorflow.core.function.trace_type import from_value

# NumPy scalars are numbers (np.float64 is a float), but TF traces them as 0-d tensors, bar
# np.str_ and np.bytes_, which it traces as the str and bytes they are.
_TENSORS = (tf.Tensor, tf.Variable, np.ndarray, np.generic, tf.TensorSpec)
_SIMPLE = (numbers.Number, str, bytes, bool, type(None))
# TF compares ragged and sparse tensors by their TypeSpecs: by shape and dtype, like tensors.
# So it does variables (VariableSpec), but a variable and a tensor are two keys.
_COMPOSITES = (tf.RaggedTensor, tf.SparseTensor, tf.RaggedTensorSpec, tf.SparseTensorSpec)
# describe_call's paths of whole arguments: positional ones, and keyword names (identifiers).
_TOP_LEVEL = re.compile(r"args\[\d+\]|[^\[]+")


@dataclasses.dataclass
class Change:
    argument: str
    reason: str
    before: str
    after: str


def _leaves(value, path, out):
    if isinstance(value, _TENSORS + _COMPOSITES) and not isinstance(value, (str, bytes)):
        spec = value if isinstance(value, tf.TypeSpec) else tf.type_spec_from_value(value)
        shape = tf.TensorShape(spec.shape)
        composite = type(value).__name__.replace("Spec", "") if isinstance(
            value, _COMPOSITES) else "Variable" if isinstance(value, tf.Variable) else None
        out[path] = ("tensor", (tf.as_dtype(spec.dtype).name,
                                None if shape.rank is None else tuple(shape.as_list()), composite))
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
        try:
            kind = from_value(value)
        except TypeError:  # TF cannot trace it either; it raises its own error
            kind = None
        # Its own repr says which value it is (Mode.A, tf.int32), where its address cannot.
        own_repr = type(value).__repr__ is not object.__repr__
        out[path] = ("object", (type(value).__name__, hex(id(value)), kind,
                                _shorten(repr(value)) if own_repr else None))
    return out


def _shorten(text, width=60):
    return text if len(text) <= width else text[:width - 3] + "..."


def describe_call(args, kwargs):
    out = {}
    for i, a in enumerate(args):
        _leaves(a, "args[%d]" % i, out)
    for k in sorted(kwargs):
        _leaves(kwargs[k], k, out)
    return out


def show(leaf):
    kind, value = leaf
    if kind == "tensor":
        dtype, shape, composite = value
        return "%s%s%s" % (composite + " " if composite else "", dtype,
                           "[<unknown rank>]" if shape is None else
                           "[" + ",".join("?" if d is None else str(d) for d in shape) + "]")
    if kind == "object":
        name, address, trace_type, text = value
        if hasattr(trace_type, "_ref"):  # identity: say which object
            return "%s (object at %s)" % (text, address) if text else "%s object at %s" % (
                name, address)
        return "%s (tracing type %s)" % (name, trace_type)
    return value


def _reason(old, new):
    if old[0] != new[0]:
        return "python_value" if {old[0], new[0]} & {"python", "object"} else "structure"
    if old[0] == "container":
        return None if old[1] == new[1] else "structure"
    if old[0] == "python":
        return None if old[1] == new[1] else "python_value"
    if old[0] == "object":
        same = old[1][2] is not None and old[1][2] == new[1][2]
        return None if same else "python_object"
    if old[1][2] != new[1][2]:
        return "structure"  # a dense tensor became ragged or sparse, or back
    if old[1][0] != new[1][0]:
        return "dtype"
    return None if old[1][1] == new[1][1] else "shape"


def diff_calls(before, after):
    """The Changes from one call description to another, in argument order."""
    changes = []
    for path in sorted(set(before) | set(after), key=lambda p: (p.count("["), p)):
        old, new = before.get(path), after.get(path)
        if old is None or new is None:
            # An argument of *args or **kwargs that one call lacks has no container to
            # report it: its key in TF has more or fewer arguments, a structure change.
            if _TOP_LEVEL.fullmatch(path):
                changes.append(Change(path, "structure", "absent" if old is None else show(old),
                                      "absent" if new is None else show(new)))
            continue  # else reported at the container whose description changed
        reason = _reason(old, new)
        if reason:
            changes.append(Change(path, reason, show(old), show(new)))
    # A changed container explains everything below it.
    return [c for c in changes if not any(c.argument.startswith(p.argument + "[")
                                          for p in changes if p.reason == "structure")]


def generalised(call, signature):
    """{path: traced shape} where TF traced a tensor argument more generally than it was
    passed (input_signature, reduce_retracing): the calls that shape covers reuse the graph."""
    traced = describe_call(*signature)
    return {path: show(traced[path]) for path, leaf in call.items()
            if leaf[0] == "tensor" and path in traced and traced[path][0] == "tensor"
            and traced[path][1][1] != leaf[1][1]}


def describe_context(function_context):
    """The parts of TF's calling context (its cache key beside the arguments), as text."""
    ctx = function_context.context
    graph = ctx.parent_graph
    out = {"<called from>": "eager code" if graph is None else
           "inside a %s%s (id %s)" % (
               type(graph).__name__, " %r" % graph.name if hasattr(graph, "name") else "",
               hex(id(graph)))}
    if ctx.device_functions:
        out["<device>"] = ", ".join(map(str, ctx.device_functions))
    if ctx.xla_context_id:
        out["<xla context>"] = hex(ctx.xla_context_id)
    if ctx.in_cross_replica_context:
        out["<distribution>"] = "cross-replica context"
    if ctx.variable_policy is not None:
        out["<saving>"] = str(ctx.variable_policy)
    return out


def diff_contexts(before, after):
    return [Change(key, "context", before.get(key, "none"), after.get(key, "none"))
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
