"""NLI loaders (JSON lines, GLUE TSV, tensorflow-datasets) and the evaluation end to end."""

import os
import shutil

import numpy as np
import pytest

from tf_inspector.models import nli, nli_eval

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
    result = nli_eval.run(data_dir, "dev_mismatched", "dev_matched", work_dir=str(tmp_path / "work"))
    assert result["accuracy"]["fp32"] > 0.9  # fitted and scored on the same pairs here
    assert abs(result["delta_points"]) <= 100
    assert result["float_max_diff"] <= 1e-4
    assert result["sizes"]["dynamic-range"] < result["sizes"]["float"] / 3
    out = capsys.readouterr().out
    assert "TFLite dynamic-range" in out and "SavedModel" in out
    with pytest.raises(SystemExit, match="nli_eval: NLI data folder"):
        nli_eval.main(["--data-dir", str(tmp_path / "missing")])
