"""BERT inference (MiniLM-L6, transformers' BertModel): eager vs inductor vs the "warp" backend.

    ./bazelw run //kernels:bench_model                            # batch 8 x seq 128: a few minutes
    ./bazelw run //kernels:bench_model -- --full                  # batch 8-64 x seq 128-512
    ./bazelw run //kernels:bench_model -- --batches 8 16 --seqs 128 256 --dtypes bfloat16 --threads 1
    ./bazelw run //kernels:bench_model -- --backend-inner aot_eager   # warp hands its graph to aot_eager
    ./bazelw run //kernels:bench_model -- --dtypes float32 --attention eager --rounds 300 --round-seconds 0
                                            # one call of each a round: the tightest interval

For each attention implementation (transformers' "eager", whose softmax the pass
replaces, and "sdpa", its default, which has no softmax node: "warp" leaves it
and "warp+sdpa" rewrites it as matmul, warp_softmax, matmul) and dtype, each
variant is compiled once with dynamic=True and timed over every batch x seq on
padded batches (median of interleaved rounds, so machine drift hits all alike).
Printed per size: milliseconds, inductor / warp (> 1: warp faster: the median of
the rounds' ratios and its 95% bootstrap interval), and the
share of eager's time spent in softmax, overall and per encoder layer (the
profiler's softmax events against each layer's wall time). Writes a PNG and
the figures as JSON beside it.
"""

import argparse
import json
import os
import statistics
import time

from kernels.bench import cpu_model
from kernels.paired import paired_ratio

DEFAULT = ([8], [128])
FULL = ([8, 16, 32, 64], [128, 256, 512])


def variants(model, attention, inner):
    """{name: callable}: eager, inductor, warp (and warp+sdpa for SDPA attention)."""
    import torch
    import kernels.backend  # noqa: F401  registers "warp"
    out = {"eager": model,
           "inductor": torch.compile(model, backend="inductor", dynamic=True),
           "warp": torch.compile(model, backend="warp", dynamic=True, options={"inner": inner})}
    if attention == "sdpa":
        out["warp+sdpa"] = torch.compile(model, backend="warp", dynamic=True,
                                         options={"inner": inner, "decompose_sdpa": True})
    return out


def measure(runs, inputs, rounds, round_seconds):
    """{name: [seconds per call in each round]}, the variants interleaved in each round,
    every other round in reverse order (so no variant always follows the same one)."""
    times = {name: [] for name in runs}
    for k in range(rounds):
        for name, run in list(runs.items())[::1 if k % 2 == 0 else -1]:
            reps, start = 0, time.perf_counter()
            while reps == 0 or time.perf_counter() - start < round_seconds:
                run(**inputs)
                reps += 1
            times[name].append((time.perf_counter() - start) / reps)
    return times


def softmax_share(model, inputs, reps=3):
    """(overall, [per layer]) shares of eager time in softmax (eager attention), from
    one profile in which each encoder layer and the whole forward are ranges."""
    import torch
    from torch.profiler import profile, record_function
    ranges = {}
    hooks = [hook for i, layer in enumerate(model.encoder.layer) for hook in (
        layer.register_forward_pre_hook(
            lambda m, a, i=i: ranges.__setitem__(i, record_function("layer%d" % i).__enter__())),
        layer.register_forward_hook(lambda m, a, o, i=i: ranges[i].__exit__(None, None, None)))]
    with profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            with record_function("forward"):
                model(**inputs)
    for hook in hooks:
        hook.remove()
    events = prof.events()
    time_of = lambda name: sum(e.cpu_time_total for e in events if e.name == name)  # noqa: E731
    soft = [e for e in events if e.name == "aten::_softmax"]
    if not soft:
        return None
    layers = len(model.encoder.layer)  # one softmax per layer, in order
    per_layer = [sum(e.cpu_time_total for e in soft[i::layers]) / time_of("layer%d" % i)
                 for i in range(layers)]
    return sum(e.cpu_time_total for e in soft) / time_of("forward"), per_layer


def run_config(attention, dtype_name, sizes, args):
    import torch
    import kernels.backend
    from kernels import minilm
    torch._dynamo.reset()
    kernels.backend.reset()
    model = minilm.load(attention, getattr(torch, dtype_name))
    runs = variants(model, attention, args.backend_inner)
    records, graphs_first = [], None
    from tqdm import tqdm
    with torch.no_grad():
        for batch, seq in tqdm(sizes, desc="%s attention, %s" % (attention, dtype_name)):
            ids, mask = minilm.padded_batch(batch, seq)
            inputs = dict(input_ids=ids, attention_mask=mask)
            for run in runs.values():  # compile (the first size) and warm up
                run(**inputs)
            graphs_first = kernels.backend.stats.graphs if graphs_first is None else graphs_first
            per_round = measure(runs, inputs, args.rounds, args.round_seconds)
            share = softmax_share(model, inputs) if attention == "eager" else None
            records += [dict(attention=attention, dtype=dtype_name, batch=batch, seq=seq, impl=name,
                             seconds=statistics.median(s), rounds=s, softmax_share=share and share[0],
                             softmax_share_per_layer=share and share[1]) for name, s in per_round.items()]
    stats = kernels.backend.stats
    # One graph per warp variant, compiled at the first size: more at the end means recompiles.
    compile_note = dict(graphs_first_size=graphs_first, graphs_all_sizes=stats.graphs,
                        graph_breaks=stats.graph_breaks, replaced=stats.replaced, left=len(stats.left))
    return records, compile_note


def ratio_text(row, other):
    """Inductor's time over `other`'s: the median of the rounds' ratios (each round runs
    both within seconds, so drift between rounds cancels) and its 95% bootstrap
    interval: where the interval holds 1, the two are equal within this run's noise."""
    if other not in row:
        return "-"
    return "%.3f [%.3f, %.3f]" % paired_ratio(row["inductor"]["rounds"], row[other]["rounds"])


def table(records):
    rows = {}
    for r in records:
        rows.setdefault((r["attention"], r["dtype"], r["batch"], r["seq"]), {})[r["impl"]] = r
    lines = ["%-6s %-9s %5s %4s %9s %9s %9s %10s %-21s %-21s  %s" % (
        "attn", "dtype", "batch", "seq", "eager ms", "induc ms", "warp ms", "warp+sdpa",
        "ind/warp [95%]", "ind/w+s [95%]", "softmax share (per layer)")]
    for (attention, dtype, batch, seq), r in rows.items():
        ms = {k: v["seconds"] * 1e3 for k, v in r.items()}
        share = r["eager"]["softmax_share"]
        layers = r["eager"]["softmax_share_per_layer"]
        lines.append("%-6s %-9s %5d %4d %9.1f %9.1f %9.1f %10s %-21s %-21s  %s" % (
            attention, dtype, batch, seq, ms["eager"], ms["inductor"], ms["warp"],
            "%.1f" % ms["warp+sdpa"] if "warp+sdpa" in ms else "-", ratio_text(r, "warp"), ratio_text(r, "warp+sdpa"),
            "%.1f%% (%s)" % (100 * share, " ".join("%.1f" % (100 * s) for s in layers)) if share else "-"))
    return "\n".join(lines)


def plot(records, path, title):
    """Per config (attention, dtype): milliseconds per forward above, and below
    inductor's time over warp's (the median of the rounds' ratios with its 95%
    interval: a bar that crosses 1 is equal within the run's noise)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    configs = sorted({(r["attention"], r["dtype"]) for r in records})
    fig, axes = plt.subplots(2, len(configs), figsize=(5.5 * len(configs), 8), squeeze=False,
                             sharex="col", gridspec_kw=dict(height_ratios=[3, 2]))
    for ax, rax, (attention, dtype) in zip(axes[0], axes[1], configs):
        mine = [r for r in records if (r["attention"], r["dtype"]) == (attention, dtype)]
        sizes = sorted({(r["batch"], r["seq"]) for r in mine})
        at = {(r["batch"], r["seq"], r["impl"]): r for r in mine}
        impls = list(dict.fromkeys(r["impl"] for r in mine))
        width = 0.8 / len(impls)
        for k, impl in enumerate(impls):
            ax.bar([i + (k - (len(impls) - 1) / 2) * width for i in range(len(sizes))],
                   [at[s + (impl,)]["seconds"] * 1e3 for s in sizes], width, label=impl)
        ax.set_title("%s attention, %s" % (attention, dtype))
        ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
        others = [o for o in ("warp", "warp+sdpa") if o in impls]
        for k, other in enumerate(others):
            ratios = [paired_ratio(at[s + ("inductor",)]["rounds"], at[s + (other,)]["rounds"]) for s in sizes]
            rax.errorbar([i + (k - (len(others) - 1) / 2) * 0.2 for i in range(len(sizes))],
                         [m for m, _, _ in ratios], yerr=[[m - lo for m, lo, _ in ratios], [hi - m for m, _, hi in ratios]],
                         fmt="o", capsize=3, label="inductor / " + other)
        rax.axhline(1.0, color="gray", linewidth=1)
        rax.grid(True, axis="y", alpha=0.3)
        rax.legend()
        rax.set_xticks(range(len(sizes)), ["%dx%d" % s for s in sizes], rotation=45)
        rax.set_xlabel("batch x seq")
    axes[0][0].set_ylabel("milliseconds per forward (log, lower is better)")
    axes[1][0].set_ylabel("inductor's time over warp's\n(> 1: warp faster; 95% interval)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", nargs="+", type=int, default=DEFAULT[0])
    parser.add_argument("--seqs", nargs="+", type=int, default=DEFAULT[1])
    parser.add_argument("--full", action="store_true", help="the issue's sizes: batch 8-64 x seq 128-512")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    parser.add_argument("--attention", nargs="+", choices=["eager", "sdpa"], default=["eager", "sdpa"])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size")
    parser.add_argument("--round-seconds", type=float, default=0.3,
                        help="seconds per variant per round (0: one call each, the finest interleaving)")
    parser.add_argument("--backend-inner", default="inductor",
                        help="the backend the warp variants hand their graph to (e.g. aot_eager)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--plot", default="bert_bench.png", help="PNG path; the JSON goes beside it")
    args = parser.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    batches, seqs = FULL if args.full else (args.batches, args.seqs)
    sizes = [(b, s) for b in batches for s in seqs]
    title = "MiniLM-L6 BertModel, torch %s, %d threads, %s" % (
        torch.__version__, torch.get_num_threads(), cpu_model())
    print(title)
    records, compiles = [], {}
    for attention in args.attention:
        for dtype in args.dtypes:
            recs, note = run_config(attention, dtype, sizes, args)
            records += recs
            compiles["%s/%s" % (attention, dtype)] = note
    print(table(records))
    for config, note in compiles.items():
        print("compiles %s (warp backend): %s" % (config, note))
    path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.plot)
    plot(records, path, title)
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(dict(cpu=cpu_model(), torch=torch.__version__, threads=torch.get_num_threads(),
                       compiles=compiles, records=records), f, indent=1)
    print("plot: %s; figures: %s" % (path, os.path.splitext(path)[0] + ".json"))


if __name__ == "__main__":
    main()
