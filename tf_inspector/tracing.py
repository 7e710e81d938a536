"""trace_and_inspect: trace a function with tf.function and describe its FuncGraph.

    report = tf_inspector.trace_and_inspect(fn, tf.ones([2, 3]))
    print(report.to_text())

`fn` is a plain Python function or a tf.function; inputs are what it would be
called with (tensors, arrays, Python values, or tf.TensorSpec for symbolic
shapes). Functions the graph calls (while/cond bodies, nested tf.functions)
become sub-reports, recursively.
"""

import tensorflow as tf

from tf_inspector import cost, symbolic, userframes
from tf_inspector.report import GraphReport, NodeInfo, TensorInfo
from tf_inspector.xla import xla_cost


class TracingError(RuntimeError):
    """The function could not be traced into a graph. The message carries the user's own
    error message and line; so do the attributes user_message, file, line (None when no
    user frame raised)."""

    def __init__(self, name, error):
        where = userframes.user_error(error)
        if where is None:
            self.user_message, self.file, self.line = "%s: %s" % (type(error).__name__, error), None, None
            super().__init__("could not trace %s: %s" % (name, self.user_message))
            return
        self.user_message, self.file, self.line = where.message, where.file, where.line
        super().__init__("could not trace %s: %s\n  at %s:%d in %s: %s" % (
            name, where.message, where.file, where.line, where.function, where.source))


def _tensor_info(t):
    shape = t.shape
    dims = None if shape.rank is None else tuple(shape.as_list())
    return TensorInfo(dtype=t.dtype.name, shape=dims)


def _numpy_dtype(dtype):
    try:
        return dtype.as_numpy_dtype.__name__ if dtype.is_numpy_compatible else "object"
    except TypeError:
        return "object"


def _io(tensors, to_expr):
    return [(None if t.shape.rank is None else tuple(d if d is None or to_expr is None
                                                     else to_expr(d) for d in t.shape.as_list()),
             _numpy_dtype(t.dtype)) for t in tensors]


def _attrs(op):
    found = {}
    for name in ("transpose_a", "transpose_b", "adj_x", "adj_y"):
        if name in op.node_def.attr:
            found[name] = op.get_attr(name)
    return found


def _called_functions(op):
    """(attribute, name) of each function an op calls (while/cond bodies, function calls)."""
    names = []
    for key in sorted(op.node_def.attr):
        value = op.node_def.attr[key]
        if value.HasField("func"):
            names.append((key, value.func.name))
        elif value.HasField("list") and value.list.func:
            names.extend((key, f.name) for f in value.list.func)
    return names


def _estimate(op, to_expr=None):
    """(flops, bytes) of one op; to_expr, if given, maps each dimension to a formula."""
    return cost.estimate(op.type, _io(op.inputs, to_expr), _io(op.outputs, to_expr), _attrs(op))


def build_report(graph, name=None):
    """A GraphReport of a FuncGraph (and, recursively, the functions it calls)."""
    nodes, subgraphs, notes = [], {}, []
    for op in graph.get_operations():
        callees = []
        for role, fname in _called_functions(op):
            function = graph._functions.get(fname)  # noqa: SLF001 - TF keeps them only here
            if function is not None and fname not in subgraphs:
                subgraphs[fname] = build_report(function.graph, fname)
            if fname in subgraphs:
                callees.append((role, fname, subgraphs[fname]))
        if op.type in cost.CALLS or op.type in cost.DATA_DEPENDENT:
            flops, moved, note = cost.control_flow(op.type, callees)
            if note:
                notes.append("%s (%s) %s" % (op.name, op.type, note))
        else:
            flops, moved = _estimate(op)
        nodes.append(NodeInfo(
            name=op.name, op=op.type,
            inputs=[t.name for t in op.inputs] + ["^" + c.name for c in op.control_inputs],
            outputs=[_tensor_info(t) for t in op.outputs], device=op.device,
            flops=flops, bytes=moved))
    return GraphReport(function=name or graph.name, nodes=nodes, subgraphs=subgraphs, notes=notes)


def trace_and_inspect(fn, *inputs, dim_names=None, xla=False, mlir=False, **kwargs):
    """Traces `fn` on `inputs` and returns the GraphReport of its concrete function.

    Unknown dimensions (tf.TensorSpec([None, 3])) make costs formulas in them, named by
    axis: dim_names[axis], default ("batch", "d1", ...); report.cost(batch=8) evaluates.
    xla=True also compiles and runs it with XLA (inputs of known shape): report.xla;
    mlir=True adds its TF dialect and StableHLO lowering: report.mlir."""
    if not callable(fn):
        raise TypeError("trace_and_inspect needs a callable (a Python function or a tf.function), "
                        "got %s" % type(fn).__name__)
    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    try:
        concrete = function.get_concrete_function(*inputs, **kwargs)
    except Exception as e:  # TF raises many types while tracing user code
        raise TracingError(getattr(fn, "__name__", type(fn).__name__), e) from e
    report = build_report(concrete.graph, concrete.name.decode()
                          if isinstance(concrete.name, bytes) else concrete.name)
    # What TF traced: input_signature and reduce_retracing can leave dimensions unknown
    # that the inputs had.
    traced = concrete.structured_input_signature
    axes = symbolic.unknown_axes(traced)
    if axes:
        symbols = symbolic.symbols_for(axes, dim_names)
        report.inputs = [tuple(symbols[a] if d is None else d for a, d in enumerate(s.shape.as_list()))
                         for s in symbolic.tensor_specs(traced)]
        try:
            symbolic.symbolic_costs(report, concrete.graph, symbols, _estimate)
        except (ValueError, tf.errors.InvalidArgumentError) as e:  # a graph TF cannot re-import
            report.notes.append("no cost formulas: re-importing the graph at probe sizes failed "
                                "(%s: %s)" % (type(e).__name__, str(e).split("\n")[0]))
    if xla:
        report.xla = xla_cost(fn, *inputs, **kwargs)
    if mlir:
        from tf_inspector.mlir import mlir_view  # it builds reports: a cycle at import time
        report.mlir = mlir_view(function, *inputs, **kwargs)
    return report
