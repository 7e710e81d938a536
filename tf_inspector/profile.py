"""Measured time per graph node from the TF Profiler, beside the cost model's FLOPs and bytes.

    prof = tf_inspector.profile(fn, tf.ones([8, 128]), steps=10)
    print(prof.to_text())            # top ops by time: time, FLOPs, bytes, GFLOP/s, GB/s
    prof.plot("cost_vs_time.png")    # estimated FLOPs vs measured time per op type
    prof.to_model_explorer("prof/")  # graph.pbtxt + node data files for Google's Model Explorer

The function runs `warmup` times, then `steps` times under tf.profiler.experimental;
each executor event ("node:OpType") in the trace is joined to the GraphReport node of
that name, and its time is the mean per step. wall_s is the mean wall time per step
(a step waits for its outputs); busy_s the time some op was running (the union of their
intervals), so busy_s / wall_s says how much of the call the ops account for, and
op_time_s (the sum) exceeds busy_s where TF ran independent ops on two threads at once.
"""

import dataclasses
import glob
import os
import tempfile
import time
from collections import defaultdict

import tensorflow as tf

from tf_inspector import symbolic
from tf_inspector.tracing import trace_and_inspect
from tf_inspector.xla import _block, _concrete


@dataclasses.dataclass
class NodeTime:
    name: str
    op: str
    time_s: float
    flops: object  # int, or None where the cost model has no rule
    bytes: object

    @property
    def gflops_per_s(self):
        return None if not isinstance(self.flops, int) or not self.time_s else self.flops / self.time_s / 1e9

    @property
    def gbytes_per_s(self):
        return None if not isinstance(self.bytes, int) or not self.time_s else self.bytes / self.time_s / 1e9


@dataclasses.dataclass
class Profile:
    report: object        # the GraphReport of the profiled trace, costs at the call's sizes
    steps: int
    wall_s: float         # mean wall time of one call
    busy_s: float         # per call, the time at least one of its ops was running
    nodes: list           # [NodeTime], measured nodes only, slowest first
    graph_def: object = dataclasses.field(repr=False, default=None)  # the profiled FuncGraph

    @property
    def op_time_s(self):
        return sum(n.time_s for n in self.nodes)

    def by_op_type(self):
        """{op type: (time_s, flops)} summed over its nodes (flops over nodes with a rule)."""
        out = defaultdict(lambda: [0.0, 0])
        for n in self.nodes:
            out[n.op][0] += n.time_s
            out[n.op][1] += n.flops if isinstance(n.flops, int) else 0
        return {k: tuple(v) for k, v in sorted(out.items())}

    def to_dict(self):
        return {"function": self.report.function, "steps": self.steps, "wall_s": self.wall_s,
                "busy_s": self.busy_s, "op_time_s": self.op_time_s,
                "nodes": [{"name": n.name, "op": n.op, "time_s": n.time_s, "flops": n.flops,
                           "bytes": n.bytes, "gflops_per_s": n.gflops_per_s,
                           "gbytes_per_s": n.gbytes_per_s} for n in self.nodes]}

    def to_text(self, top=15):
        lines = ["profile %s: %d steps, %.3f ms per call; ops running %.3f ms of it (%.0f%%), "
                 "%.3f ms summed over ops" % (
                     self.report.function, self.steps, 1e3 * self.wall_s, 1e3 * self.busy_s,
                     100 * self.busy_s / self.wall_s if self.wall_s else 0, 1e3 * self.op_time_s)]
        rows = [("node", "op", "ms", "FLOPs", "bytes", "GFLOP/s", "GB/s")]
        for n in self.nodes[:top]:
            rows.append((n.name[:48], n.op, "%.3f" % (1e3 * n.time_s), _num(n.flops), _num(n.bytes),
                         _rate(n.gflops_per_s), _rate(n.gbytes_per_s)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
        return "\n".join(lines)

    def plot(self, path):
        """Estimated FLOPs against measured time, one point per op type (log-log), as an image."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        kinds = {k: v for k, v in self.by_op_type().items() if v[0] > 0 and v[1] > 0}
        fig, ax = plt.subplots(figsize=(7, 5))
        for op, (seconds, flops) in kinds.items():
            ax.scatter(flops, 1e3 * seconds)
            ax.annotate(op, (flops, 1e3 * seconds), fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("estimated FLOPs per call (cost.py)")
        ax.set_ylabel("measured ms per call (TF Profiler)")
        ax.set_title("%s: cost model vs measured time, by op type" % self.report.function[:40])
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path

    def to_model_explorer(self, folder):
        """Writes graph.pbtxt (the FuncGraph) and one Model Explorer node data file per measure
        (flops.json, bytes.json, time_us.json); open the graph in Model Explorer and add the
        files as node data for a heatmap. TensorBoard's graph view reads the same pbtxt."""
        from model_explorer import node_data_builder as ndb
        os.makedirs(folder, exist_ok=True)
        graph_path = os.path.join(folder, "graph.pbtxt")
        tf.io.write_graph(self.graph_def, folder, "graph.pbtxt", as_text=True)
        # Model Explorer's GraphDef adapter numbers the nodes in GraphDef order: "0", "1"...
        node_id = {node.name: str(i) for i, node in enumerate(self.graph_def.node)}
        times = {n.name: n.time_s for n in self.nodes}
        measures = {
            "flops": {n.name: n.flops for n in self.report.nodes if isinstance(n.flops, int)},
            "bytes": {n.name: n.bytes for n in self.report.nodes if isinstance(n.bytes, int)},
            "time_us": {name: 1e6 * t for name, t in times.items()},
        }
        paths = {"graph": graph_path}
        for measure, values in measures.items():
            data = ndb.GraphNodeData(
                name=measure,
                results={node_id[name]: ndb.NodeDataResult(value=v) for name, v in values.items()
                         if name in node_id},
                gradient=[ndb.GradientItem(stop=0, bgColor="#ffffff"),
                          ndb.GradientItem(stop=1, bgColor="#d7301f")])
            paths[measure] = os.path.join(folder, measure + ".json")
            data.save_to_file(paths[measure])
        return paths


def _num(value):
    return "?" if value is None else str(value)


def _rate(value):
    return "-" if value is None else "%.2f" % value


def _busy_ps(intervals):
    """The length of the union of [start, end) intervals: time some op was running."""
    busy, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            busy, reach = busy + end - start, end
        elif end > reach:
            busy, reach = busy + end - reach, end
    return busy


def _op_events(logdir, names):
    """({node name: total picoseconds}, busy picoseconds) over the executor events of every
    xplane in logdir whose node is in `names`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    totals, intervals = defaultdict(int), []
    for path in glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            for line in plane.lines:
                if line.name == "python":
                    continue  # Python and eager API frames: the whole call, not ops
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    node, sep, _ = name.partition(":")
                    if sep and node in names:
                        totals[node] += event.duration_ps
                        start = 1000 * line.timestamp_ns + event.offset_ps
                        intervals.append((start, start + event.duration_ps))
    return totals, _busy_ps(intervals)


def profile(fn, *inputs, steps=10, warmup=2, logdir=None):
    """Runs fn under the TF Profiler and joins the measured op times to its graph's nodes."""
    if steps < 1:
        raise ValueError("steps must be at least 1, got %d" % steps)
    inputs = tf.nest.map_structure(_concrete, inputs)
    function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    report = trace_and_inspect(function, *inputs)
    graph_def = function.get_concrete_function(*inputs).graph.as_graph_def()
    for _ in range(warmup):
        _block(function(*inputs))
    with tempfile.TemporaryDirectory() as scratch:
        logdir = logdir or scratch
        tf.profiler.experimental.start(logdir)
        try:
            start = time.perf_counter()
            for _ in range(steps):
                _block(function(*inputs))
            wall_s = (time.perf_counter() - start) / steps
        finally:
            tf.profiler.experimental.stop()
        totals, busy_ps = _op_events(logdir, {n.name for n in report.nodes})
    # Costs at this call's sizes, where the trace left dimensions unknown (formulas).
    sizes = symbolic.bind(report.inputs, inputs)
    for node in report.nodes:
        node.flops = symbolic.evaluate(node.flops, sizes)
        node.bytes = symbolic.evaluate(node.bytes, sizes)
    by_name = {n.name: n for n in report.nodes}
    nodes = [NodeTime(name, by_name[name].op, ps * 1e-12 / steps, by_name[name].flops,
                      by_name[name].bytes) for name, ps in totals.items()]
    nodes.sort(key=lambda n: -n.time_s)
    return Profile(report, steps, wall_s, busy_ps * 1e-12 / steps, nodes, graph_def)
