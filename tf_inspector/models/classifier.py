"""A BERT cross-encoder for NLI: `[CLS] premise [SEP] hypothesis [SEP]` -> 3 logits.

    model = NliClassifier.from_pretrained(folder)          # MiniLM-L6 encoder + a new head
    tokens = PairTokenizer(os.path.join(folder, "tokenizer.json"))
    logits = predict(model, tokens(pairs))                  # (len(pairs), 3), input order

Unlike a sentence encoder (premise and hypothesis embedded apart), the two attend to each other.
The head reads the mean of the token vectors (the pooling MiniLM was trained with).
Batches are padded only to their longest pair and grouped by length (batches()),
and every tf.function here takes [None, None] inputs, so no length retraces.
"""

import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

from tf_inspector.models.bert import BertEncoder, mean_pool

NUM_LABELS = 3
SPEC = tf.TensorSpec([None, None], tf.int32)


class NliClassifier(keras.Model):
    def __init__(self, encoder, dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.dropout = keras.layers.Dropout(dropout)
        self.head = keras.layers.Dense(NUM_LABELS, name="head",
                                       kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02))
        self(tf.zeros([1, 2], tf.int32), tf.ones([1, 2], tf.int32), tf.zeros([1, 2], tf.int32))

    def call(self, input_ids, attention_mask, token_type_ids, training=False):
        pooled = mean_pool(self.encoder(input_ids, attention_mask, token_type_ids), attention_mask)
        return self.head(self.dropout(pooled, training=training))

    @property
    def _default_save_signature(self):
        # As BertEncoder's: export.py saves through a module with the three-input signature.
        return None

    @classmethod
    def from_pretrained(cls, folder, dropout=0.1):
        return cls(BertEncoder.from_pretrained(folder), dropout=dropout)


class PairTokenizer:
    """(premise, hypothesis) pairs -> token id, type id and mask rows, truncated to max_length."""

    def __init__(self, tokenizer_json, max_length=128):
        from tokenizers import Tokenizer
        self.tokenizer = Tokenizer.from_file(tokenizer_json)
        self.tokenizer.no_padding()  # MiniLM's tokenizer.json pads every row to 128
        self.tokenizer.enable_truncation(max_length)

    def __call__(self, pairs):
        encodings = self.tokenizer.encode_batch([(p.premise, p.hypothesis) for p in pairs])
        return [(np.array(e.ids, np.int32), np.array(e.type_ids, np.int32)) for e in encodings]


def pad(rows):
    """A list of (ids, type_ids) rows -> (ids, mask, type_ids), padded to the longest row."""
    width = max(len(ids) for ids, _ in rows)
    ids = np.zeros((len(rows), width), np.int32)
    types, mask = np.zeros_like(ids), np.zeros_like(ids)
    for r, (row_ids, row_types) in enumerate(rows):
        ids[r, :len(row_ids)], types[r, :len(row_ids)], mask[r, :len(row_ids)] = row_ids, row_types, 1
    return ids, mask, types


def batches(rows, batch_size, rng=None, pool=50):
    """Index batches of similar length. Without rng: sorted by length (for inference). With
    rng: shuffled, sorted by length within pools of `pool` batches, and the batches shuffled,
    so each epoch differs but pads little."""
    lengths = np.array([len(ids) for ids, _ in rows])
    if rng is None:
        order = np.argsort(lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    order = rng.permutation(len(rows))
    out = []
    for start in range(0, len(order), batch_size * pool):
        chunk = order[start:start + batch_size * pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        out.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return [out[i] for i in rng.permutation(len(out))]


def logits_fn(model):
    """model's inference as a tf.function over [None, None] inputs (one trace for all lengths)."""
    @tf.function(input_signature=[SPEC, SPEC, SPEC])
    def logits(input_ids, attention_mask, token_type_ids):
        return model(input_ids, attention_mask, token_type_ids, training=False)
    return logits


def predict(run, rows, batch_size=64, desc="predicting"):
    """Logits for every row, in input order. `run(ids, mask, types)` is a NliClassifier's
    logits_fn or a converted model's runner."""
    from tqdm import tqdm
    out = np.zeros((len(rows), NUM_LABELS), np.float32)
    for index in tqdm(batches(rows, batch_size), desc=desc, unit="batch", file=sys.stderr,
                      leave=False):
        out[index] = np.asarray(run(*pad([rows[i] for i in index])))
    return out
