"""SavedModel round trips and TFLite conversion, with the failures named."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tf_inspector.models import export
from tf_inspector.models.bert import BertConfig, BertEncoder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tf.keras.utils.set_random_seed(0)
    module = export.serving_module(BertEncoder(BertConfig.tiny()))
    rng = np.random.default_rng(0)
    batches = [(rng.integers(100, 30000, (b, n)).astype(np.int32), np.ones((b, n), np.int32),
                np.zeros((b, n), np.int32)) for b, n in [(2, 5), (3, 9)]]
    batches[1][1][:, 6:] = 0  # some padding
    path = str(tmp_path_factory.mktemp("export") / "saved_model")
    return module, batches, path, export.check_saved_model(module, path, batches)


def test_saved_model_round_trip_gives_identical_outputs(saved):
    _, _, path, report = saved
    assert report.identical and report.max_abs_diff == 0.0
    assert report.size_bytes > 4_000_000 * 4  # BERT-tiny's float32 weights
    # Two batches of different shapes: a restored function that retraced per shape would
    # count 2; the one trace TF makes on the first call after loading is allowed.
    assert report.restored_traces <= 1 and "SavedModel" in report.to_text()
    assert os.path.exists(os.path.join(path, "saved_model.pb"))


def _cosine(a, b):
    a, b = np.ravel(a), np.ravel(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_tflite_conversions_match_tf_within_their_precision(saved):
    module, batches, path, _ = saved
    rng = np.random.default_rng(1)
    checks = []
    for _ in range(100 // 5):  # 100 samples, in batches of 5 of varying length, some padded
        n = int(rng.integers(3, 20))
        batch = (rng.integers(100, 30000, (5, n)).astype(np.int32), np.ones((5, n), np.int32),
                 np.zeros((5, n), np.int32))
        batch[1][0, n // 2:] = 0
        checks.append(batch)

    calibration = rng.integers(100, 30000, (32, 12)).astype(np.int32)

    def representative():  # one shape: TFLite's calibrator sizes its interpreter once
        return ({"input_ids": ids[None], "attention_mask": np.ones((1, 12), np.int32),
                 "token_type_ids": np.zeros((1, 12), np.int32)} for ids in calibration)

    lite = {mode: export.convert_tflite(path, mode, representative if mode == "int8" else None)
            for mode in export.MODES}
    expected = np.concatenate([module.serve(*b).numpy() for b in checks])
    got = {mode: np.concatenate([m.run(*b) for b in checks]) for mode, m in lite.items()}
    np.testing.assert_allclose(got["float32"], expected, atol=1e-4)
    # Each quantised model differs from TF (it did quantise), by less than the outputs' scale.
    # int8 the most: the padded rows' attention-mask scores lie outside the calibrated range.
    scale = np.abs(expected).max()
    for mode, worst, cosine in (("float16", 0.01, 0.9999), ("dynamic-range", 0.1, 0.99),
                                ("int8", 1.0, 0.9)):
        diff = np.abs(got[mode] - expected).max()
        assert 1e-7 < diff < worst * scale, (mode, diff, scale)
        assert _cosine(got[mode], expected) > cosine, mode
    sizes = {mode: m.size_bytes for mode, m in lite.items()}
    assert sizes["float16"] < sizes["float32"] * 0.6
    assert sizes["dynamic-range"] < sizes["float32"] / 3 and sizes["int8"] < sizes["float32"] / 3
    with pytest.raises(ValueError, match="representative dataset"):
        export.convert_tflite(path, "int8")
    with pytest.raises(ValueError, match="must all have the first one's shape"):
        export.convert_tflite(path, "int8", lambda: ({"input_ids": b[0], "attention_mask": b[1],
                                                      "token_type_ids": b[2]} for b in batches))
    with pytest.raises(ValueError, match="unknown TFLite mode"):
        export.convert_tflite(path, "int4")


def test_missing_and_corrupt_saved_models_are_named(tmp_path):
    with pytest.raises(export.ExportError, match="no SavedModel at"):
        export.load_saved_model(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(export.ExportError, match="saved_model.pb is missing"):
        export.load_saved_model(str(tmp_path / "empty"))
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "saved_model.pb").write_bytes(b"not a protobuf")
    with pytest.raises(export.ExportError, match="could not be loaded"):
        export.load_saved_model(str(tmp_path / "corrupt"))


def test_an_op_tflite_cannot_convert_is_named(tmp_path, saved):
    _, batches, _, _ = saved
    module = export.serving_module(BertEncoder(BertConfig.tiny(), use_warp_softmax=True))
    path = str(tmp_path / "warp")
    export.check_saved_model(module, path, batches[:1])
    with pytest.raises(export.ExportError, match="WarpSoftmax"):
        export.convert_tflite(path)
