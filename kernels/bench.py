"""Benchmarks warp_softmax against torch.softmax, a torch.compile'd softmax and a copy.

    bazel run //kernels:bench                          # CPU, float32, the default sizes
    bazel run //kernels:bench -- --device cuda --dtype bfloat16 --plot gpu.png

For each rows x cols: forward and backward latency of each implementation
(median of interleaved rounds: the machine's speed drifts, and interleaving
exposes all of them to the same drift), effective bandwidth (forward moves
2 * numel * itemsize bytes, backward 3 *), the speedup of warp_softmax over
each peer, and warp_softmax's time over a plain copy of the same data (the
memory floor). Writes a PNG plot. On the CPU, large allocations are kept off
fresh mmap pages (MALLOC_MMAP_THRESHOLD_) for every implementation alike, so
page faults don't drown the kernels' differences.
"""

import argparse
import os
import statistics
import sys
import time

SIZES = [(4096, 1024), (1024, 4096), (256, 32768), (64, 131072)]
_MALLOC_ENV = "MALLOC_MMAP_THRESHOLD_"


def _timer(device):
    import torch
    if device == "cuda":
        def run(fn, reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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


def measure(rows, cols, dtype, device, rounds, round_seconds):
    """{implementation: seconds} for the forward and backward of one size."""
    import torch
    import kernels

    x = torch.randn(rows, cols, device=device).to(dtype)
    g = torch.randn(rows, cols, device=device).to(dtype)
    y = torch.softmax(x, -1)
    compiled_fwd = torch.compile(lambda t: torch.softmax(t, -1))
    compiled_bwd = torch.compile(lambda gy, yy: yy * (gy - (gy * yy).sum(-1, keepdim=True)))
    impls = {
        ("forward", "warp_softmax"): lambda: kernels.warp_softmax(x, -1),
        ("forward", "torch.softmax"): lambda: torch.softmax(x, -1),
        ("forward", "torch.compile"): lambda: compiled_fwd(x),
        ("forward", "copy"): lambda: x.clone(),
        ("backward", "warp_softmax"): lambda: torch.ops.kernels.warp_softmax_backward(g, y, -1),
        ("backward", "torch.softmax"): lambda: torch._softmax_backward_data(g, y, -1, dtype),
        ("backward", "torch.compile"): lambda: compiled_bwd(g, y),
        ("backward", "copy"): lambda: x.clone(),
    }
    run = _timer(device)
    reps = {}
    for key, fn in impls.items():  # warm up (compiles), then size rounds to ~round_seconds
        for _ in range(3):
            fn()
        one = max(run(fn, 3), 1e-7)
        reps[key] = max(3, int(round_seconds / one))
    times = {key: [] for key in impls}
    for _ in range(rounds):
        for key, fn in impls.items():
            times[key].append(run(fn, reps[key]))
    return {key: statistics.median(t) for key, t in times.items()}


def report(results, dtype_size):
    lines = ["%-14s %-9s %-14s %10s %9s %12s" % ("size", "pass", "impl", "time us", "GB/s",
                                                "warp faster")]
    for (rows, cols), r in results.items():
        for direction, moved in (("forward", 2), ("backward", 3)):
            ours = r[(direction, "warp_softmax")]
            for impl in ("warp_softmax", "torch.softmax", "torch.compile", "copy"):
                t = r[(direction, impl)]
                gbs = (2 if impl == "copy" else moved) * rows * cols * dtype_size / t / 1e9
                ratio = "%.2fx" % (t / ours) if impl != "warp_softmax" else ""
                lines.append("%-14s %-9s %-14s %10.1f %9.1f %12s"
                             % ("%dx%d" % (rows, cols), direction, impl, t * 1e6, gbs, ratio))
            lines.append("%-14s %-9s %-14s %10s %9s %12s" % (
                "", "", "warp/copy", "", "", "%.2fx time" % (ours / r[(direction, "copy")])))
    return "\n".join(lines)


def plot(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["%dx%d" % size for size in results]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, direction in zip(axes, ("forward", "backward")):
        width = 0.2
        for k, impl in enumerate(("warp_softmax", "torch.softmax", "torch.compile", "copy")):
            values = [r[(direction, impl)] * 1e3 for r in results.values()]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--sizes", nargs="+", default=None,
                        help="rows x cols, like 4096x1024 (default: %s)"
                             % " ".join("%dx%d" % s for s in SIZES))
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per size")
    parser.add_argument("--round-seconds", type=float, default=0.1,
                        help="approximate time of one implementation's round")
    parser.add_argument("--plot", default="warp_softmax_bench.png",
                        help="PNG to write (relative to where bazel run was called)")
    args = parser.parse_args(argv)
    try:
        sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES
        assert all(len(s) == 2 and min(s) > 0 for s in sizes)
    except (ValueError, AssertionError):
        parser.error("--sizes takes ROWSxCOLS, like 4096x1024")
    if args.device == "cpu" and _MALLOC_ENV not in os.environ:
        # glibc reads it at start-up: run again with it set.
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, **{_MALLOC_ENV: str(1 << 30)}))

    import torch
    from tqdm import tqdm

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available to this torch")
    dtype = getattr(torch, args.dtype)
    where = (torch.cuda.get_device_name() if args.device == "cuda"
             else "CPU, %d threads" % torch.get_num_threads())
    title = "warp_softmax vs torch %s, %s, %s" % (torch.__version__, args.dtype, where)
    print(title + "; median of %d interleaved rounds" % args.rounds)
    results = {}
    for rows, cols in tqdm(sizes, desc="sizes", unit="size", file=sys.stderr):
        results[(rows, cols)] = measure(rows, cols, dtype, args.device, args.rounds, args.round_seconds)
    print(report(results, torch.empty((), dtype=dtype).element_size()))
    path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.plot)
    plot(results, path, title)
    print("plot: %s" % path)


if __name__ == "__main__":
    main()
