"""quant_debug names the layer an int8 conversion breaks, and keeping it in float repairs it."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

import tf_inspector


def planted_model():
    """x -> healthy (dense, relu) -> faulty (dense) -> head (dense) -> out. The faulty layer's first output is
    10 * (x0 + x1): the calibration data has x1 = -x0, so it is 0 there and the layer's int8 range
    is set by its other outputs; the real inputs have x1 = x0 (each feature in its calibrated
    range), so that output is large and overflows the int8 range of the faulty layer alone."""
    rng = np.random.default_rng(0)
    module = tf.Module()
    module.w1 = tf.Variable(np.eye(8, dtype=np.float32) + rng.normal(0, 0.01, (8, 8)).astype(np.float32))
    w2 = rng.normal(0, 0.3, (8, 4)).astype(np.float32)
    w2[:, 0] = 0
    w2[0, 0] = w2[1, 0] = 10
    module.w2 = tf.Variable(w2)
    module.w3 = tf.Variable(rng.normal(0, 0.3, (4, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def predict(x):
        with tf.name_scope("healthy"):
            h = tf.nn.relu(tf.matmul(x, module.w1) + 1.0)
        with tf.name_scope("faulty"):
            h = tf.matmul(h, module.w2)
        return tf.matmul(h, module.w3)

    module.predict = predict
    return module


def inputs(rng, n, correlated):
    x = rng.uniform(-1, 1, (n, 1, 8)).astype(np.float32)
    x[:, :, 1] = x[:, :, 0] if correlated else -x[:, :, 0]
    return x


def converter_for(module, calibration):
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.predict.get_concrete_function()], module)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([x] for x in calibration)
    return converter


@pytest.fixture(scope="module")
def report():
    rng = np.random.default_rng(1)
    module = planted_model()
    calibration = inputs(rng, 64, correlated=False)
    samples = [[x] for x in inputs(rng, 16, correlated=True)]
    return module, samples, tf_inspector.quant_debug(module.predict, converter_for(module, calibration),
                                                     samples)


def test_the_planted_faulty_layer_is_named_first(report):
    _, _, r = report
    assert r.first_jump is not None and "faulty" in r.first_jump.tensor
    assert r.first_jump.clipped > 0.1  # the overflow is what it reports
    healthy = [l for l in r.layers if "healthy" in l.tensor]
    assert healthy and all(l.rmse_over_scale < 1.0 and l.clipped == 0 for l in healthy)
    assert r.first_nonfinite is None
    text = r.to_text()
    assert "first jump" in text and "overflows int8" in text and "faulty" in text
    data = json.loads(r.to_json())
    assert data["first_jump"]["tensor"] == r.first_jump.tensor and len(data["layers"]) == len(r.layers)


def test_keeping_the_faulty_layer_in_float_recovers_the_outputs(report):
    """From the faulty layer on: the next layer quantises its input with the same too-small
    calibrated range, so it must stay float too."""
    module, samples, r = report
    reference = np.concatenate([module.predict(*s).numpy() for s in samples])

    def error(content):
        it = tf.lite.Interpreter(model_content=content)
        it.allocate_tensors()
        out = []
        for (x,) in samples:
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            out.append(it.get_tensor(it.get_output_details()[0]["index"]))
        return np.sqrt(np.mean((np.concatenate(out) - reference) ** 2))

    broken = error(r._debugger.get_nondebug_quantized_model())
    assert r.output["rmse"] == pytest.approx(broken, rel=1e-5)
    fixed = error(r.recover([l.tensor for l in r.layers if l.index >= r.first_jump.index]))
    assert broken > 1.0 and fixed < broken / 20
    with pytest.raises(ValueError, match="not a quantised layer"):
        r.recover(["no/such/tensor"])


def test_plot_and_model_explorer_data(report, tmp_path):
    _, _, r = report
    r.plot(str(tmp_path / "errors.png"))
    assert (tmp_path / "errors.png").read_bytes()[:4] == b"\x89PNG"
    r.model_explorer_data(str(tmp_path / "node_data.json"))
    data = json.loads((tmp_path / "node_data.json").read_text())
    assert data["results"][r.first_jump.tensor]["value"] == pytest.approx(r.first_jump.rmse_over_scale, abs=1e-3)


def test_an_inf_that_only_quantisation_makes_is_located():
    """rsqrt of a small positive value (a LayerNorm's variance) is finite in float; int8, with
    the range calibrated on larger values, rounds the value to 0 and rsqrt gives Inf there."""
    module = tf.Module()
    module.w = tf.Variable(np.eye(4, dtype=np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def predict(x):
        with tf.name_scope("variance"):
            v = tf.matmul(x, module.w)
        with tf.name_scope("norm"):
            return tf.matmul(tf.math.rsqrt(v), module.w)

    module.predict = predict
    converter = converter_for(module, np.random.default_rng(0).uniform(0, 10, (16, 1, 4)).astype(np.float32))
    r = tf_inspector.quant_debug(predict, converter, [[np.full((1, 4), 1e-3, np.float32)]])
    assert r.output["float_nonfinite"] == 0
    assert r.first_nonfinite is not None and r.first_nonfinite.op == "RSQRT"
    assert all(l.nonfinite == 0 for l in r.layers if l.index < r.first_nonfinite.index)
    assert "first NaN/Inf: layer %d RSQRT" % r.first_nonfinite.index in r.to_text()
    # JSON has no NaN: the Inf layer's cosine is null, not a token strict parsers refuse.
    assert math.isnan(r.first_nonfinite.cosine)
    data = json.loads(r.to_json(), parse_constant=lambda token: pytest.fail("JSON with " + token))
    assert data["first_nonfinite"]["cosine"] is None


def test_bad_arguments_are_clear_errors():
    module = planted_model()
    plain = tf.lite.TFLiteConverter.from_concrete_functions([module.predict.get_concrete_function()], module)
    with pytest.raises(ValueError, match="full-integer quantisation"):
        tf_inspector.quant_debug(module.predict, plain, [[np.zeros((1, 8), np.float32)]])
    calibration = inputs(np.random.default_rng(0), 8, correlated=False)
    with pytest.raises(ValueError, match="share one shape"):
        tf_inspector.quant_debug(module.predict, converter_for(module, calibration),
                                 [[np.zeros((1, 8), np.float32)], [np.zeros((2, 8), np.float32)]])


def test_a_model_returning_a_dict_is_compared_by_its_one_output():
    module = tf.Module()
    module.w = tf.Variable(np.eye(4, dtype=np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def predict(x):  # as a SavedModel signature returns its output
        return {"logits": tf.matmul(x, module.w)}

    module.predict = predict
    calibration = np.random.default_rng(0).uniform(0, 1, (16, 1, 4)).astype(np.float32)
    sample = [[np.full((1, 4), 0.5, np.float32)]]
    r = tf_inspector.quant_debug(predict, converter_for(module, calibration), sample)
    assert r.output["max_abs_error"] < 0.01 and r.output["argmax_agreement"] == 1.0
    with pytest.raises(ValueError, match="compares one output, and the model returns 2"):
        tf_inspector.quant_debug(lambda x: (predict(x), predict(x)),
                                 converter_for(module, calibration), sample)
