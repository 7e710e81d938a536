"""trace_and_inspect: nodes, costs, nested functions, renderers, errors."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops

import tf_inspector
from tf_inspector.report import SCHEMA


def mlp(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


def mlp_report():
    return tf_inspector.trace_and_inspect(mlp, tf.ones([32, 64]), tf.ones([64, 16]), tf.ones([16]))


def test_nodes_carry_op_type_inputs_dtypes_shapes_and_costs():
    report = mlp_report()
    ops = report.op_counts
    assert ops["MatMul"] == 1 and ops["Relu"] == 1 and ops["Placeholder"] == 3
    matmul = next(n for n in report.nodes if n.op == "MatMul")
    assert matmul.outputs[0].dtype == "float32" and matmul.outputs[0].shape == (32, 16)
    assert len(matmul.inputs) == 2
    assert matmul.flops == 2 * 32 * 16 * 64
    assert matmul.bytes == 4 * (32 * 64 + 64 * 16 + 32 * 16)
    add = next(n for n in report.nodes if n.op in ("AddV2", "Add"))
    assert add.flops == 32 * 16
    assert report.total_flops == 2 * 32 * 16 * 64 + 2 * 32 * 16  # matmul, add, relu
    assert report.unknown_cost_ops == []


# Where cost.py counts differently from TF's registered statistics, by design (cost.py's docstring).
COUNTED_OTHERWISE = {"Log", "Rsqrt", "Pow", "Sum", "ArgMax", "ArgMin"}


def test_flops_agree_with_tensorflows_own_statistics():
    def many(a, b, m, v, img, k, dk):
        return [a + b, tf.raw_ops.Add(x=a, y=b), tf.math.add_n([a, b, a]), tf.argmax(a, 1),
                tf.argmin(a, 1), tf.nn.bias_add(a, v), tf.equal(a, b), tf.greater(a, b),
                tf.greater_equal(a, b), tf.less(a, b), tf.less_equal(a, b), tf.not_equal(a, b),
                tf.math.log(a), tf.maximum(a, b), tf.minimum(a, b), tf.reduce_mean(a, 1),
                tf.reduce_sum(a, 1), a * b, -a, tf.pow(a, b), a / b, tf.math.reciprocal(a),
                tf.math.rsqrt(a), tf.nn.softmax(a), tf.square(a), tf.math.squared_difference(a, b),
                a - b, tf.matmul(a, m, transpose_a=False), tf.matmul(tf.stack([a, a]), tf.stack([m, m])),
                tf.nn.conv2d(img, k, 1, "SAME"), tf.nn.depthwise_conv2d(img, dk, [1] * 4, "VALID")]

    specs = [tf.TensorSpec(s) for s in ([6, 8], [6, 8], [8, 5], [8], [2, 7, 7, 3], [3, 3, 3, 4],
                                        [3, 3, 3, 2])]
    report = tf_inspector.trace_and_inspect(many, *specs)
    graph = tf.function(many).get_concrete_function(*specs).graph
    ours = {n.name: n.flops for n in report.nodes}
    compared, differ = set(), set()
    for node in graph.as_graph_def().node:
        try:
            theirs = ops.get_stats_for_node_def(graph, node, "flops").value
        except ValueError:  # TF registers no statistic for this op
            continue
        if theirs is None:
            continue
        compared.add(node.op)
        if ours[node.name] != theirs:
            differ.add(node.op)
    assert len(compared) >= 30, compared
    assert differ == COUNTED_OTHERWISE


def test_matmul_flops_follow_the_transpose_flags():
    # a is [16,3] and used as a^T [3,16]: the contraction is over 16, not 3.
    report = tf_inspector.trace_and_inspect(lambda a, b: tf.matmul(a, b, transpose_a=True),
                                            tf.ones([16, 3]), tf.ones([16, 8]))
    assert next(n for n in report.nodes if n.op == "MatMul").flops == 2 * 3 * 8 * 16
    report = tf_inspector.trace_and_inspect(lambda a, b: tf.matmul(a, b, adjoint_a=True),
                                            tf.ones([2, 16, 3]), tf.ones([2, 16, 8]))
    bmm = next(n for n in report.nodes if n.op.startswith("BatchMatMul"))
    assert bmm.flops == 2 * 2 * 3 * 8 * 16


def test_conv_flops_count_every_tap_of_every_input_channel():
    report = tf_inspector.trace_and_inspect(
        lambda x, k: tf.nn.conv2d(x, k, strides=1, padding="SAME"), tf.ones([2, 8, 8, 3]),
        tf.ones([3, 3, 3, 4]))
    conv = next(n for n in report.nodes if n.op == "Conv2D")
    assert conv.flops == 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3)  # 2 per MAC, per output element
    report = tf_inspector.trace_and_inspect(
        lambda x, k: tf.nn.depthwise_conv2d(x, k, strides=[1, 1, 1, 1], padding="VALID"),
        tf.ones([1, 6, 6, 3]), tf.ones([3, 3, 3, 2]))
    dw = next(n for n in report.nodes if n.op == "DepthwiseConv2dNative")
    assert dw.flops == 2 * (1 * 4 * 4 * 6) * (3 * 3)  # one input channel per output channel
    report = tf_inspector.trace_and_inspect(  # an unknown batch: a formula, not a crash
        lambda x, k: tf.nn.conv2d(x, k, strides=1, padding="SAME"), tf.TensorSpec([None, 8, 8, 3]),
        tf.TensorSpec([3, 3, 3, 4]))
    conv = next(n for n in report.nodes if n.op == "Conv2D")
    flops = report.cost(tf.ones([2, 8, 8, 3]), tf.ones([3, 3, 3, 4]))["flops"]
    assert flops == 2 * (2 * 8 * 8 * 4) * (3 * 3 * 3), conv.flops


def test_node_counts_are_deterministic_across_runs():
    assert mlp_report().op_counts == mlp_report().op_counts
    assert [n.name for n in mlp_report().nodes] == [n.name for n in mlp_report().nodes]


def test_unknown_ops_are_marked_unknown_not_guessed():
    report = tf_inspector.trace_and_inspect(lambda x: tf.linalg.svd(x)[0], tf.ones([4, 4]))
    svd = next(n for n in report.nodes if n.op == "Svd")
    assert svd.flops is None and "Svd" in report.unknown_cost_ops
    assert "no cost rule for: Svd" in report.to_text()


def test_strings_and_resource_handles_move_no_counted_bytes():
    table = tf.Variable(tf.ones([10, 4]))
    report = tf_inspector.trace_and_inspect(lambda i: tf.gather(table, i), tf.constant([1, 2]))
    gather = next(n for n in report.nodes if n.op == "ResourceGather")
    assert gather.bytes == 2 * 4 + 2 * 4 * 4  # the indices and the rows, not the handle
    words = tf.constant(["a", "bb", "ccc"])
    report = tf_inspector.trace_and_inspect(lambda i: tf.gather(words, i), tf.constant([0, 2]))
    gather = next(n for n in report.nodes if n.op == "GatherV2")
    assert gather.bytes == 2 * 4 + 4  # the indices and the axis: strings have no fixed size


def test_symbolic_shapes_from_tensor_specs():
    report = tf_inspector.trace_and_inspect(mlp, tf.TensorSpec([None, 64]), tf.ones([64, 16]), tf.ones([16]))
    matmul = next(n for n in report.nodes if n.op == "MatMul")
    assert matmul.outputs[0].shape == (None, 16)  # the graph's own view
    assert str(matmul.flops) == "2048*batch"  # symbolic_test.py covers the formulas


def test_nested_functions_get_sub_reports():
    @tf.function
    def inner(x):
        return x * 2.0

    def outer(x, n):
        i = tf.constant(0)
        while i < n:
            x = tf.matmul(x, x)
            i += 1
        if tf.reduce_sum(x) > 0:
            x = x + 1.0
        return inner(x)

    report = tf_inspector.trace_and_inspect(outer, tf.ones([4, 4]), tf.constant(3))
    kinds = {n.op for n in report.nodes}
    assert {"StatelessWhile", "StatelessIf", "PartitionedCall"} <= kinds
    bodies = [name for name in report.subgraphs if "while_body" in name]
    assert bodies and report.subgraphs[bodies[0]].op_counts.get("MatMul") == 1
    assert any("inner" in name for name in report.subgraphs)
    assert "subgraph" in report.to_text()
    # A call costs its callee (x * 2.0 on 4x4: 16 FLOPs); a loop or a branch runs a number of
    # times, or a branch, chosen at run time: unknown, and the notes say what each run costs.
    nodes = {n.op: n for n in report.nodes}
    assert (nodes["PartitionedCall"].flops, nodes["PartitionedCall"].bytes) == (16, 132)
    assert nodes["StatelessWhile"].flops is None and nodes["StatelessIf"].flops is None
    assert report.total_flops == 16 + 16 + 1  # the call, the Sum, the Greater
    assert "cost of the functions they run (below) unknown for: StatelessIf, StatelessWhile" in report.to_text()
    assert any(note.startswith("while (StatelessWhile) runs its body a number of times known only "
                               "at run time: body while_body") and "130 FLOPs" in note
               for note in report.notes)  # 4x4 matmul 128, i += 1 and the loop counter's + 1
    assert any("runs one branch" in note and "16 FLOPs" in note for note in report.notes)


def test_a_call_of_a_function_of_unknown_cost_is_unknown_and_says_why():
    inner = tf.function(lambda x: x * 2.0)
    report = tf_inspector.trace_and_inspect(lambda x: inner(x) + 1.0, tf.TensorSpec([None, 4]))
    call = next(n for n in report.nodes if n.op == "PartitionedCall")
    assert call.flops is None and call.bytes is None
    assert any(note.startswith("PartitionedCall (PartitionedCall) calls ") and note.endswith(
        ", whose cost is unknown for: Mul") for note in report.notes)


def test_json_follows_the_documented_schema():
    data = json.loads(mlp_report().to_json())
    assert data["schema"] == SCHEMA
    assert set(data) == {"schema", "function", "symbols", "op_counts", "total_flops",
                         "total_bytes", "unknown_cost_ops", "notes", "xla", "mlir", "nodes",
                         "subgraphs"}
    node = data["nodes"][0]
    assert set(node) == {"name", "op", "inputs", "outputs", "device", "flops", "bytes"}
    assert all(set(o) == {"dtype", "shape"} for n in data["nodes"] for o in n["outputs"])


def test_dot_and_svg(tmp_path):
    report = mlp_report()
    dot = report.to_dot()
    matmul = next(n for n in report.nodes if n.op == "MatMul")
    assert dot.startswith("digraph") and '-> "%s"' % matmul.name in dot
    if shutil.which("dot"):
        path = report.render_svg(str(tmp_path / "g.svg"))
        assert "<svg" in open(path).read()
    else:
        with pytest.raises(RuntimeError, match="apt-get install graphviz"):
            report.render_svg(str(tmp_path / "g.svg"))


def test_a_tf_function_and_the_warp_softmax_op():
    from kernels import tf_ops

    @tf.function
    def attention(q, k):
        return tf_ops.warp_softmax(tf.matmul(q, k, transpose_b=True))

    report = tf_inspector.trace_and_inspect(attention, tf.ones([2, 8, 16]), tf.ones([2, 8, 16]))
    assert report.op_counts["WarpSoftmax"] == 1
    bmm = next(n for n in report.nodes if n.op.startswith("BatchMatMul"))
    assert bmm.flops == 2 * 2 * 8 * 8 * 16


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="needs a callable"):
        tf_inspector.trace_and_inspect(42)

    def untraceable(x):
        return np.asarray(x) + 1  # a symbolic tensor cannot become a NumPy array

    with pytest.raises(tf_inspector.TracingError, match="could not trace untraceable"):
        tf_inspector.trace_and_inspect(untraceable, tf.TensorSpec([2]))


def _check_widths(x):
    raise ValueError("widths must match: got %d and 4\nsee the docs" % x.shape[0])


def test_a_tracing_error_carries_the_users_message_and_line():
    def model(x):
        y = x + 1.0
        return _check_widths(y)

    for autograph in (True, False):
        with pytest.raises(tf_inspector.TracingError) as caught:
            tf_inspector.trace_and_inspect(tf.function(model, autograph=autograph), tf.ones([3]))
        error = caught.value
        assert "in user code" not in str(error)
        assert "ValueError: widths must match: got 3 and 4\nsee the docs" in str(error), str(error)
        assert error.user_message == "ValueError: widths must match: got 3 and 4\nsee the docs"
        assert error.file == __file__ and error.line == _check_widths.__code__.co_firstlineno + 1
        assert "graph_test.py:%d in _check_widths: raise ValueError(" % error.line in str(error)
