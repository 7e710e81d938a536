"""Hugging Face BERT weights -> BertEncoder, by name.

Accepts BertModel checkpoints with or without the "bert." prefix (the latter
is how sentence-transformers stores them), as model.safetensors or
pytorch_model.bin. Linear weights are stored (out, in) there and (in, out) in
Keras, so they are transposed. Every weight of the model must be found, and
every checkpoint tensor of the encoder used: anything else is an error naming
the tensors, never a silently half-loaded model.
"""

import os

import numpy as np


def _read(folder):
    safetensors = os.path.join(folder, "model.safetensors")
    if os.path.exists(safetensors):
        from safetensors.numpy import load_file
        return load_file(safetensors)
    torch_bin = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(torch_bin):
        import torch
        return {k: v.numpy() for k, v in torch.load(torch_bin, map_location="cpu",
                                                    weights_only=True).items()}
    raise FileNotFoundError("%s has neither model.safetensors nor pytorch_model.bin" % folder)


def _targets(model):
    """{Hugging Face name: (keras variable, transpose?)} for every weight of the model."""
    names = {
        "embeddings.word_embeddings.weight": (model.word_embeddings.embeddings, False),
        "embeddings.position_embeddings.weight": (model.position_embeddings.embeddings, False),
        "embeddings.token_type_embeddings.weight": (model.token_type_embeddings.embeddings, False),
        "embeddings.LayerNorm.weight": (model.embedding_norm.gamma, False),
        "embeddings.LayerNorm.bias": (model.embedding_norm.beta, False),
    }
    for i, layer in enumerate(model.encoder_layers):
        prefix = "encoder.layer.%d." % i
        dense = {"attention.self.query": layer.query, "attention.self.key": layer.key,
                 "attention.self.value": layer.value, "attention.output.dense": layer.attention_output,
                 "intermediate.dense": layer.intermediate, "output.dense": layer.output_dense}
        for hf, keras_layer in dense.items():
            names[prefix + hf + ".weight"] = (keras_layer.kernel, True)
            names[prefix + hf + ".bias"] = (keras_layer.bias, False)
        for hf, norm in {"attention.output.LayerNorm": layer.attention_norm,
                         "output.LayerNorm": layer.output_norm}.items():
            names[prefix + hf + ".weight"] = (norm.gamma, False)
            names[prefix + hf + ".bias"] = (norm.beta, False)
    return names


def load_hf_weights(model, folder):
    weights = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in _read(folder).items()}
    targets = _targets(model)
    missing = sorted(set(targets) - set(weights))
    if missing:
        raise ValueError("%s lacks %d weights the model needs, e.g. %s"
                         % (folder, len(missing), ", ".join(missing[:3])))
    unused = sorted(k for k in weights if k.startswith(("embeddings.", "encoder."))
                    and k not in targets and not k.endswith("position_ids"))
    if unused:
        raise ValueError("%s has encoder weights this model has no place for (more layers or a "
                         "different architecture?): %s" % (folder, ", ".join(unused[:3])))
    for name, (variable, transpose) in targets.items():
        value = weights[name].T if transpose else weights[name]
        if tuple(variable.shape) != value.shape:
            raise ValueError("%s: shape %s in the checkpoint, %s in the model"
                             % (name, value.shape, tuple(variable.shape)))
        variable.assign(np.asarray(value, dtype=np.float32))
    return model
