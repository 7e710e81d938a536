"""Fine-tuning on a tiny encoder: no retrace after the first step, resumable to the same
weights, cached by recipe digest. (The real recipe is never trained in a test.)"""

import os
import shutil
import sys

import numpy as np
import pytest

from tf_inspector.models import finetune, nli

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling tiny_encoder.py
import tiny_encoder as tiny_encoder_folder  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(os.path.dirname(HERE), "testdata", "nli_sample.jsonl")


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    return tiny_encoder_folder.write(str(tmp_path_factory.mktemp("tiny_bert")))


RECIPE = finetune.Recipe(batch_size=4, epochs=2, checkpoint_every=2, learning_rate=1e-3)
PAIRS = nli.read_jsonl(SAMPLE)[:24]  # 6 steps an epoch


def weights(model):
    return [w.numpy() for w in model.weights]


def test_zero_retraces_after_the_first_step_and_a_resumed_run_ends_identical(tiny_encoder, tmp_path):
    straight, info = finetune.train(RECIPE, PAIRS, tiny_encoder, str(tmp_path / "a"), log=lambda m: None)
    assert info["steps"] == info["total_steps"] == 12
    assert info["traces_after_first_step"] == 0, info["trace_report"]
    assert "train_step: traced 1 time in 12 calls" in info["trace_report"]

    _, first = finetune.train(RECIPE, PAIRS, tiny_encoder, str(tmp_path / "b"), max_steps=7,
                              log=lambda m: None)
    assert first["steps"] == 7
    messages = []
    resumed, second = finetune.train(RECIPE, PAIRS, tiny_encoder, str(tmp_path / "b"), log=messages.append)
    assert "resuming at step 7 of 12" in messages[0]  # a stopped run checkpoints where it stops
    assert second["steps_this_run"] == 5 and second["traces_after_first_step"] == 0
    for a, b in zip(weights(straight), weights(resumed)):
        np.testing.assert_array_equal(a, b)  # dropout's masks included
    trained = [a for a, b in zip(weights(straight), weights(finetune.train(
        RECIPE, PAIRS, tiny_encoder, str(tmp_path / "c"), max_steps=0, log=lambda m: None)[0])) if
        not np.array_equal(a, b)]
    assert trained  # and the steps did change the weights


def test_the_cache_is_keyed_by_the_recipe(tiny_encoder, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(SAMPLE, data / "dev_mismatched.jsonl")
    recipe = finetune.Recipe(batch_size=8, epochs=1, limit=16, checkpoint_every=100)
    log = []
    model, info = finetune.trained_model(recipe, str(data), tiny_encoder, cache=str(tmp_path / "c"),
                                         log=log.append)
    assert "training in" in log[0] and os.path.exists(info["loss_curve"])
    again, same = finetune.trained_model(recipe, str(data), tiny_encoder, cache=str(tmp_path / "c"),
                                         log=log.append)
    assert "using the fine-tuned model cached" in log[-1] and same["digest"] == info["digest"]
    for a, b in zip(weights(model), weights(again)):
        np.testing.assert_array_equal(a, b)
    other = finetune.recipe_digest(finetune.Recipe(batch_size=8, epochs=2, limit=16, checkpoint_every=100),
                                   str(data / "dev_mismatched.jsonl"), tiny_encoder)
    assert other != info["digest"]
