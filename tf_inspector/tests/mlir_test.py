"""The MLIR view: TF dialect and StableHLO op counts beside the FuncGraph's, ops not lowered."""

import json
import os

import tensorflow as tf

import tf_inspector
from tf_inspector import cli
from tf_inspector.mlir import by_dialect, op_counts

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_model.py")


def mlp(x, w):
    return tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0


def test_tf_dialect_matches_the_funcgraph_and_lowers_to_stablehlo():
    view = tf_inspector.mlir_view(mlp, tf.TensorSpec([None, 8]), tf.ones([8, 4]))
    for op in ("MatMul", "AddV2", "Relu", "Mul"):
        assert view.graph_ops[op] == view.tf_ops["tf." + op] == 1
    assert view.graph_ops["Placeholder"] == 2 and "tf.Placeholder" not in view.tf_ops  # arguments
    assert view.lowered_ops["stablehlo.dot"] == 1 and view.lowered_ops["stablehlo.maximum"] == 1
    assert view.not_lowered == [] and view.lowering_error is None
    assert "tf" not in by_dialect(view.lowered_ops) and by_dialect(view.tf_ops)["tf"] == 7
    assert "MatMul       1                1" in view.to_text()


def test_ops_the_bridge_cannot_lower_are_listed():
    def with_strings(x):
        return tf.strings.as_string(x * 2.0)

    view = tf_inspector.mlir_view(with_strings, tf.ones([3]))
    assert view.not_lowered == ["tf.AsString"]
    assert view.lowered_ops["stablehlo.multiply"] == 1
    assert "not lowered by the bridge: tf.AsString" in view.to_text()


def test_op_counts_read_generic_and_pretty_forms():
    text = '''module {
  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "tf.Relu"(%arg0) {device = ""} : (tensor<2xf32>) -> tensor<2xf32>
    %1:2 = stablehlo.while(%iterArg = %0) : tensor<2xf32>
    %2 = stablehlo.add %0, %0 : tensor<2xf32>
    return %2 : tensor<2xf32>
  }
}'''
    assert op_counts(text) == {"func.func": 1, "stablehlo.add": 1, "stablehlo.while": 1, "tf.Relu": 1}


def test_in_the_report_and_the_cli(capsys):
    report = tf_inspector.trace_and_inspect(mlp, tf.ones([2, 8]), tf.ones([8, 4]), mlir=True)
    assert json.loads(report.to_json())["mlir"]["tf_ops"]["tf.MatMul"] == 1
    assert "MLIR " in report.to_text()
    cli.main(["mlir", EXAMPLE + ":mlp", "--input", "?,8", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["tf_ops"]["tf.MatMul"] == 1 and data["not_lowered"] == []
    cli.main(["mlir", EXAMPLE + ":mlp", "--input", "2,8", "--lowered"])
    assert "stablehlo.dot" in capsys.readouterr().out
