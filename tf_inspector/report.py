"""GraphReport: a traced FuncGraph node by node, with costs, as text, JSON and Graphviz.

The JSON schema (`to_json`), version "tf_inspector.graph_report/2":

    {"schema": "tf_inspector.graph_report/2",
     "function": str,                       # the traced function's graph name
     "symbols": [str],                      # the unknown dimensions costs depend on, sorted
     "op_counts": {op_type: int},           # sorted by op type
     "total_flops": cost, "total_bytes": cost,  # over nodes with a known cost
     "unknown_cost_ops": [op_type],         # op types of unknown cost (no rule, or shape), sorted
     "notes": [str],                        # why costs are missing, where known
     "xla": null | {"function", "trace_s", "compile_s", "run_s", "hlo_ops": {opcode: int},
                    "optimized_ops": {opcode: int}, "entry_ops": {opcode: int},
                    "fusions": int},        # xla.py
     "mlir": null | {"function", "graph_ops", "tf_ops", "lowered_ops": {op: int},
                     "tf_dialects", "lowered_dialects": {dialect: int},
                     "not_lowered": [op], "lowering_error": str|null},   # mlir.py
     "nodes": [{"name", "op", "inputs": [tensor name], "outputs": [{"dtype", "shape"}],
                "device", "flops": cost|null, "bytes": cost|null}],   # graph order
     "subgraphs": {name: <the same object>}}  # while/cond bodies, called functions

A cost is an int, or with unknown dimensions a formula in the symbols as a string
("2*batch*d1*147456"; sympy.sympify reads it back). Shapes are lists with null for
unknown dimensions, or null for unknown rank.
"""

import dataclasses
import json
from collections import Counter

from tf_inspector import cost, symbolic

SCHEMA = "tf_inspector.graph_report/2"


@dataclasses.dataclass
class TensorInfo:
    dtype: str
    shape: tuple  # None for unknown rank; None entries for unknown dimensions


@dataclasses.dataclass
class NodeInfo:
    name: str
    op: str
    inputs: list
    outputs: list  # [TensorInfo]
    device: str
    flops: object  # int, a sympy formula in the unknown dimensions, or None when unknown
    bytes: object

    @property
    def cost_known(self):
        return self.flops is not None


@dataclasses.dataclass
class GraphReport:
    function: str
    nodes: list
    subgraphs: dict = dataclasses.field(default_factory=dict)
    inputs: list = dataclasses.field(default_factory=list)  # input shapes, with symbols
    notes: list = dataclasses.field(default_factory=list)
    xla: object = None  # an xla.XlaCost, when asked for
    mlir: object = None  # an mlir.MlirView, when asked for

    @property
    def op_counts(self):
        return dict(sorted(Counter(n.op for n in self.nodes).items()))

    @property
    def total_flops(self):
        return symbolic.simplify(sum(n.flops for n in self.nodes if n.flops is not None))

    @property
    def total_bytes(self):
        return symbolic.simplify(sum(n.bytes for n in self.nodes if n.bytes is not None))

    @property
    def symbols(self):
        costs = [c for n in self.nodes for c in (n.flops, n.bytes)]
        return sorted({str(s) for c in costs for s in getattr(c, "free_symbols", ())}
                      | {s for sub in self.subgraphs.values() for s in sub.symbols})

    def cost(self, *inputs, **sizes):
        """{"flops", "bytes"}: the totals at concrete sizes of the unknown dimensions, given
        by name (cost(batch=8)) or as the inputs of a call (cost(tf.ones([8, 3])))."""
        # A size for a dimension the costs do not depend on would be ignored, and the
        # costs at the traced sizes read as costs at that size.
        unknown = sorted(set(sizes) - set(self.symbols))
        if unknown:
            raise ValueError("no unknown dimension named %s: the costs depend on %s" % (
                ", ".join(unknown), ", ".join(self.symbols) or "none (every dimension is known)"))
        sizes = {**symbolic.bind(self.inputs, inputs), **sizes}
        return {"flops": symbolic.evaluate(self.total_flops, sizes),
                "bytes": symbolic.evaluate(self.total_bytes, sizes)}

    @property
    def unknown_cost_ops(self):
        return sorted({n.op for n in self.nodes if n.flops is None})

    # -- renderers ----------------------------------------------------------------------

    def to_dict(self):
        return {
            "schema": SCHEMA,
            "function": self.function,
            "symbols": self.symbols,
            "op_counts": self.op_counts,
            "total_flops": _json_cost(self.total_flops),
            "total_bytes": _json_cost(self.total_bytes),
            "unknown_cost_ops": self.unknown_cost_ops,
            "notes": list(self.notes),
            "xla": None if self.xla is None else self.xla.to_dict(),
            "mlir": None if self.mlir is None else self.mlir.to_dict(),
            "nodes": [{
                "name": n.name, "op": n.op, "inputs": list(n.inputs),
                "outputs": [{"dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}
                            for t in n.outputs],
                "device": n.device, "flops": _json_cost(n.flops), "bytes": _json_cost(n.bytes),
            } for n in self.nodes],
            "subgraphs": {name: sub.to_dict() for name, sub in sorted(self.subgraphs.items())},
        }

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent)

    def to_text(self):
        lines = ["function %s: %d nodes, %s FLOPs, %s bytes moved"
                 % (self.function, len(self.nodes), _human(self.total_flops), _human(self.total_bytes))]
        called = cost.CALLS | cost.DATA_DEPENDENT
        for why, ops in (
                ("no cost rule for", [
                    op for op in self.unknown_cost_ops if not cost.has_rule(op) and op not in called]),
                ("cost unknown (a shape is unknown) for", [
                    op for op in self.unknown_cost_ops if cost.has_rule(op)]),
                ("cost of the functions they run (below) unknown for", [
                    op for op in self.unknown_cost_ops if op in called])):
            if ops:
                lines.append("%s: %s" % (why, ", ".join(ops)))
        lines.extend(self.notes)
        if self.xla is not None:
            lines.append(self.xla.to_text())
        if self.mlir is not None:
            lines.append(self.mlir.to_text())
        lines.append("op counts: " + ", ".join("%s %d" % kv for kv in self.op_counts.items()))
        rows = [("node", "op", "outputs", "FLOPs", "bytes")]
        for n in self.nodes:
            outs = ", ".join("%s%s" % (t.dtype, _shape(t.shape)) for t in n.outputs) or "-"
            rows.append((n.name, n.op, outs, "?" if n.flops is None else _human(n.flops),
                         "?" if n.bytes is None else _human(n.bytes)))
        widths = [min(48, max(len(r[i]) for r in rows)) for i in range(5)]
        for r in rows:
            lines.append("  ".join(c[:48].ljust(w) for c, w in zip(r, widths)).rstrip())
        for name, sub in sorted(self.subgraphs.items()):
            lines.append("")
            lines.extend("  " + line for line in ("subgraph " + sub.to_text()).splitlines())
        return "\n".join(lines)

    def to_dot(self):
        """Graphviz DOT source: one box per node, edges along data inputs."""
        out = ['digraph "%s" {' % self.function, "  rankdir=TB;",
               '  node [shape=box, fontname="Helvetica", fontsize=10];']
        names = {n.name for n in self.nodes}
        for n in self.nodes:
            shapes = ", ".join(_shape(t.shape) for t in n.outputs)
            out.append('  "%s" [label="%s\\n%s\\n%s"];' % (n.name, n.op, n.name, shapes))
        for n in self.nodes:
            for inp in n.inputs:
                source = inp.lstrip("^").split(":")[0]
                if source in names:
                    style = " [style=dashed]" if inp.startswith("^") else ""
                    out.append('  "%s" -> "%s"%s;' % (source, n.name, style))
        out.append("}")
        return "\n".join(out)

    def render_svg(self, path):
        """Writes the graph as SVG with Graphviz's `dot` (Debian: apt-get install graphviz)."""
        import graphviz
        try:
            svg = graphviz.Source(self.to_dot()).pipe(format="svg")
        except graphviz.ExecutableNotFound:
            raise RuntimeError("rendering SVG needs Graphviz's `dot` program (Debian: apt-get "
                               "install graphviz); to_dot() gives the DOT text") from None
        with open(path, "wb") as f:
            f.write(svg)
        return path


def _shape(shape):
    if shape is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _json_cost(value):
    return value if value is None or isinstance(value, int) else str(value)


def _human(n):
    if not isinstance(n, int):
        return str(n)  # a formula
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return "%.2f%s" % (n / size, unit)
    return str(n)
