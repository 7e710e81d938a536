"""The MLIR view of a traced function: its TF dialect, the bridge's lowering to StableHLO,
op counts per dialect beside the FuncGraph's node counts, and the ops that did not lower.

    view = tf_inspector.mlir_view(fn, tf.TensorSpec([None, 8]))
    print(view.to_text()); view.to_dict(); view.tf_dialect; view.lowered

tf_dialect is tf.mlir.experimental.convert_function's module. lowered runs TF's
"tf-lower-to-mlprogram-and-hlo" pipeline (TF dialect -> StableHLO, XLA's input) over the
function with its variables frozen to constants (a read of a resource has no static
shape in MLIR, and the StableHLO legalizations need one);
an op the bridge has no lowering for stays a "tf." op there and is listed in not_lowered.
Where the pipeline fails outright, lowering_error says why and lowered is empty.
"""

import dataclasses
import re
from collections import Counter

import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from tf_inspector.tracing import build_report

LOWERING = "tf-lower-to-mlprogram-and-hlo"
# An operation line: optional results, then the op name, quoted (generic form) or not.
_OP = re.compile(r'^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?"?([a-z_][\w]*\.[\w.]+)"?[\s(<{]')


def op_counts(module_text):
    """{op name: count} of the operations in an MLIR module's text (func.func included)."""
    return dict(sorted(Counter(m.group(1) for m in map(_OP.match, module_text.splitlines())
                               if m).items()))


def by_dialect(counts):
    out = Counter()
    for name, n in counts.items():
        out[name.split(".", 1)[0]] += n
    return dict(sorted(out.items()))


@dataclasses.dataclass
class MlirView:
    function: str
    graph_ops: dict       # FuncGraph node counts by op type
    tf_ops: dict          # TF dialect op counts ("tf.MatMul": 1)
    lowered_ops: dict     # after the bridge's lowering
    not_lowered: list     # TF dialect ops left in the lowered module
    lowering_error: str = None
    tf_dialect: str = dataclasses.field(repr=False, default="")
    lowered: str = dataclasses.field(repr=False, default="")

    def to_dict(self):
        out = dataclasses.asdict(self)
        del out["tf_dialect"], out["lowered"]
        out["tf_dialects"], out["lowered_dialects"] = by_dialect(self.tf_ops), by_dialect(self.lowered_ops)
        return out

    def to_text(self):
        lines = ["MLIR %s: TF dialect %s; lowered %s" % (
            self.function, _counts(by_dialect(self.tf_ops)),
            _counts(by_dialect(self.lowered_ops)) if not self.lowering_error
            else "failed: " + self.lowering_error)]
        if self.not_lowered:
            lines.append("not lowered by the bridge: " + ", ".join(self.not_lowered))
        rows = [("op type", "FuncGraph nodes", "TF dialect ops")]
        for op in sorted(set(self.graph_ops) | {k[3:] for k in self.tf_ops if k.startswith("tf.")}):
            rows.append((op, str(self.graph_ops.get(op, 0)), str(self.tf_ops.get("tf." + op, 0))))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
        return "\n".join(lines)


def _counts(counts):
    return ", ".join("%s %d" % kv for kv in counts.items()) or "no ops"


def mlir_view(fn, *inputs, **kwargs):
    """Traces fn on inputs (as trace_and_inspect does) and converts it; see the module docstring."""
    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    concrete = function.get_concrete_function(*inputs, **kwargs)
    name = concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name
    tf_dialect = tf.mlir.experimental.convert_function(concrete)
    lowered, error = "", None
    try:
        lowered = tf.mlir.experimental.convert_function(
            convert_variables_to_constants_v2(concrete), pass_pipeline=LOWERING)
    except Exception as e:  # noqa: BLE001 - MLIR raises one generic error type per failure
        error = str(e).strip().split("\n")[0]
    lowered_ops = op_counts(lowered)
    return MlirView(name, build_report(concrete.graph).op_counts, op_counts(tf_dialect), lowered_ops,
                    sorted(k for k in lowered_ops if k.startswith("tf.")), error, tf_dialect, lowered)
