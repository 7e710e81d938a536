"""SavedModel round trips and TFLite conversions of BERT models, checked, with sizes.

    module = serving_module(model)                  # a tf.Module with .serve(ids, mask, types)
    saved = check_saved_model(module, "/tmp/bert", batches)
    lite = convert_tflite("/tmp/bert", "dynamic-range"); lite.size_bytes
    outputs = lite.run(ids, mask, types)

The serving function returns mean-pooled sentence embeddings for a BertEncoder and
logits for a classifier (any model whose call takes ids, mask and type ids), for any
batch size and sequence length; the TFLite models keep both dimensions dynamic and
run() resizes the interpreter to each batch. Conversion modes (MODES): float32;
float16 (weights stored as float16); dynamic-range (int8 weights, float activations);
int8 (weights and activations int8, ranges calibrated on a representative dataset;
ops named in `float_nodes` stay float). Interpreters come from ai-edge-litert, with
tf.lite.Interpreter as the fallback.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tf_inspector import retrace
from tf_inspector.models.bert import BertEncoder, mean_pool

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_SIGNATURE = [tf.TensorSpec([None, None], tf.int32, name=n) for n in INPUTS]
MODES = ("float32", "float16", "dynamic-range", "int8")


class ExportError(RuntimeError):
    """Saving, loading or converting failed; the message names the cause."""


def serving_module(model):
    """A tf.Module whose `serve` (one signature: any batch and length) returns a BertEncoder's
    mean-pooled embeddings, or another model's outputs (a classifier's logits)."""
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=_SIGNATURE)
    def serve(input_ids, attention_mask, token_type_ids):
        outputs = model(input_ids, attention_mask, token_type_ids)
        return mean_pool(outputs, attention_mask) if isinstance(model, BertEncoder) else outputs

    module.serve = serve
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
                        self.max_abs_diff, "did not trace" if self.restored_traces == 0
                        else "traced %d time%s when called" % (self.restored_traces,
                                                             "" if self.restored_traces == 1 else "s")))


def check_saved_model(module, path, batches):
    """Saves, reloads and compares outputs on `batches` (lists of (ids, mask, types))."""
    try:
        tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    except Exception as e:
        raise ExportError("saving to %s failed: %s" % (path, str(e).split("\n")[0])) from e
    restored = load_saved_model(path)
    originals = [module.serve(*batch).numpy() for batch in batches]
    worst, identical = 0.0, True
    with retrace.monitor() as recorder:  # only the restored function runs in here
        for batch, ours in zip(batches, originals):
            theirs = restored.serve(*batch).numpy()
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
    mode: str
    threads: int = None  # interpreter threads (None: os.cpu_count())

    @property
    def size_bytes(self):
        return len(self.content)

    def with_threads(self, threads):
        return TFLiteModel(self.content, self.mode, threads)

    def input_names(self):
        """The inputs (of INPUTS) in the interpreter's order."""
        self._ensure_interpreter()
        return list(self._inputs.values())

    def _ensure_interpreter(self):
        if not hasattr(self, "_interpreter"):
            self._interpreter = _interpreter_class()(model_content=self.content,
                                                     num_threads=self.threads or os.cpu_count())
            self._inputs = {d["index"]: _input_name(d["name"])
                            for d in self._interpreter.get_input_details()}
            self._shape = None

    def run(self, input_ids, attention_mask, token_type_ids):
        """The outputs for one batch (the interpreter is resized to its shape)."""
        self._ensure_interpreter()
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
    for name in INPUTS:
        if name in tflite_name:
            return name
    raise ExportError("unexpected TFLite input %r" % tflite_name)


def tflite_converter(saved_model_dir, mode="float32", representative=None):
    """A TFLiteConverter for the SavedModel's serving signature, set up for `mode`.
    representative: for int8, a callable giving an iterable of {input name: array} samples."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    if mode not in MODES:
        raise ValueError("unknown TFLite mode %r: one of %s" % (mode, ", ".join(MODES)))
    if (mode == "int8") != (representative is not None):
        raise ValueError("a representative dataset is needed for int8, and only there")
    loaded = load_saved_model(saved_model_dir)
    if "serving_default" not in loaded.signatures:
        raise ExportError("%s has no serving_default signature to convert" % saved_model_dir)
    # Freeze first: the variables sit behind Keras' own tf.function (call), where the
    # converter would leave them as uninitialised resource variables.
    frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    if mode != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if mode == "int8":
        # The calibrator feeds samples in the order of the function's inputs.
        names = [t.name.split(":")[0] for t in frozen.inputs]
        order = [next(n for n in INPUTS if n in name) for name in names]
        converter.representative_dataset = lambda: _one_shape([s[n] for n in order]
                                                              for s in representative())
    return converter


def _one_shape(samples):
    """The samples, checked: TFLite's calibrator sizes its interpreter on the first one only."""
    first = None
    for sample in samples:
        shapes = [np.shape(x) for x in sample]
        first = first or shapes
        if shapes != first:
            raise ValueError("int8 calibration samples must all have the first one's shape %s "
                             "(TFLite's calibrator sizes its interpreter once); got %s: pad or "
                             "truncate them to one length" % (first, shapes))
        yield sample


def convert_tflite(saved_model_dir, mode="float32", representative=None, float_nodes=()):
    """The SavedModel's serving signature as a TFLite model in `mode` (see MODES). For int8,
    float_nodes names ops (by output tensor name) to keep in float: selective quantisation."""
    converter = tflite_converter(saved_model_dir, mode, representative)
    try:
        if mode == "int8":
            # The quantisation debugger's converter path, the one that can leave nodes in float.
            debugger = tf.lite.experimental.QuantizationDebugger(
                converter=converter, debug_dataset=lambda: iter(()),
                debug_options=tf.lite.experimental.QuantizationDebugOptions(
                    denylisted_nodes=list(float_nodes) or None))
            return TFLiteModel(debugger.get_nondebug_quantized_model(), mode)
        if float_nodes:
            raise ValueError("float_nodes applies to int8 only")
        return TFLiteModel(converter.convert(), mode)
    except ValueError:
        raise
    except Exception as e:  # ConverterError and friends
        message = str(e)
        ops = sorted({w.split("'")[1] for w in message.split() if w.startswith("'tf.")} |
                     {part.split("'")[1] for part in message.split("op '")[1:] if "'" in part})
        cause = ("ops TFLite has no kernel for: %s" % ", ".join(ops)) if ops else message.split("\n")[0]
        raise ExportError("TFLite conversion failed: %s. Export with the standard ops (e.g. "
                          "use_warp_softmax=False), or register TFLite kernels for them" % cause) from e
