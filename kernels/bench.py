"""Benchmarks warp_softmax against torch.softmax, a torch.compile'd softmax and a copy.

    ./bazelw run //kernels:bench                          # CPU: every level, 1 and 2 threads, fp32 and bf16
    ./bazelw run //kernels:bench -- --isa avx2 --threads 2 --dtypes float32
    ./bazelw run //kernels:bench -- --device cuda --dtypes bfloat16 --plot gpu.png
    ./bazelw run //kernels:bench -- --device cuda --cuda-graph   # the kernels alone, no host time

For each rows x cols: forward, backward, masked and training latency of each
implementation ("masked": attention's softmax(x * 0.125 + mask) with a mask row
shared by all rows, warp_softmax_masked against torch's ops and their
torch.compile; "training": eager autograd as a training step runs it, the
forward recording its node on an input that requires grad, then
torch.autograd.grad through it) (median of interleaved rounds, shuffled anew each
round: the machine's speed drifts, and interleaving exposes all of them to the same drift),
effective bandwidth (forward and masked move 2 * numel * itemsize bytes,
backward 3 *, training 5 *), the speedup of warp_softmax over
each peer, and warp_softmax's time over a plain copy of the same data (the
memory floor). The summary's figures are medians of the rounds' ratios, a
speedup marked ~ where its 95% bootstrap interval holds 1 (kernels/paired.py):
there this run cannot tell warp_softmax and the peer apart. On the CPU each
instruction-set level (--isa) runs in its own process with torch held to the
same level (ATEN_CPU_CAPABILITY), so every level is compared with torch's code
for that level. Writes a PNG plot and the
figures as JSON beside it. Outputs are allocated from the heap and never
returned to the system (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_) for every
implementation alike, so page faults of fresh pages don't drown the kernels'
differences; --system-malloc keeps glibc's defaults instead, as a user's
process has them: there each result of 32 MiB or more is mapped afresh, and the
time to fault in its pages counts (warp_softmax asks for huge pages for such
results: kernels/softmax.h's prepare_result).
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

from kernels.paired import paired_ratio

SIZES = [(4096, 1024), (1024, 4096), (256, 32768), (64, 131072)]
IMPLS = ("warp_softmax", "torch.softmax", "torch.compile", "copy")
# Each pass, with the bytes it moves in units of numel * itemsize.
PASSES = {"forward": 2, "backward": 3, "masked": 2, "training": 5}
# glibc reads these at start-up. MALLOC_MMAP_THRESHOLD_ cannot do it: glibc
# ignores values over 32 MiB, and a 256x32768 float32 tensor is 32 MiB.
_MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
# warp_softmax's CPU levels and torch's ATEN_CPU_CAPABILITY for the same instructions.
ATEN_CAPABILITY = {"avx512_bf16": "avx512", "avx512": "avx512", "avx2": "avx2", "baseline": "default"}


def _timer(device, cuda_graph=False):
    import torch
    if device == "cuda":
        def run(fn, reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if cuda_graph:  # one call captured, replayed back to back: the device's time alone
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn()
                fn = graph.replay
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
    else:
        def run(fn, reps):
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t) / reps
    return run


def measure(rows, cols, dtype, device, rounds, round_seconds, cuda_graph=False):
    """{(pass, implementation): [seconds a call, one per round]} for one size."""
    import torch
    import kernels

    x = torch.randn(rows, cols, device=device).to(dtype)
    g = torch.randn(rows, cols, device=device).to(dtype)
    y = torch.softmax(x, -1)
    xg = x.detach().requires_grad_()
    mask = torch.zeros(cols, device=device).to(dtype)
    mask[cols // 2:] = float("-inf")  # a padded sequence
    # Each size compiles anew: these lambdas share their code objects across calls, and
    # past Dynamo's recompile limit (8) they would silently run eagerly.
    torch._dynamo.reset()
    compiled_fwd = torch.compile(lambda t: torch.softmax(t, -1))
    compiled_masked = torch.compile(lambda t, m: torch.softmax(t * 0.125 + m, -1))
    compiled_bwd = torch.compile(lambda gy, yy: yy * (gy - (gy * yy).sum(-1, keepdim=True)))
    impls = {
        ("forward", "warp_softmax"): lambda: kernels.warp_softmax(x, -1),
        ("forward", "torch.softmax"): lambda: torch.softmax(x, -1),
        ("forward", "torch.compile"): lambda: compiled_fwd(x),
        ("forward", "copy"): lambda: x.clone(),
        ("backward", "warp_softmax"): lambda: kernels.warp_softmax_backward(g, y, -1),
        ("backward", "torch.softmax"): lambda: torch._softmax_backward_data(g, y, -1, dtype),
        ("backward", "torch.compile"): lambda: compiled_bwd(g, y),
        ("backward", "copy"): lambda: x.clone(),
        ("masked", "warp_softmax"): lambda: kernels.warp_softmax_masked(x, mask, 0.125),
        ("masked", "torch.softmax"): lambda: torch.softmax(x * 0.125 + mask, -1),
        ("masked", "torch.compile"): lambda: compiled_masked(x, mask),
        ("masked", "copy"): lambda: x.clone(),
        ("training", "warp_softmax"): lambda: torch.autograd.grad(kernels.warp_softmax(xg, -1), xg, g),
        ("training", "torch.softmax"): lambda: torch.autograd.grad(torch.softmax(xg, -1), xg, g),
        ("training", "torch.compile"): lambda: torch.autograd.grad(compiled_fwd(xg), xg, g),
        ("training", "copy"): lambda: x.clone(),
    }
    if device == "cpu" and torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        # Inductor's C++ for ATEN_CPU_CAPABILITY=default does not compile (torch 2.13: it
        # emits at::vec code without its header), so the baseline level has no compile peer.
        for direction in PASSES:
            del impls[(direction, "torch.compile")]
    run = _timer(device, cuda_graph)
    reps = {}
    for key, fn in list(impls.items()):  # warm up (compiles), then size rounds to ~round_seconds
        for _ in range(3):
            fn()
        try:
            one = max(run(fn, 3), 1e-7)
        except RuntimeError as e:
            # A capture's refusal leaves one implementation out; anything else
            # (out of memory, a kernel's fault) is the benchmark's failure.
            if not cuda_graph or isinstance(e, torch.OutOfMemoryError) or "capture" not in str(e).lower():
                raise
            print("bench: %s %s left out at %dx%d: %s" % (key[0], key[1], rows, cols, e), file=sys.stderr)
            del impls[key]
            continue
        reps[key] = max(3, int(round_seconds / one))
    times = {key: [] for key in impls}
    order = list(impls)
    for round_ in range(rounds):
        # A new order each round: a call right after a copy ran 2-4% slower than after
        # another softmax here (Intel Xeon, backward at 4096x1024), so a fixed order
        # favoured whichever implementation never followed the copy.
        random.Random(round_).shuffle(order)
        for key in order:
            times[key].append(run(impls[key], reps[key]))
    return times


def report(results, dtype_size):
    """A table of one configuration's {(rows, cols): {(pass, impl): seconds}}."""
    lines = ["%-14s %-9s %-14s %10s %9s %12s" % ("size", "pass", "impl", "time us", "GB/s",
                                                "warp faster")]
    for (rows, cols), r in results.items():
        for direction, moved in PASSES.items():
            if (direction, "warp_softmax") not in r or (direction, "copy") not in r:
                continue
            ours = r[(direction, "warp_softmax")]
            for impl in IMPLS:
                if (direction, impl) not in r:
                    continue
                t = r[(direction, impl)]
                gbs = (2 if impl == "copy" else moved) * rows * cols * dtype_size / t / 1e9
                ratio = "%.2fx" % (t / ours) if impl != "warp_softmax" else ""
                lines.append("%-14s %-9s %-14s %10.1f %9.1f %12s"
                             % ("%dx%d" % (rows, cols), direction, impl, t * 1e6, gbs, ratio))
            lines.append("%-14s %-9s %-14s %10s %9s %12s" % (
                "", "", "warp/copy", "", "", "%.2fx time" % (ours / r[(direction, "copy")])))
    return "\n".join(lines)


def summary(records):
    """One line per configuration and size: warp_softmax's speedups, the goals' figures, each
    the median of the rounds' ratios; a speedup marked ~ has a 95% interval holding 1."""
    by = {}
    for rec in records:
        by.setdefault((rec["isa"], rec["threads"], rec["dtype"], rec["rows"], rec["cols"]), {})[
            (rec["pass"], rec["impl"])] = rec["rounds"]

    def speedup(r, direction, peer):
        if (direction, peer) not in r or (direction, "warp_softmax") not in r:
            return "n/a"
        median, low, high = paired_ratio(r[(direction, peer)], r[(direction, "warp_softmax")])
        return "%.2fx%s" % (median, "~" if low <= 1 <= high else "")

    def over_copy(r, direction):
        if (direction, "warp_softmax") not in r or (direction, "copy") not in r:
            return "n/a"
        return "%.2fx" % paired_ratio(r[(direction, "warp_softmax")], r[(direction, "copy")])[0]

    lines = ["%-9s %-3s %-9s %-11s %10s %10s %10s %10s %10s %10s %10s %10s" % (
        "isa", "thr", "dtype", "size", "fwd/torch", "fwd/compl", "fwd:copy", "bwd/torch", "bwd:copy",
        "msk/torch", "msk/compl", "trn/torch")]
    for (isa, threads, dtype, rows, cols), r in sorted(by.items()):
        lines.append("%-9s %-3d %-9s %-11s %10s %10s %10s %10s %10s %10s %10s %10s" % (
            isa, threads, dtype, "%dx%d" % (rows, cols), speedup(r, "forward", "torch.softmax"),
            speedup(r, "forward", "torch.compile"), over_copy(r, "forward"),
            speedup(r, "backward", "torch.softmax"), over_copy(r, "backward"),
            speedup(r, "masked", "torch.softmax"), speedup(r, "masked", "torch.compile"),
            speedup(r, "training", "torch.softmax")))
    return ("speedup of warp_softmax (x = times faster; 'copy' columns: warp's time over a copy's;\n"
            "each the median of the rounds' ratios; ~: its 95% interval holds 1, equal within this "
            "run's noise)\n" + "\n".join(lines))


def plot(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["%dx%d" % size for size in results]
    fig, axes = plt.subplots(1, len(PASSES), figsize=(22, 4.5), sharey=True)
    for ax, direction in zip(axes, PASSES):
        width = 0.2
        for k, impl in enumerate(IMPLS):
            values = [r.get((direction, impl), float("nan")) * 1e3 for r in results.values()]
            ax.bar([i + (k - 1.5) * width for i in range(len(labels))], values, width, label=impl)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(direction)
        ax.set_xlabel("rows x cols")
        ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("milliseconds (log scale, lower is better)")
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def thp_mode():
    """The kernel's transparent huge page mode ("always", "madvise", "never"), or None."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return None


def run_configs(args, sizes):
    """Measures every thread count, dtype and size in this process: a list of records."""
    import torch
    from tqdm import tqdm

    import kernels

    isa = kernels.cpu_isa() if args.device == "cpu" else "cuda"
    records = []
    configs = [(t, d) for t in args.threads for d in args.dtypes]
    for threads, dtype_name in configs:
        torch.set_num_threads(threads)
        dtype = getattr(torch, dtype_name)
        for rows, cols in tqdm(sizes, desc="%s, %d thread(s), %s" % (isa, threads, dtype_name),
                               unit="size", file=sys.stderr):
            for (direction, impl), rounds in measure(rows, cols, dtype, args.device, args.rounds,
                                                    args.round_seconds, args.cuda_graph).items():
                records.append(dict(isa=isa, aten=torch.backends.cpu.get_cpu_capability(),
                                    threads=threads, dtype=dtype_name, rows=rows, cols=cols,
                                    impl=impl, seconds=statistics.median(rounds), rounds=rounds,
                                    **{"pass": direction}))
    return records


def run_levels(args, argv):
    """Each --isa level in a child process with torch held to the same level: all records."""
    import kernels

    levels = kernels.cpu_isas_supported() if args.isa == ["all"] else args.isa
    records = []
    for level in levels:
        env = dict(os.environ, WARP_SOFTMAX_ISA=level, ATEN_CPU_CAPABILITY=ATEN_CAPABILITY[level])
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + argv,
                               env=env, stdout=subprocess.PIPE, check=False)
        if child.returncode:
            raise SystemExit("bench: the %s run failed (exit %d)" % (level, child.returncode))
        records += json.loads(child.stdout)
    return records


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "float64", "float16", "bfloat16"],
                        default=["float32", "bfloat16"])
    parser.add_argument("--isa", nargs="+", choices=["all"] + list(ATEN_CAPABILITY), default=["all"],
                        help="CPU levels to measure, each against torch at the same level "
                             "(default: all this CPU supports)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2],
                        help="CPU thread counts (torch.set_num_threads)")
    parser.add_argument("--sizes", nargs="+", default=None,
                        help="rows x cols, like 4096x1024 (default: %s)"
                             % " ".join("%dx%d" % s for s in SIZES))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size")
    parser.add_argument("--round-seconds", type=float, default=0.05,
                        help="approximate time of one implementation's round")
    parser.add_argument("--plot", default="warp_softmax_bench.png",
                        help="PNG to write (relative to where bazel run was called); the JSON "
                             "goes beside it")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="with --device cuda: time replays of a CUDA graph of one call, the "
                             "kernels' time without the host's (Python, dispatch, launch)")
    parser.add_argument("--system-malloc", action="store_true",
                        help="keep glibc's default allocation, as a user's process has it: each "
                             "result of 32 MiB or more is mapped afresh, its page faults timed "
                             "(default: results reused from the heap, the kernels' time alone). "
                             "warp_softmax's results of that size ask for huge pages; "
                             "torch's do with THP_MEM_ALLOC_ENABLE=1")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args([a for a in argv])
    try:
        sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES
        assert all(len(s) == 2 and min(s) > 0 for s in sizes)
    except (ValueError, AssertionError):
        parser.error("--sizes takes ROWSxCOLS, like 4096x1024")
    if any(t < 1 for t in args.threads):
        parser.error("--threads takes positive counts")
    if args.device == "cuda":
        args.threads = args.threads[:1]  # the host's thread count does not run CUDA kernels
        if args.system_malloc:
            parser.error("--system-malloc is for --device cpu (CUDA results come from torch's cache)")
    elif args.cuda_graph:
        parser.error("--cuda-graph needs --device cuda")
    if args.device == "cpu":
        # glibc reads them at start-up: run again with them set (--system-malloc: unset).
        env = {k: v for k, v in os.environ.items() if k not in _MALLOC_ENV}
        if not args.system_malloc:
            env.update(_MALLOC_ENV)
        if any(os.environ.get(k) != env.get(k) for k in _MALLOC_ENV):
            os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + argv, env)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this torch")
    if args.child:
        json.dump(run_configs(args, sizes), sys.stdout)
        return
    where = torch.cuda.get_device_name() if args.device == "cuda" else cpu_model()
    # What this process (and so each level's) runs with, read back, not assumed.
    set_here = " ".join("%s=%s" % (k, os.environ[k]) for k in sorted(_MALLOC_ENV) if k in os.environ)
    malloc = None if args.device == "cuda" else "heap only: " + set_here if set_here else "glibc's default"
    title = "warp_softmax vs torch %s on %s%s%s" % (
        torch.__version__, where, ", CUDA graph replays" if args.cuda_graph else "",
        ", glibc's default malloc" if args.system_malloc else "")
    print(title + "; median of %d interleaved rounds" % args.rounds)
    records = run_levels(args, [a for a in argv]) if args.device == "cpu" else run_configs(args, sizes)
    configs = {}
    for rec in records:
        configs.setdefault((rec["isa"], rec["aten"], rec["threads"], rec["dtype"]), {}).setdefault(
            (rec["rows"], rec["cols"]), {})[(rec["pass"], rec["impl"])] = rec["seconds"]
    for (isa, aten, threads, dtype), results in configs.items():
        print("\n== warp_softmax %s vs torch %s, %d thread(s), %s" % (isa, aten, threads, dtype))
        print(report(results, torch.empty((), dtype=getattr(torch, dtype)).element_size()))
    print("\n" + summary(records))
    path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.plot)
    first = next(iter(configs))
    plot(configs[first], path, "%s (%s, %d thread(s), %s)" % ((title,) + first[:1] + first[2:]))
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(dict(cpu=where, torch=torch.__version__, malloc=malloc, thp=thp_mode(),
                       records=records), f, indent=1)
    print("plot: %s (%s, %d thread(s), %s); figures: %s" % (
        path, first[0], first[2], first[3], os.path.splitext(path)[0] + ".json"))


if __name__ == "__main__":
    main()
