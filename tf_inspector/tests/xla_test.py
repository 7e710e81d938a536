"""XLA compile cost: HLO op counts before/after optimisation, fusions, compile vs run time."""

import json
import os

import pytest
import tensorflow as tf

import tf_inspector
from tf_inspector import cli
from tf_inspector.models.bert import BertConfig, BertEncoder
from tf_inspector.xla import hlo_op_counts

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_model.py")


def mlp(x, w):
    return tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0


def test_hlo_before_and_after_optimisation_and_the_fusion():
    cost = tf_inspector.xla_cost(mlp, tf.ones([4, 8]), tf.ones([8, 4]), runs=3)
    # The bridge emits one HLO op per TF op (dot, add, maximum, multiply and their
    # broadcast constants); XLA fuses the elementwise tail into one loop fusion.
    assert cost.hlo_ops["dot"] == 1 and cost.hlo_ops["maximum"] == 1
    assert cost.hlo_ops["multiply"] == 1 and "fusion" not in cost.hlo_ops
    assert cost.fusions == 1 and cost.optimized_ops["fusion"] == 1
    assert cost.entry_ops == {"dot": 1, "fusion": 1, "parameter": 2}
    assert "ROOT" in cost.optimized_hlo and "fused_computation" in cost.optimized_hlo
    assert cost.compile_s > cost.run_s > 0 and cost.trace_s > 0
    assert "4 run after it, 1 of them fusions" in cost.to_text()


def test_op_counts_parse_hlo_text():
    text = """ENTRY %e (a: f32[2]) -> (f32[2], f32[]) {
  %a = f32[2]{0} parameter(0)
  %c = f32[] constant(1)
  %f = f32[2]{0} fusion(%a), kind=kLoop, calls=%fc
  ROOT %t = (f32[2]{0}, f32[]) tuple(%f, %c)
}"""
    assert hlo_op_counts(text) == {"constant": 1, "fusion": 1, "parameter": 1, "tuple": 1}
    fused = "%fc (p: f32[2]) -> f32[2] {\n  ROOT %p = f32[2]{0} parameter(0)\n}\n\n" + text
    assert hlo_op_counts(fused)["parameter"] == 2
    assert hlo_op_counts(fused, entry_only=True)["parameter"] == 1


def test_in_the_report_and_the_cli(capsys):
    report = tf_inspector.trace_and_inspect(mlp, tf.ones([4, 8]), tf.ones([8, 4]), xla=True)
    data = json.loads(report.to_json())["xla"]
    assert data["fusions"] == 1 and data["hlo_ops"]["dot"] == 1 and data["compile_s"] > 0
    assert "XLA " in report.to_text() and "1 of them fusions" in report.to_text()
    cli.main(["xla", EXAMPLE + ":mlp", "--input", "4,8", "--runs", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["hlo_ops"]["dot"] == 1 and out["fusions"] >= 1
    with pytest.raises(SystemExit, match="give every dimension"):
        cli.main(["xla", EXAMPLE + ":mlp", "--input", "?,8"])


def test_bert_compiles_with_fusions():
    model = BertEncoder(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=128, vocab_size=100))
    ids = tf.ones([2, 16], tf.int32)
    cost = tf_inspector.xla_cost(model.call, ids, ids, tf.zeros([2, 16], tf.int32), runs=3)
    # 2 layers x (q, k, v, o, two FFN matmuls, two attention matmuls) = 16 dots at least.
    assert cost.hlo_ops["dot"] >= 16
    assert cost.fusions > 0 and sum(cost.entry_ops.values()) < sum(cost.hlo_ops.values())
    assert cost.compile_s > 10 * cost.run_s
