"""NLI data (MNLI and friends) and the FP32-vs-TFLite accuracy check on it.

Loaders, all giving a list of Pair(premise, hypothesis, label) with labels in
Hugging Face glue/mnli order (0 entailment, 1 neutral, 2 contradiction):
  - JSON lines with premise/hypothesis/label (the layout of ../shared/data/mnli);
  - GLUE's TSV (dev_matched.tsv: sentence1, sentence2, gold_label);
  - a tensorflow-datasets builder, MnliLocal, that reads either from a manual_dir.

Evaluation: a sentence encoder (BertEncoder + mean pooling) embeds premise and
hypothesis; a logistic-regression head on [u, v, |u - v|, u * v] is fitted on
one split and scored on another, with the FP32 encoder and with its TFLite
dynamic-range conversion, so the accuracy delta is the quantisation's alone.
"""

import csv
import dataclasses
import json
import os
import sys

import numpy as np

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


class SentenceEncoder:
    """Tokenises with the model's vocab and embeds in batches, FP32 (TF) or TFLite."""

    def __init__(self, tokenizer_json, embed_fn, max_length=128, batch_size=64):
        from tokenizers import Tokenizer
        self.tokenizer = Tokenizer.from_file(tokenizer_json)
        self.tokenizer.enable_truncation(max_length)
        self.embed_fn, self.batch_size = embed_fn, batch_size

    def __call__(self, sentences, desc="embedding"):
        from tqdm import tqdm
        # Sorted by length, so each batch pads little; results come back in input order.
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out = [None] * len(sentences)
        for start in tqdm(range(0, len(order), self.batch_size), desc=desc, unit="batch",
                          file=sys.stderr, leave=False):
            index = order[start:start + self.batch_size]
            encodings = self.tokenizer.encode_batch([sentences[i] for i in index])
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(index), width), np.int32)
            mask = np.zeros_like(ids)
            for row, e in enumerate(encodings):
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
            embeddings = np.asarray(self.embed_fn(ids, mask, np.zeros_like(ids)))
            for row, i in enumerate(index):
                out[i] = embeddings[row]
        return np.stack(out)


def pair_features(encoder, pairs, desc):
    u = encoder([p.premise for p in pairs], desc + " premises")
    v = encoder([p.hypothesis for p in pairs], desc + " hypotheses")
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def fit_head(features, labels):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0)).fit(features, labels)
