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
    graphs: int = 0        # graphs compiled: one per frame, plus one per graph break
    recompiles: int = 0    # compiles of a frame compiled before (its guards failed)
    replaced: int = 0      # softmax nodes replaced, over all graphs
    left: list = dataclasses.field(default_factory=list)     # kernels.fx.Change, over all graphs

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
    compile_id = CompileContext.current_compile_id()
    stats.graphs += 1
    stats.recompiles += bool(compile_id and compile_id.frame_compile_id)
    stats.replaced += len(report.replaced)
    stats.left += report.left
    return inner(gm, example_inputs)
