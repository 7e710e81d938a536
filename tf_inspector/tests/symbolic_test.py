"""Costs with unknown dimensions: formulas in them, equal to the static costs at any size."""

import json

import numpy as np
import pytest
import sympy
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tf_inspector
from tf_inspector.models.bert import BertConfig, BertEncoder


def block(x, w):
    h = tf.nn.softmax(tf.matmul(x, w, transpose_b=True))           # [b, 8]
    return tf.reduce_sum(tf.reshape(h * 2.0, [-1, 4]), axis=1)       # reshape mixes b in


W = tf.ones([8, 6])


def test_unknown_dims_give_formulas_never_zero_or_no_rule():
    report = tf_inspector.trace_and_inspect(lambda x: tf.reduce_sum(x * 2.0), tf.TensorSpec([None, 3]))
    assert report.unknown_cost_ops == [] and report.symbols == ["batch"]
    batch = sympy.Symbol("batch", positive=True, integer=True)
    assert report.total_flops == 6 * batch  # Mul 3b, Sum 3b
    assert "6*batch FLOPs" in report.to_text() and "no cost rule" not in report.to_text()
    assert report.cost(batch=8) == {"flops": 48, "bytes": report.cost(tf.ones([8, 3]))["bytes"]}
    data = json.loads(report.to_json())
    assert data["total_flops"] == "6*batch" and data["symbols"] == ["batch"]


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 40))
def test_the_formula_at_any_size_is_the_static_cost(b):
    symbolic = tf_inspector.trace_and_inspect(block, tf.TensorSpec([None, 6]), W)
    static = tf_inspector.trace_and_inspect(block, tf.ones([4 * b, 6]), W)
    assert symbolic.unknown_cost_ops == static.unknown_cost_ops == []
    assert symbolic.cost(batch=4 * b) == {"flops": static.total_flops, "bytes": static.total_bytes}


def test_named_dims_shared_across_inputs_and_bound_from_a_call():
    def attention(q, k):
        return tf.matmul(tf.nn.softmax(tf.matmul(q, k, transpose_b=True)), k)

    spec = tf.TensorSpec([None, None, 16])
    report = tf_inspector.trace_and_inspect(attention, spec, spec, dim_names=("batch", "seq"))
    assert report.symbols == ["batch", "seq"]
    at = report.cost(tf.ones([2, 5, 16]), tf.ones([2, 5, 16]))
    assert at == report.cost(batch=2, seq=5)
    static = tf_inspector.trace_and_inspect(attention, tf.ones([2, 5, 16]), tf.ones([2, 5, 16]))
    assert at["flops"] == static.total_flops == 2 * (2 * 2 * 5 * 5 * 16) + 5 * 2 * 5 * 5
    with pytest.raises(ValueError, match="cost needs a size for seq"):
        report.cost(batch=2)
    with pytest.raises(ValueError, match="inputs disagree on batch: 2 and 3"):
        report.cost(tf.ones([2, 5, 16]), tf.ones([3, 5, 16]))
    with pytest.raises(ValueError, match="no unknown dimension named sq: the costs depend on "
                                         "batch, seq"):
        report.cost(batch=2, sq=5)
    with pytest.raises(ValueError, match=r"named batch: .* none \(every dimension is known\)"):
        static.cost(batch=3)  # not static's costs at batch 2, read as at batch 3


def test_shapes_that_are_no_product_of_the_dims_stay_unknown_not_wrong():
    def padded(x):
        return tf.pad(x, [[0, 1], [0, 0]]) * 2.0  # batch + 1 rows

    report = tf_inspector.trace_and_inspect(padded, tf.TensorSpec([None, 3]))
    mul = next(n for n in report.nodes if n.op == "Mul")
    assert mul.flops is None and "Mul" in report.unknown_cost_ops
    assert "cost unknown (a shape is unknown) for: Mul" in report.to_text()
    assert "no cost rule" not in report.to_text()  # Mul has one: its shape is what is missing


def test_static_dimensions_divisible_by_a_probe_prime_keep_their_formula():
    fn = tf.function(lambda x, w: tf.matmul(x, w))
    report = tf_inspector.trace_and_inspect(fn, tf.TensorSpec([None, 64]), tf.ones([64, 101]))
    matmul = next(n for n in report.nodes if n.op == "MatMul")
    assert str(matmul.flops) == "12928*batch" and report.unknown_cost_ops == []  # 2*64*101
    assert report.cost(batch=3)["flops"] == 3 * 12928


def test_minilm_flops_at_8x128_match_a_hand_count():
    L, H, I, heads = 6, 384, 1536, 12  # all-MiniLM-L6-v2
    model = BertEncoder(BertConfig(hidden_size=H, num_hidden_layers=L, num_attention_heads=heads,
                                   intermediate_size=I))
    ids = tf.TensorSpec([None, None], tf.int32)
    report = tf_inspector.trace_and_inspect(model.call, ids, ids, ids, dim_names=("batch", "seq"))
    assert report.unknown_cost_ops == [] and report.symbols == ["batch", "seq"]
    B, S = 8, 128
    T = B * S  # tokens
    # Per layer, counting a multiply-add as 2 and elementwise ops per cost.py's table.
    matmuls = 8 * T * H * H + 4 * T * H * I + 4 * B * S * S * H  # q,k,v,o; ffn; qk^T and pv
    attention = (1 + 1 + 5) * B * heads * S * S                  # / sqrt(d), + mask, softmax
    biases_and_residuals = 5 * T * H + T * I + 2 * T * H
    gelu = (1 + 1 + 1 + 8 + 1) * T * I                           # 0.5*x*erfc(-x/sqrt2)
    layer_norm = T * (9 * H + 6)                                  # moments, rsqrt, scale, shift
    per_layer = matmuls + attention + biases_and_residuals + gelu + 2 * layer_norm
    embeddings = 2 * T * H + layer_norm + 9 * T + 3 * S            # 2 adds, norm, id checks, mask
    hand = L * per_layer + embeddings
    got = report.cost(batch=B, seq=S)["flops"]
    # The goal is 1%; the count is exact but for 108 FLOPs of shape arithmetic (Prod, ...).
    assert abs(got - hand) / hand < 1e-6, (got, hand)
    print("MiniLM-L6 at 8x128: %d FLOPs, hand count %d (%.4f%% apart)" % (got, hand, 100 * abs(got - hand) / hand))
    assert got == report.cost(np.ones([B, S], np.int32), np.ones([B, S], np.int32),
                              np.zeros([B, S], np.int32))["flops"]
