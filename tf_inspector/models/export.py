"""SavedModel round trips and TFLite conversion of a BertEncoder, checked, with sizes.

    module = serving_module(model)                  # a tf.Module with .embed(ids, mask, types)
    saved = check_saved_model(module, "/tmp/bert", batches)
    lite = convert_tflite("/tmp/bert", dynamic_range=True); lite.size_bytes
    outputs = lite.run(ids, mask, types)

The serving function returns mean-pooled sentence embeddings and takes any
batch size and sequence length. Interpreters come from ai-edge-litert, with
tf.lite.Interpreter as the fallback.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tf_inspector import retrace
from tf_inspector.models.bert import mean_pool

_SIGNATURE = [tf.TensorSpec([None, None], tf.int32, name=n)
              for n in ("input_ids", "attention_mask", "token_type_ids")]


class ExportError(RuntimeError):
    """Saving, loading or converting failed; the message names the cause."""


def serving_module(model):
    """A tf.Module whose `embed` (one signature: any batch and length) returns embeddings."""
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=_SIGNATURE)
    def embed(input_ids, attention_mask, token_type_ids):
        return mean_pool(model(input_ids, attention_mask, token_type_ids), attention_mask)

    module.embed = embed
    return module


def _directory_size(path):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


@dataclasses.dataclass
class SavedModelReport:
    path: str
    size_bytes: int
    max_abs_diff: float      # restored vs original outputs, over the given batches
    identical: bool          # bit-identical outputs
    restored_traces: int     # traces the restored function made while called (0: none)

    def to_text(self):
        return ("SavedModel %s: %.1f MB; restored outputs %s (max |diff| %.3g); restored function "
                "%s" % (self.path, self.size_bytes / 1e6, "identical" if self.identical else "differ",
                        self.max_abs_diff, "did not retrace" if self.restored_traces == 0
                        else "retraced %d times" % self.restored_traces))


def check_saved_model(module, path, batches):
    """Saves, reloads and compares outputs on `batches` (lists of (ids, mask, types))."""
    try:
        tf.saved_model.save(module, path, signatures={"serving_default": module.embed})
    except Exception as e:
        raise ExportError("saving to %s failed: %s" % (path, str(e).split("\n")[0])) from e
    restored = load_saved_model(path)
    originals = [module.embed(*batch).numpy() for batch in batches]
    worst, identical = 0.0, True
    with retrace.monitor() as recorder:  # only the restored function runs in here
        for batch, ours in zip(batches, originals):
            theirs = restored.embed(*batch).numpy()
            worst = max(worst, float(np.abs(ours - theirs).max()))
            identical &= bool(np.array_equal(ours, theirs))
    return SavedModelReport(path, _directory_size(path), worst, identical, len(recorder.events))


def load_saved_model(path):
    if not os.path.isdir(path):
        raise ExportError("no SavedModel at %s (not a directory)" % path)
    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        raise ExportError("%s is not a SavedModel: saved_model.pb is missing" % path)
    try:
        return tf.saved_model.load(path)
    except Exception as e:
        raise ExportError("the SavedModel at %s could not be loaded (corrupt or incomplete?): %s"
                          % (path, str(e).split("\n")[0])) from e


def _interpreter_class():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = tf.lite.Interpreter
    return Interpreter


@dataclasses.dataclass
class TFLiteModel:
    content: bytes
    dynamic_range: bool

    @property
    def size_bytes(self):
        return len(self.content)

    def run(self, input_ids, attention_mask, token_type_ids):
        """Embeddings for one batch (the interpreter is resized to its shape)."""
        if not hasattr(self, "_interpreter"):
            self._interpreter = _interpreter_class()(model_content=self.content,
                                                     num_threads=os.cpu_count())
            self._inputs = {d["index"]: _input_name(d["name"])
                            for d in self._interpreter.get_input_details()}
            self._shape = None
        interp = self._interpreter
        arrays = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        shape = np.shape(input_ids)
        if shape != self._shape:
            for index in self._inputs:
                interp.resize_tensor_input(index, shape)
            interp.allocate_tensors()
            self._shape = shape
        for index, name in self._inputs.items():
            interp.set_tensor(index, np.asarray(arrays[name], np.int32))
        interp.invoke()
        return interp.get_tensor(interp.get_output_details()[0]["index"])


def _input_name(tflite_name):
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        if name in tflite_name:
            return name
    raise ExportError("unexpected TFLite input %r" % tflite_name)


def convert_tflite(saved_model_dir, dynamic_range=False):
    """A SavedModel's serving signature as a TFLite flatbuffer (float, or dynamic-range:
    int8 weights, float activations)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    loaded = load_saved_model(saved_model_dir)
    if "serving_default" not in loaded.signatures:
        raise ExportError("%s has no serving_default signature to convert" % saved_model_dir)
    # Freeze first: the variables sit behind Keras' own tf.function (call), where the
    # converter would leave them as uninitialised resource variables.
    frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    if dynamic_range:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return TFLiteModel(converter.convert(), dynamic_range)
    except Exception as e:  # ConverterError and friends
        message = str(e)
        ops = sorted({w.split("'")[1] for w in message.split() if w.startswith("'tf.")} |
                     {part.split("'")[1] for part in message.split("op '")[1:] if "'" in part})
        cause = ("ops TFLite has no kernel for: %s" % ", ".join(ops)) if ops else message.split("\n")[0]
        raise ExportError("TFLite conversion failed: %s. Export with the standard ops (e.g. "
                          "use_warp_softmax=False), or register TFLite kernels for them" % cause) from e
