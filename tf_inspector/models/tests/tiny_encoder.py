"""A Hugging Face BERT folder small enough to fine-tune in a test (imported by the tests as a
sibling module): 2 layers, hidden 32, seeded random weights, MiniLM's tokenizer."""

import json
import os
import shutil

import keras
import numpy as np

from tf_inspector.models import checkpoints, finetune
from tf_inspector.models.bert import BertConfig, BertEncoder


def write(folder, seed=0):
    from safetensors.numpy import save_file
    # Seeded: unseeded weights made the end-to-end test's int8 agreement a draw (output
    # cosine 0.63 to above 0.9 from run to run), so it failed now and then.
    keras.utils.set_random_seed(seed)
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    model = BertEncoder(BertConfig(**sizes))
    save_file({name: np.ascontiguousarray(v.numpy().T if t else v.numpy())
               for name, (v, t) in checkpoints._targets(model).items()},
              os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(sizes, f)
    shutil.copy(os.path.join(finetune.default_encoder_dir(), "tokenizer.json"), folder)
    return str(folder)
