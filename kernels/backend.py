"""The torch.compile backend "warp": kernels.fx.use_warp_softmax, then inductor.

    import kernels.backend                        # registers "warp" with TorchDynamo
    model = torch.compile(model, backend="warp", dynamic=True)
    model = torch.compile(model, backend="warp",
                          options={"inner": "aot_eager", "decompose_sdpa": True})
    print(kernels.backend.stats)                  # graphs, recompiles, graph breaks, replacements

Options: "inner" (the backend the rewritten graph goes to: "inductor", the
default, any registered backend's name or a backend callable), "decompose_sdpa"
(rewrite scaled_dot_product_attention with warp_softmax, kernels.fx), and for
inductor any of its config options. The pass runs on the graph Dynamo captured,
so it cannot add graph breaks; the ones Dynamo made are counted from its own
counters. The rest of the model is compiled by the inner backend as usual, and
autograd goes through the kernels operators' registered backward.
"""

import dataclasses

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._guards import CompileContext

from kernels import fx


@dataclasses.dataclass
class Stats:
    """What the "warp" backend saw since the last reset()."""
    # compile id -> (attempt, the kernels.fx reports of its graphs). When Dynamo
    # restarts a compile (say, to specialize a size it found it must), only the
    # last attempt's graphs are kept: the earlier ones never run.
    compiles: dict = dataclasses.field(default_factory=dict)

    def add(self, trace_id, report):
        compile_id, attempt = trace_id if trace_id else (None, 0)
        last, reports = self.compiles.get(compile_id, (attempt, []))
        self.compiles[compile_id] = (attempt, (reports if last == attempt else []) + [report])

    @property
    def graphs(self):
        """Graphs compiled: one per frame, plus one per graph break."""
        return sum(len(reports) for _, reports in self.compiles.values())

    @property
    def recompiles(self):
        """Compiles by "warp" of a frame it compiled before (its guards failed)."""
        frames = [c.frame_id for c in self.compiles if c is not None]
        return len(frames) - len(set(frames))

    @property
    def replaced(self):
        return sum(len(r.replaced) for _, reports in self.compiles.values() for r in reports)

    @property
    def left(self):
        return [c for _, reports in self.compiles.values() for r in reports for c in r.left]

    @property
    def graph_breaks(self):
        """Graph breaks Dynamo reported (for any backend) since reset()."""
        return sum(counters["graph_break"].values())

    def __str__(self):
        lines = ["warp backend: %d graphs, %d recompiles, %d graph breaks, %d softmax replaced, %d left"
                 % (self.graphs, self.recompiles, self.graph_breaks, self.replaced, len(self.left))]
        lines += ["  left %s (%s): %s" % (c.node, c.pattern, c.detail) for c in self.left]
        lines += ["  graph break: %s" % reason for reason in counters["graph_break"]]
        return "\n".join(lines)


stats = Stats()


def reset():
    """Zeroes `stats` and Dynamo's graph-break counter (torch._dynamo.reset() does not)."""
    stats.__init__()
    counters["graph_break"].clear()


def _inner(name, mode, options):
    if callable(name):
        return name
    if name == "inductor":
        from torch._inductor.compile_fx import compile_fx
        patches = dict(torch._inductor.list_mode_options(mode) if mode else {}, **options)
        return lambda gm, example_inputs: compile_fx(gm, example_inputs, config_patches=patches)
    if options:
        raise ValueError("warp backend: options %s are inductor's; inner=%r takes none"
                         % (sorted(options), name))
    return torch._dynamo.lookup_backend(name)


@torch._dynamo.register_backend(name="warp")
def warp(gm, example_inputs, mode=None, options=None):
    """The backend: the pass on Dynamo's graph, then the inner backend (options above)."""
    options = dict(options or {})
    inner = _inner(options.pop("inner", "inductor"), mode,
                   {k: v for k, v in options.items() if k != "decompose_sdpa"})
    report = fx.use_warp_softmax(gm, decompose_sdpa=options.get("decompose_sdpa", False))
    stats.add(CompileContext.current_trace_id(), report)
    return inner(gm, example_inputs)
