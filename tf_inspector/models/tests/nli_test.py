"""NLI loaders (JSON lines, GLUE TSV, tensorflow-datasets) and the evaluation end to end."""

import os
import shutil
import sys

import numpy as np
import pytest

from tf_inspector.models import finetune, nli, nli_eval

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling tiny_encoder.py
import tiny_encoder  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(os.path.dirname(HERE), "testdata")
# The real MNLI dev sets: $MNLI_DIR, or ../shared/data/mnli beside the checkout (development
# machines and CI have it there; the source file's real path leads out of Bazel's runfiles).
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
MNLI = os.environ.get("MNLI_DIR") or os.path.join(os.path.dirname(CHECKOUT), "shared", "data", "mnli")


@pytest.fixture
def data_dir(tmp_path):
    for split in ("dev_matched", "dev_mismatched"):
        shutil.copy(os.path.join(SAMPLE, "nli_sample.jsonl"), tmp_path / (split + ".jsonl"))
    return str(tmp_path)


def test_jsonl_and_tsv_give_the_same_pairs():
    jsonl = nli.read_jsonl(os.path.join(SAMPLE, "nli_sample.jsonl"))
    tsv = nli.read_glue_tsv(os.path.join(SAMPLE, "nli_sample.tsv"))  # drops the '-' row
    assert len(jsonl) == len(tsv) == 30
    assert jsonl == tsv
    assert np.bincount([p.label for p in jsonl]).tolist() == [10, 10, 10]


def test_tfds_builder_reads_a_manual_dir(data_dir, tmp_path):
    builder = nli.tfds_builder(manual_dir=data_dir, data_dir=str(tmp_path / "tfds"))
    rows = list(builder.as_dataset(split="dev_matched").as_numpy_iterator())
    expected = nli.read_jsonl(os.path.join(SAMPLE, "nli_sample.jsonl"))
    got = sorted((r["premise"].decode(), r["hypothesis"].decode(), int(r["label"])) for r in rows)
    assert got == sorted((p.premise, p.hypothesis, p.label) for p in expected)


@pytest.mark.skipif(not os.path.exists(os.path.join(MNLI, "dev_matched.jsonl")),
                    reason="the MNLI dev sets are not beside this checkout")
def test_real_mnli_dev_matched():
    pairs = nli.load_split(MNLI, "dev_matched")
    assert len(pairs) == 9815
    assert np.bincount([p.label for p in pairs]).tolist() == [3479, 3123, 3213]
    assert (pairs[0].premise, pairs[0].hypothesis.strip(), pairs[0].label) == (
        "The new rights are nice enough", "Everyone really likes the newest benefits", 1)


def test_bad_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        nli.load_split(str(tmp_path / "nope"), "dev_matched")
    with pytest.raises(FileNotFoundError, match="no dev_matched split"):
        nli.load_split(str(tmp_path), "dev_matched")
    (tmp_path / "dev_matched.jsonl").write_text('{"premise": "a", "hypothesis": "b", "label": 7}\n')
    with pytest.raises(ValueError, match="label 7 is not one of"):
        nli.load_split(str(tmp_path), "dev_matched")
    (tmp_path / "dev_matched.jsonl").unlink()
    (tmp_path / "dev_matched.tsv").write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="missing columns"):
        nli.load_split(str(tmp_path), "dev_matched")


def test_nli_eval_end_to_end_on_the_sample(data_dir, tmp_path, capsys):
    """A two-step fine-tune of a tiny encoder (never the real model in a test), then every variant:
    conversions that broke the model would fail these checks; a 2-step model's accuracy says
    nothing, so the checks are on agreement with FP32."""
    recipe = finetune.Recipe(limit=16, epochs=1, batch_size=8, checkpoint_every=1000)
    result = nli_eval.run(data_dir, recipe=recipe, cache=str(tmp_path / "cache"),
                          work_dir=str(tmp_path / "work"), latency_pairs=3, debug_samples=4,
                          encoder_dir=tiny_encoder.write(str(tmp_path)))
    r = result["results"]
    assert result["float_max_diff"] <= 1e-4
    assert result["saved_model"].identical and result["saved_model"].restored_traces <= 1
    assert r["saved_model"]["accuracy"] == r["fp32"]["accuracy"] and r["saved_model"]["delta"] == 0
    assert r["float32"]["accuracy"] == r["fp32"]["accuracy"]
    for name in ("float16", "dynamic-range"):  # 30 pairs: at most one prediction may flip
        assert abs(r[name]["delta"]) <= 100 / 30 + 1e-9
        assert r[name]["ci_low"] <= r[name]["delta"] <= r[name]["ci_high"]
    assert r["dynamic-range"]["size_bytes"] < r["float32"]["size_bytes"] / 3
    assert r["float16"]["size_bytes"] < r["float32"]["size_bytes"] * 0.6
    assert r["int8"]["size_bytes"] < r["float32"]["size_bytes"] / 3
    # every variant timed at 1 and 2 threads (TF's two in child processes)
    assert all(x["ms_1_thread"] > 0 and x["ms_2_threads"] > 0 for x in r.values())
    report = result["debug"]["report"]
    assert report.layers and report.output["nonfinite"] == 0 and report.output["cosine"] > 0.9
    assert result["training"]["traces_after_first_step"] == 0
    out = capsys.readouterr().out
    assert "dynamic-range" in out and "SavedModel" in out and "quantisation debug" in out
    with pytest.raises(SystemExit, match="nli_eval: NLI data folder"):
        nli_eval.main(["--data-dir", str(tmp_path / "missing")])
    with pytest.raises(SystemExit):
        nli_eval.main(["--data-dir", data_dir, "--variants", "fp32,bogus"])
