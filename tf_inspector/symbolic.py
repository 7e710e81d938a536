"""Costs as formulas in the unknown dimensions (sympy), for inputs like tf.TensorSpec([None, 3]).

A FuncGraph forgets how its shapes depend on an input's unknown dimension: after a
reshape or a matmul it only says "?". So the graph's own GraphDef is imported twice
more with each unknown input dimension set to a distinct prime above 100 that divides no
static dimension of the graph (so 64x101 logits do not read as 64*batch), letting TF's shape
inference run over the same nodes (variables' reads become
placeholders of the variables' shapes, as their handles do not survive the import). In
the first probe every dimension is factored back into those primes, so 101*103*384
reads as batch*d1*384, and each node's cost rule runs on those formulas; the second
probe checks each node's formula at its primes, so a node whose shapes are no product
of the dimensions (seq + 1, seq // 2) keeps an unknown cost rather than a wrong formula.
Called functions (while bodies, nested tf.functions) keep their own, static costs.

Unknown dimensions are named by axis: dim_names[axis] (default "batch", "d1", "d2"...),
one symbol per axis shared by every input, as a batch size is.
"""

import numpy as np
import sympy
import tensorflow as tf

_MAX_AXES = 8
DEFAULT_NAMES = ("batch",) + tuple("d%d" % i for i in range(1, _MAX_AXES))


def tensor_specs(inputs):
    """The TensorSpecs of known rank among the (nested) inputs, in flattening order."""
    specs = [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))
             if isinstance(x, (tf.Tensor, tf.Variable, np.ndarray)) else x
             for x in tf.nest.flatten(inputs)]
    return [s for s in specs if isinstance(s, tf.TensorSpec) and s.shape.rank is not None]


def unknown_axes(inputs):
    """Sorted axes that are unknown in some tensor input (unknown ranks are left unknown)."""
    return sorted({axis for s in tensor_specs(inputs)
                   for axis, d in enumerate(s.shape.as_list()) if d is None})


def _probe_graph(graph, primes):
    """The graph re-imported with unknown input dimensions set to primes[axis]."""
    graph_def = graph.as_graph_def()
    reads = {op.name: op.outputs[0].shape for op in graph.get_operations()
             if op.type == "ReadVariableOp"}
    for node in graph_def.node:
        if node.op == "Placeholder" and node.attr["shape"].shape.dim:
            shape = tf.TensorShape(node.attr["shape"].shape).as_list()
            node.attr["shape"].shape.CopyFrom(tf.TensorShape(
                [primes[a] if d is None else d for a, d in enumerate(shape)]).as_proto())
        elif node.op == "ReadVariableOp" and reads[node.name].is_fully_defined():
            dtype = node.attr["dtype"].type
            node.op = "Placeholder"
            del node.input[:]
            node.attr.clear()
            node.attr["dtype"].type = dtype
            node.attr["shape"].shape.CopyFrom(reads[node.name].as_proto())
    probe = tf.Graph()
    with probe.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return probe


def _probe_primes(graph, count):
    """Two lists of `count` distinct primes above 100, none dividing a static dimension of the
    graph: a probe dimension must factor back into its own symbol only."""
    static = {d for op in graph.get_operations() for t in op.outputs if t.shape.rank is not None
              for d in t.shape.as_list() if d}
    primes, p = [], 100
    while len(primes) < 2 * count:
        p = sympy.nextprime(p)
        if all(d % p for d in static):
            primes.append(p)
    return primes[:count], primes[count:]


def _factor(value, symbols):
    """An int dimension of the first probe as a product of the dimension symbols."""
    expr = sympy.Integer(1)
    for prime, symbol in symbols.items():
        while value and value % prime == 0:
            value //= prime
            expr *= symbol
    return expr * value


def symbols_for(axes, dim_names=None):
    names = tuple(dim_names or DEFAULT_NAMES)
    if len(axes) and max(axes) >= min(len(names), _MAX_AXES):
        raise ValueError("unknown dimension on axis %d: name it in dim_names (at most %d axes)"
                         % (max(axes), _MAX_AXES))
    return {axis: sympy.Symbol(names[axis], positive=True, integer=True) for axis in axes}


def symbolic_costs(report, graph, symbols, estimate):
    """Fills the report's unknown costs with formulas in `symbols` ({axis: Symbol});
    estimate(op, to_expr) is the (flops, bytes) of one op with dimensions mapped by to_expr."""
    probes = []
    for primes in _probe_primes(graph, len(symbols)):
        by_axis = dict(zip(sorted(symbols), primes))
        probes.append((_probe_graph(graph, by_axis), by_axis))
    (first, first_primes), (second, second_primes) = probes
    factors = {first_primes[a]: symbol for a, symbol in symbols.items()}
    at = {symbol: second_primes[a] for a, symbol in symbols.items()}
    for node in report.nodes:
        if node.flops is not None and node.bytes is not None:
            continue
        formula = estimate(first.get_operation_by_name(node.name), lambda d: _factor(d, factors))
        check = estimate(second.get_operation_by_name(node.name), None)
        for field, value, checked in zip(("flops", "bytes"), formula, check):
            if getattr(node, field) is None and value is not None and value.subs(at) == checked:
                setattr(node, field, simplify(value))


def bind(shapes, inputs):
    """{name: size} from concrete inputs matched against the symbolic input shapes."""
    sizes = {}
    for shape, spec in zip(shapes, tensor_specs(inputs)):
        for dim, size in zip(shape, spec.shape.as_list()):
            if isinstance(dim, sympy.Symbol) and size is not None:
                if sizes.setdefault(str(dim), size) != size:
                    raise ValueError("inputs disagree on %s: %d and %d" % (dim, sizes[str(dim)], size))
    return sizes


def simplify(value):
    """Plain ints stay ints: only costs with unknown dimensions are formulas."""
    if isinstance(value, sympy.Basic):
        return int(value) if value.is_number else sympy.expand(value)
    return value


def evaluate(value, values):
    """A cost (int, formula or None) at {name: size}."""
    if value is None or isinstance(value, int):
        return value
    missing = sorted(str(s) for s in value.free_symbols if str(s) not in values)
    if missing:
        raise ValueError("cost needs a size for %s (the unknown dimensions), e.g. cost(%s=8)"
                         % (", ".join(missing), missing[0]))
    return int(value.subs({s: values[str(s)] for s in value.free_symbols}))
