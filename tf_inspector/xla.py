"""What XLA makes of a function: compile time against run time, and its HLO before and after
optimisation (op counts, fusions).

    cost = tf_inspector.xla_cost(fn, tf.ones([8, 128]), runs=10)
    print(cost.to_text()); cost.to_dict()

fn is compiled as tf.function(jit_compile=True) on these inputs (TensorSpecs of known
shape become zeros). Times are wall-clock on this machine: trace_s to build the FuncGraph,
compile_s the first call less one run (XLA's compilation), run_s the median of `runs`
calls. HLO comes from experimental_get_compiler_ir: "hlo" as the bridge emitted it,
"optimized_hlo" after XLA's passes, where `fusion` instructions are the fused kernels.
"""

import dataclasses
import re
import statistics
import time
from collections import Counter

import tensorflow as tf

# "  %name = f32[4,4]{1,0} opcode(" or "  ROOT %t = (f32[], s32[]) tuple(".
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = (?:\(.*?\)|\S+) ([a-z][a-z0-9\-]*)\(")


def hlo_op_counts(hlo_text, entry_only=False):
    """{opcode: count} over every computation of an HLO module's text, or only its ENTRY
    computation (after optimisation: the kernels and copies it runs)."""
    lines = hlo_text.splitlines()
    if entry_only:
        start = next((i for i, line in enumerate(lines) if line.startswith("ENTRY")), len(lines))
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("}")), len(lines))
        lines = lines[start:end]
    return dict(sorted(Counter(m.group(1) for m in map(_INSTRUCTION.match, lines) if m).items()))


@dataclasses.dataclass
class XlaCost:
    function: str
    trace_s: float
    compile_s: float
    run_s: float
    hlo_ops: dict        # before optimisation
    optimized_ops: dict  # after, in every computation (fused computations' bodies included)
    entry_ops: dict      # after, in the ENTRY computation: what runs, fusions as one op each
    fusions: int         # fusion instructions: the kernels XLA emits
    hlo: str = dataclasses.field(repr=False, default="")
    optimized_hlo: str = dataclasses.field(repr=False, default="")

    def to_dict(self):
        out = dataclasses.asdict(self)
        del out["hlo"], out["optimized_hlo"]
        return out

    def to_text(self):
        return ("XLA %s: trace %.1f ms, compile %.1f ms, run %.3f ms (compile = %.0f runs); "
                "HLO %d ops before optimisation, %d run after it, %d of them fusions"
                % (self.function, 1e3 * self.trace_s, 1e3 * self.compile_s, 1e3 * self.run_s,
                   self.compile_s / self.run_s if self.run_s else float("inf"),
                   sum(self.hlo_ops.values()), sum(self.entry_ops.values()), self.fusions))


def _concrete(value):
    if isinstance(value, tf.TensorSpec):
        if not value.shape.is_fully_defined():
            raise ValueError("xla_cost runs the function: give every dimension of %s a size"
                             % value)
        return tf.zeros(value.shape, value.dtype)
    return value


def xla_cost(fn, *inputs, runs=10, **kwargs):
    """Compiles fn with XLA on inputs and measures it; see the module docstring."""
    if runs < 1:
        raise ValueError("runs must be at least 1, got %d" % runs)
    inputs = tf.nest.map_structure(_concrete, inputs)
    if kwargs:
        raise TypeError("xla_cost takes positional inputs only, got %s" % sorted(kwargs))
    function = tf.function(getattr(fn, "python_function", fn), jit_compile=True)
    start = time.perf_counter()
    concrete = function.get_concrete_function(*inputs)
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    _block(function(*inputs))
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        _block(function(*inputs))
        times.append(time.perf_counter() - start)
    run_s = statistics.median(times)
    ir = function.experimental_get_compiler_ir(*inputs)
    hlo, optimized = ir(stage="hlo"), ir(stage="optimized_hlo")
    optimized_ops = hlo_op_counts(optimized)
    name = concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name
    return XlaCost(name, trace_s, max(first - run_s, 0.0), run_s, hlo_op_counts(hlo),
                   optimized_ops, hlo_op_counts(optimized, entry_only=True),
                   optimized_ops.get("fusion", 0), hlo, optimized)


def _block(outputs):
    """Waits for the results (numpy() copies them out), so times cover the work."""
    for t in tf.nest.flatten(outputs):
        if isinstance(t, tf.Tensor):
            t.numpy()
