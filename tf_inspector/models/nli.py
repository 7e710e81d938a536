"""NLI data: MNLI and friends, as the cross-encoder (classifier.py) trains and is scored on.

Loaders, all giving a list of Pair(premise, hypothesis, label) with labels in
Hugging Face glue/mnli order (0 entailment, 1 neutral, 2 contradiction):
  - JSON lines with premise/hypothesis/label (the layout of ../shared/data/mnli);
  - GLUE's TSV (dev_matched.tsv: sentence1, sentence2, gold_label);
  - a tensorflow-datasets builder, MnliLocal, that reads either from a manual_dir.
"""

import csv
import dataclasses
import json
import os


LABELS = ("entailment", "neutral", "contradiction")
SPLIT_FILES = {  # split -> file names tried in order
    "dev_matched": ("dev_matched.jsonl", "dev_matched.tsv"),
    "dev_mismatched": ("dev_mismatched.jsonl", "dev_mismatched.tsv"),
    "train": ("train.jsonl", "train.tsv"),
}


@dataclasses.dataclass
class Pair:
    premise: str
    hypothesis: str
    label: int


def _label(value, where):
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        label = int(value)
        if 0 <= label < len(LABELS):
            return label
    elif value in LABELS:
        return LABELS.index(value)
    raise ValueError("%s: label %r is not one of 0, 1, 2 or %s" % (where, value, ", ".join(LABELS)))


def read_jsonl(path):
    pairs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = "%s:%d" % (path, number)
            try:
                row = json.loads(line)
                pairs.append(Pair(row["premise"], row["hypothesis"], _label(row["label"], where)))
            except (json.JSONDecodeError, KeyError) as e:
                raise ValueError("%s: not an NLI record (premise, hypothesis, label): %s" % (where, e))
    return pairs


def read_glue_tsv(path):
    pairs = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = {"sentence1", "sentence2", "gold_label"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError("%s: not a GLUE MNLI file, missing columns %s" % (path, sorted(missing)))
        for number, row in enumerate(reader, 2):
            if row["gold_label"] == "-":  # no annotator majority: GLUE drops these too
                continue
            pairs.append(Pair(row["sentence1"], row["sentence2"],
                              _label(row["gold_label"], "%s:%d" % (path, number))))
    return pairs


def load_split(data_dir, split):
    """The pairs of `split` from a folder with <split>.jsonl or <split>.tsv."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError("NLI data folder %s does not exist" % data_dir)
    for name in SPLIT_FILES.get(split, (split + ".jsonl", split + ".tsv")):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            pairs = read_jsonl(path) if name.endswith(".jsonl") else read_glue_tsv(path)
            if not pairs:
                raise ValueError("%s holds no pairs" % path)
            return pairs
    raise FileNotFoundError("no %s split in %s (looked for %s)" % (
        split, data_dir, ", ".join(SPLIT_FILES.get(split, (split + ".jsonl", split + ".tsv")))))


def tfds_builder(manual_dir, data_dir):
    """A tensorflow-datasets builder of MNLI, prepared from files in `manual_dir` (JSON lines or
    TSV) into `data_dir`: builder.as_dataset(split="dev_matched") then reads it."""
    import tensorflow_datasets as tfds

    class MnliLocal(tfds.core.GeneratorBasedBuilder):
        """MNLI dev sets (or any NLI split) from local files; nothing is downloaded."""

        VERSION = tfds.core.Version("1.0.0")
        MANUAL_DOWNLOAD_INSTRUCTIONS = "Place dev_matched.jsonl / dev_matched.tsv etc. in manual_dir."

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "premise": tfds.features.Text(), "hypothesis": tfds.features.Text(),
                "label": tfds.features.ClassLabel(names=list(LABELS))}))

        def _split_generators(self, dl_manager):
            folder = str(dl_manager.manual_dir)
            return {split: self._generate_examples(folder, split) for split in SPLIT_FILES
                    if any(os.path.exists(os.path.join(folder, n)) for n in SPLIT_FILES[split])}

        def _generate_examples(self, folder, split):
            for i, pair in enumerate(load_split(folder, split)):
                yield i, dataclasses.asdict(pair)

    builder = MnliLocal(data_dir=data_dir)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    return builder
