"""A cost estimate per graph node: floating-point operations and bytes moved.

FLOPs count a multiply-add as 2, and agree with TensorFlow's own registered statistics
(ops.get_stats_for_node_def) wherever TF has one, except by design: a transcendental
counts more than one (Log 4, Rsqrt 4, Pow 8: TF counts 1, 2, 1), and a reduction one per
input element (TF: one fewer per output element, Mean excepted). Bytes moved are the
sizes of the node's inputs and outputs (what it must read and write at least). An op
type with no rule here is reported as unknown (None), never guessed; structural ops
(constants, identities, reshapes, placeholders) cost nothing. A node that runs other
functions of the graph costs what they cost (control_flow).
"""

import math

import numpy as np

# Ops that move no data and compute nothing (or only metadata).
FREE = {
    "Placeholder", "Const", "Identity", "IdentityN", "NoOp", "Reshape", "Shape", "ShapeN", "Size",
    "Rank", "ExpandDims", "Squeeze", "StopGradient", "ReadVariableOp", "VarHandleOp",
    "_Arg", "_Retval", "PreventGradient", "Snapshot", "EnsureShape", "TensorListReserve",
}
# Ops that run other functions of the graph (tracing.py reports those as subgraphs): a call
# runs its callee once; a branch runs one of its branches and a loop its body some number of
# times, chosen by values known only when the graph runs.
CALLS = {"PartitionedCall", "StatefulPartitionedCall"}
DATA_DEPENDENT = {"If", "StatelessIf", "Case", "StatelessCase", "While", "StatelessWhile"}
# Elementwise ops: FLOPs per output element.
ELEMENTWISE = {
    "Add": 1, "AddV2": 1, "Sub": 1, "Mul": 1, "RealDiv": 1, "Div": 1, "DivNoNan": 1, "Maximum": 1,
    "Minimum": 1, "Neg": 1, "Abs": 1, "Square": 1, "SquaredDifference": 2, "BiasAdd": 1, "Relu": 1,
    "Relu6": 1, "LeakyRelu": 2, "Elu": 4, "Selu": 4, "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4,
    "Log1p": 4, "Erfc": 8, "Sqrt": 4, "Rsqrt": 4, "Reciprocal": 1, "Pow": 8, "Erf": 8, "Gelu": 8, "Softplus": 6,
    "Cast": 1, "Less": 1, "LessEqual": 1, "Greater": 1, "GreaterEqual": 1, "Equal": 1, "NotEqual": 1,
    "LogicalAnd": 1, "LogicalOr": 1, "LogicalNot": 1, "Select": 1, "SelectV2": 1, "FloorMod": 1,
    "FloorDiv": 1, "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "ClipByValue": 2,
    "Softmax": 5, "LogSoftmax": 5, "WarpSoftmax": 5,
}
REDUCTIONS = {"Sum", "Mean", "Max", "Min", "Prod", "ArgMax", "ArgMin", "All", "Any"}
# Data movement: no arithmetic, but bytes.
MOVEMENT = {"Transpose", "ConcatV2", "Pack", "Unpack", "Split", "SplitV", "Slice", "StridedSlice",
            "GatherV2", "ResourceGather", "Tile", "Pad", "PadV2", "BroadcastTo", "Fill", "ZerosLike",
            "OnesLike", "OneHot", "Range"}
MATMULS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}
CONVOLUTIONS = {"Conv2D", "DepthwiseConv2dNative", "Conv1D", "Conv3D"}


def _numel(shape):
    if shape is None or any(d is None for d in shape):
        return None
    return math.prod(shape) if shape else 1


def _nbytes(shape, dtype):
    n = _numel(shape)
    if n is None:
        return None
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # a type NumPy does not know: no size to count
        return 0
    # Strings, resource handles and variants come as NumPy's object dtype, whose itemsize is
    # a pointer's: they have no fixed size.
    return 0 if dtype.kind == "O" else n * dtype.itemsize


def has_rule(op_type):
    """Whether estimate() knows the op type: its cost is then unknown only where a shape is."""
    return op_type == "AddN" or any(op_type in rules for rules in (
        FREE, ELEMENTWISE, REDUCTIONS, MOVEMENT, MATMULS, CONVOLUTIONS))


def control_flow(op_type, callees):
    """(flops, bytes, note) of a node that runs other functions, from what they cost:
    callees is [(role, name, report)] (role: the attribute naming it, as "body"). A call
    costs its callee's totals, unknown (None) where the callee has a node of unknown cost;
    a branch or a loop costs what is known only at run time: None, and the note says what
    each function costs per run (else the note is None)."""
    if not callees:
        return None, None, "runs a function the graph's library does not hold"
    if op_type in CALLS:
        report = callees[0][2]
        if not report.unknown_cost_ops:
            return report.total_flops, report.total_bytes, None
        return None, None, "calls %s, whose cost is unknown for: %s" % (
            callees[0][1], ", ".join(report.unknown_cost_ops))
    runs = ("runs its body a number of times known only at run time" if "While" in op_type else
            "runs one branch, chosen at run time")
    return None, None, "%s: %s" % (runs, "; ".join(
        "%s %s %s FLOPs, %s bytes%s" % (role, name, report.total_flops, report.total_bytes,
                                        " (and unknown for %s)" % ", ".join(report.unknown_cost_ops)
                                        if report.unknown_cost_ops else "")
        for role, name, report in callees))


def estimate(op_type, inputs, outputs, attrs):
    """(flops, bytes) for one node; None where unknown.

    inputs and outputs: lists of (shape as tuple or None, numpy dtype name).
    attrs: the node's attributes that matter (transpose flags...).
    """
    if op_type in FREE:
        return 0, 0
    if op_type in CALLS or op_type in DATA_DEPENDENT:  # their callees': see control_flow
        return None, None
    sizes = [_nbytes(s, d) for s, d in inputs + outputs]
    moved = None if any(b is None for b in sizes) else sum(sizes)
    out_shape = outputs[0][0] if outputs else None
    if op_type in ELEMENTWISE:
        n = _numel(out_shape)
        return (None if n is None else ELEMENTWISE[op_type] * n), moved
    if op_type == "AddN":  # k inputs: k - 1 additions per element
        n = _numel(out_shape)
        return (None if n is None else max(len(inputs) - 1, 0) * n), moved
    if op_type in REDUCTIONS:
        n = _numel(inputs[0][0]) if inputs else None
        return n, moved
    if op_type in MOVEMENT:
        return 0, moved
    if op_type in MATMULS:
        a = inputs[0][0] if inputs else None
        n = _numel(out_shape)
        if a is None or n is None or len(a) < 2:
            return None, moved
        adj = attrs.get("transpose_a") or attrs.get("adj_x")
        k = a[-2] if adj else a[-1]
        return (None if k is None else 2 * n * k), moved
    if op_type in CONVOLUTIONS:
        kernel = inputs[1][0] if len(inputs) > 1 else None
        n = _numel(out_shape)
        if kernel is None or n is None or any(d is None for d in kernel):
            return None, moved
        # Per output element: every kernel tap of every input channel it reads.
        per_output = math.prod(kernel[:-1]) if op_type != "DepthwiseConv2dNative" else math.prod(kernel[:-2])
        return 2 * n * per_output, moved
    return None, moved
