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
    assert report.restored_traces >= 0 and "SavedModel" in report.to_text()
    assert os.path.exists(os.path.join(path, "saved_model.pb"))


def test_float_tflite_matches_tf_and_dynamic_range_is_smaller(saved):
    module, batches, path, _ = saved
    float_model = export.convert_tflite(path)
    dynamic = export.convert_tflite(path, dynamic_range=True)
    rng = np.random.default_rng(1)
    for _ in range(100 // 5):  # 100 samples, in batches of 5 of varying length
        n = int(rng.integers(3, 20))
        batch = (rng.integers(100, 30000, (5, n)).astype(np.int32), np.ones((5, n), np.int32), np.zeros((5, n), np.int32))
        np.testing.assert_allclose(float_model.run(*batch), module.embed(*batch).numpy(), atol=1e-4)
    assert dynamic.size_bytes < float_model.size_bytes / 3
    assert np.isfinite(dynamic.run(*batches[0])).all()


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
