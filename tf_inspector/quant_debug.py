"""Which layer of an int8 TFLite model loses the accuracy, or makes the NaN.

    report = tf_inspector.quant_debug(model, converter, samples)
    print(report.to_text())            # per layer: RMSE/scale, max |error|, cosine, clipping
    report.first_jump, report.first_nonfinite
    report.to_json(); report.plot("errors.png"); report.model_explorer_data("errors.json")
    fixed = report.recover()           # re-converted with report.first_jump kept in float

`converter` is the conversion being debugged: a tf.lite.TFLiteConverter set up for full
integer quantisation (optimizations and a representative_dataset), or a function returning
one. `model` is the float model (a callable: a tf.function, a Keras model) whose one output
(a tensor, or a structure of one, as a signature's dict) the quantised model's final output
is compared with. `samples` are the debugging inputs: each
a list in the model's input order or a dict by input name; all of one shape (the TFLite
debugger sizes its interpreter on the first).

How: TFLite's QuantizationDebugger (tf.lite.experimental) calibrates the model, quantises it
with a NumericVerify op after every quantised op, and on each sample runs every op twice: in
int8, and in float on the same (dequantised) inputs. So each layer's error is its own, not
the sum of the layers before it, and the first layer with a large error is where the loss
starts. Per layer: RMSE / scale (the error in quantisation steps: rounding alone gives
1/sqrt(12) = 0.29), max |error|, cosine of float and dequantised outputs, the fraction of
float values outside the int8 range (an activation range that overflows int8: the calibration
saw smaller values), and non-finite values on either side. first_jump is the first layer, in
execution order, whose RMSE/scale is over `jump` (default 1: more than a step). Keeping a
layer in float is TFLite's selective quantisation (denylisted_nodes).
"""

import csv
import dataclasses
import io
import json
import math

import numpy as np

ROUNDING = 1 / math.sqrt(12)  # RMSE/scale of rounding uniformly distributed values


@dataclasses.dataclass
class LayerError:
    index: int          # execution order among the quantised ops
    tensor: str         # the op's output tensor (the name denylisted_nodes takes)
    op: str
    rmse_over_scale: float
    max_abs_error: float
    cosine: float
    clipped: float      # fraction of float outputs outside the int8 range
    nonfinite: float    # mean count of NaN/Inf per sample, float or dequantised side
    scale: float


@dataclasses.dataclass
class QuantDebugReport:
    layers: list
    first_jump: LayerError       # None when no layer's RMSE/scale is over `jump`
    first_nonfinite: LayerError  # None when every layer stayed finite
    output: dict                 # the model's final outputs: float vs quantised
    jump: float
    samples: int
    _debugger: object = dataclasses.field(default=None, repr=False)

    @property
    def worst(self):
        return max(self.layers, key=lambda l: l.rmse_over_scale) if self.layers else None

    def recover(self, nodes=None):
        """The quantised model (bytes) re-converted with `nodes` (tensor names; default: the
        first jump) kept in float; the other layers are quantised as before."""
        import tensorflow as tf
        nodes = list(nodes) if nodes is not None else ([self.first_jump.tensor] if self.first_jump
                                                       else [])
        if not nodes:
            raise ValueError("no layer to keep in float: no first jump, and none named")
        known = {l.tensor for l in self.layers}
        unknown = [n for n in nodes if n not in known]
        if unknown:
            raise ValueError("not a quantised layer of this model: %s" % ", ".join(unknown))
        self._debugger.options = tf.lite.experimental.QuantizationDebugOptions(
            denylisted_nodes=nodes)
        return self._debugger.get_nondebug_quantized_model()

    def to_json(self):
        """The report as JSON; a metric that is not finite (the cosine of a layer with an Inf,
        RMSE/scale at scale 0) is null, as JSON has no NaN or Infinity."""
        def layer(l):
            return dataclasses.asdict(l) if l else None
        return json.dumps(_finite_or_null({
            "samples": self.samples, "jump": self.jump, "rounding": ROUNDING,
            "first_jump": layer(self.first_jump), "first_nonfinite": layer(self.first_nonfinite),
            "output": self.output, "layers": [layer(l) for l in self.layers]}),
            indent=1, allow_nan=False)

    def to_text(self, top=10):
        lines = ["quantisation debug over %d samples, %d quantised layers (RMSE/scale of rounding "
                 "alone: %.2f; jump: over %.2f)" % (self.samples, len(self.layers), ROUNDING,
                                                     self.jump)]
        out = self.output
        lines.append("final output, quantised vs float: RMSE %.4g, max |error| %.4g, cosine %.4f, "
                     "argmax agreement %.1f%%, non-finite values %d (float model: %d)"
                     % (out["rmse"], out["max_abs_error"], out["cosine"],
                        100 * out["argmax_agreement"], out["nonfinite"], out["float_nonfinite"]))
        if self.first_nonfinite:
            lines.append("first NaN/Inf: layer %d %s (%s), from its int8 inputs" % (
                self.first_nonfinite.index, self.first_nonfinite.op, self.first_nonfinite.tensor))
        else:
            lines.append("no NaN/Inf in any quantised layer")
        if self.first_jump:
            j = self.first_jump
            why = (" - %.1f%% of its float outputs lie outside the int8 range: the activation "
                   "range overflows int8" % (100 * j.clipped)) if j.clipped > 0.001 else ""
            lines.append("first jump: layer %d %s (%s): RMSE/scale %.2f, cosine %.4f%s"
                         % (j.index, j.op, j.tensor, j.rmse_over_scale, j.cosine, why))
        else:
            lines.append("no layer's error is over %.2f steps" % self.jump)
        lines.append("")
        lines.append("%5s %-16s %10s %12s %8s %8s  %s" % ("layer", "op", "RMSE/scale", "max |err|",
                                                          "cosine", "clipped", "tensor"))
        shown = sorted(self.layers, key=lambda l: -l.rmse_over_scale)[:top]
        for l in sorted(shown, key=lambda l: l.index):
            lines.append("%5d %-16s %10.3f %12.4g %8.4f %7.2f%%  %s" % (
                l.index, l.op[:16], l.rmse_over_scale, l.max_abs_error, l.cosine, 100 * l.clipped,
                l.tensor[:90]))
        if len(self.layers) > top:
            lines.append("(the %d layers with the largest RMSE/scale of %d; to_json() has all)"
                         % (top, len(self.layers)))
        return "\n".join(lines)

    def plot(self, path, title="int8 error per layer"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        x = [l.index for l in self.layers]
        fig, ax = plt.subplots(figsize=(max(7, len(x) / 12), 4))
        ax.semilogy(x, [max(l.rmse_over_scale, 1e-3) for l in self.layers], ".-",
                    label="RMSE / scale")
        ax.axhline(ROUNDING, color="green", lw=0.8, ls="--", label="rounding alone")
        ax.axhline(self.jump, color="red", lw=0.8, ls="--", label="jump threshold")
        if self.first_jump:
            ax.axvline(self.first_jump.index, color="red", lw=0.8)
            ax.annotate("first jump: %s" % self.first_jump.op, (self.first_jump.index, self.jump),
                        textcoords="offset points", xytext=(4, 8), color="red")
        ax.set_xlabel("quantised layer (execution order)")
        ax.set_ylabel("RMSE / scale (steps)")
        ax2 = ax.twinx()
        ax2.plot(x, [l.cosine for l in self.layers], color="grey", alpha=0.6, lw=0.8)
        ax2.set_ylabel("cosine (grey)")
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)

    def model_explorer_data(self, path=None):
        """Model Explorer node data (RMSE/scale per node, keyed by output tensor name) for the
        quantised TFLite graph; saved to `path` when given. Load it beside the .tflite file."""
        from model_explorer import node_data_builder as ndb
        data = ndb.GraphNodeData(
            results={l.tensor: ndb.NodeDataResult(value=round(l.rmse_over_scale, 4))
                     for l in self.layers},
            thresholds=[ndb.ThresholdItem(value=ROUNDING * 1.5, bgColor="#c8e6c9"),
                        ndb.ThresholdItem(value=self.jump, bgColor="#fff59d"),
                        ndb.ThresholdItem(value=float("inf"), bgColor="#ef9a9a")])
        if path:
            data.save_to_file(path)
        return data


def _finite_or_null(value):
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def _dequantize(q, scale, zero_point):
    return (np.asarray(q, np.int32) - zero_point) * np.float32(scale)


def _cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not (np.isfinite(na) and np.isfinite(nb)):
        return float("nan")
    return 1.0 if na == nb == 0 else float(a @ b / max(na * nb, 1e-30))


def _clipped(f, q, scale, zero_point):
    low, high = (-128 - zero_point) * scale, (127 - zero_point) * scale
    f = np.asarray(f)
    return float(np.mean((f < low - scale / 2) | (f > high + scale / 2)))


def _nonfinite(f, q, scale, zero_point):
    return float(np.sum(~np.isfinite(f)) + np.sum(~np.isfinite(_dequantize(q, scale, zero_point))))


def _ordered(sample, names):
    """A sample as a list in the interpreter's input order (dicts matched by input name)."""
    if not isinstance(sample, dict):
        return [np.asarray(x) for x in sample]
    out = []
    for name in names:
        key = next((k for k in sample if k == name), None) or next(
            (k for k in sorted(sample, key=len, reverse=True) if k in name), None)
        if key is None:
            raise ValueError("no sample value for the model input %r (keys: %s)"
                             % (name, ", ".join(sample)))
        out.append(np.asarray(sample[key]))
    return out


def _only_output(outputs):
    """The model's one output tensor, however nested (a signature returns a dict of them)."""
    import tensorflow as tf
    flat = tf.nest.flatten(outputs)
    if len(flat) != 1:
        # The TFLite model's outputs are not in tf.nest's order: which one is which is unknown.
        raise ValueError("quant_debug compares one output, and the model returns %d" % len(flat))
    return np.asarray(flat[0])


def _run_tflite(content, rows):
    from tensorflow import lite
    interpreter = lite.Interpreter(model_content=content)
    outputs, shape = [], None
    inputs = interpreter.get_input_details()
    for row in rows:
        if shape != [x.shape for x in row]:
            for detail, x in zip(inputs, row):
                interpreter.resize_tensor_input(detail["index"], x.shape)
            interpreter.allocate_tensors()
            shape = [x.shape for x in row]
        for detail, x in zip(inputs, row):
            interpreter.set_tensor(detail["index"], x.astype(detail["dtype"]))
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    return outputs


def quant_debug(model, converter, samples, jump=1.0):
    """A QuantDebugReport of the int8 conversion `converter` of `model` on `samples`."""
    import tensorflow as tf

    if not hasattr(converter, "convert"):
        converter = converter()
    if not converter.optimizations or converter.representative_dataset is None:
        raise ValueError("quant_debug needs the converter of a full-integer quantisation: set "
                         "converter.optimizations = [tf.lite.Optimize.DEFAULT] and "
                         "converter.representative_dataset")
    samples = list(samples)
    if not samples:
        raise ValueError("quant_debug needs at least one sample")
    # Calibrates, and quantises with NumericVerify ops (the debug model); kept for recover().
    converting = tf.lite.experimental.QuantizationDebugger(converter=converter,
                                                           debug_dataset=lambda: iter(()))
    names = [d["name"] for d in
             tf.lite.Interpreter(model_content=converting.quant_model).get_input_details()]
    rows = [_ordered(s, names) for s in samples]
    shapes = {tuple(x.shape for x in row) for row in rows}
    if len(shapes) > 1:
        raise ValueError("quant_debug's samples must share one shape (the TFLite debugger sizes "
                         "its interpreter once); got %d shapes: pad them to one length"
                         % len(shapes))
    # Run from the debug model's bytes: only that path keeps every intermediate tensor
    # (experimental_preserve_all_tensors), which the float-vs-int8 comparisons read.
    metrics = {"cosine": lambda f, q, s, z: _cosine(f, _dequantize(q, s, z)),
               "clipped": _clipped, "nonfinite": _nonfinite}
    debugger = tf.lite.experimental.QuantizationDebugger(
        quant_debug_model_content=converting.quant_model, debug_dataset=lambda: iter(rows),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(
            layer_direct_compare_metrics=metrics))
    debugger.run()
    dump = io.StringIO()
    debugger.layer_statistics_dump(dump)
    layers = []
    for index, row in enumerate(csv.DictReader(io.StringIO(dump.getvalue()))):
        scale = float(row["scale"])
        layers.append(LayerError(
            index=index, tensor=row["tensor_name"], op=row["op_name"],
            rmse_over_scale=math.sqrt(float(row["mean_squared_error"])) / scale if scale else
            float("inf"), max_abs_error=float(row["max_abs_error"]), cosine=float(row["cosine"]),
            clipped=float(row["clipped"]), nonfinite=float(row["nonfinite"]), scale=scale))

    quantised = _run_tflite(converting.get_nondebug_quantized_model(), rows)
    reference = [_only_output(model(**s) if isinstance(s, dict) else model(*s)) for s in samples]
    ours = np.concatenate([np.ravel(o) for o in quantised])
    theirs = np.concatenate([np.ravel(o) for o in reference])
    diff = ours - theirs
    output = {"rmse": float(np.sqrt(np.mean(diff ** 2))), "max_abs_error": float(np.abs(diff).max()),
              "cosine": _cosine(ours, theirs),
              "argmax_agreement": float(np.mean([np.array_equal(np.argmax(a, -1), np.argmax(b, -1))
                                                 for a, b in zip(quantised, reference)])),
              "nonfinite": int(np.sum(~np.isfinite(ours))),
              "float_nonfinite": int(np.sum(~np.isfinite(theirs)))}
    first_jump = next((l for l in layers if l.rmse_over_scale > jump), None)
    first_nonfinite = next((l for l in layers if l.nonfinite > 0), None)
    return QuantDebugReport(layers, first_jump, first_nonfinite, output, jump, len(rows),
                            converting)
