"""What watch() and monitor() cost per call of an already-traced tf.function.

    bazel run //tf_inspector:bench_overhead -- [--calls 200] [--rounds 300] [--json FILE]

Times the same traced tf.function three ways, interleaved in short rounds (their order
rotated round by round) so that load on the machine hits all three alike: bare, through
watch(), and inside a monitor() block. Prints the median microseconds per call of each,
and the overhead over bare as the median of the per-round differences (the goal: at most
5 us per call).

A whole call takes hundreds of microseconds, and on a shared machine the paired
differences scatter by tens: so watch()'s own code is also timed apart (own_cost), each
part with TF's work replaced by a no-op and taken as the minimum of repeated runs.
"""

import argparse
import json
import platform
import statistics
import time
import timeit

import tensorflow as tf
from tqdm import tqdm

import tf_inspector
from tf_inspector import retrace, tracehooks


def _per_call_us(call, x, calls):
    start = time.perf_counter()
    for _ in range(calls):
        call(x)
    return 1e6 * (time.perf_counter() - start) / calls


def measure(calls=200, rounds=300, progress=True):
    bare = tf.function(lambda x: x + 1.0)
    watched = tf_inspector.watch(bare)
    x = tf.ones([4])
    bare(x)
    watched(x)  # traced once; every timed call reuses the graph
    def in_monitor(x):
        with tf_inspector.monitor():
            return _per_call_us(bare, x, calls)

    ways = {"bare": lambda x: _per_call_us(bare, x, calls),
            "watch": lambda x: _per_call_us(watched, x, calls), "monitor": in_monitor}
    times = {k: [] for k in ways}
    order = list(ways)
    for r in tqdm(range(rounds), desc="rounds", disable=not progress):
        shift = r % len(order)
        for way in order[shift:] + order[:shift]:  # rotated: no way always runs first
            times[way].append(ways[way](x))
    medians = {k: statistics.median(v) for k, v in times.items()}
    overhead = {k: statistics.median(a - b for a, b in zip(times[k], times["bare"]))
                for k in ("watch", "monitor")}
    if bare.experimental_get_tracing_count() != 1:
        raise RuntimeError("the benchmark's function retraced: %s" % watched.explain())
    return {"cpu": platform.processor() or platform.machine(), "calls": calls, "rounds": rounds,
            "us_per_call": medians,
            "overhead_us": overhead}


class _Plain:
    """What watch() wraps as it wraps a tf.function, doing nothing."""
    python_function = staticmethod(lambda x: x)

    def __init__(self):
        self._function_cache = object()  # the key watch() registers its recorder under

    def __call__(self, x):
        return x


class _Grab(retrace.Recorder):
    """Keeps the tracing options of the calls it hears."""

    def before_call(self, tracing_options):
        self.options = tracing_options


def own_cost(number=100000, repeat=7):
    """Microseconds per call of watch()'s own code: its wrapper, the hook with a recorder
    listening, and the hook with none (what other tf.functions pay once watch() has run)."""
    def best(fn):  # interference only adds time: the minimum is the code's own cost
        return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

    plain = _Plain()
    watched = tf_inspector.watch(plain)
    wrapper = best(lambda: watched(1)) - best(lambda: plain(1))
    grab, x = _Grab(), tf.ones([4])
    with tracehooks.recording(grab):
        tf.function(lambda x: x + 1.0)(x)
    noop, hook = (lambda args, kwargs, options: None), tracehooks._patched_maybe_define
    saved, tracehooks._original_maybe_define = tracehooks._original_maybe_define, noop
    recorder, cache = retrace.Recorder(), grab.options.function_cache
    try:
        base = best(lambda: noop((x,), {}, grab.options))
        idle = best(lambda: hook((x,), {}, grab.options)) - base
        tracehooks.watch_cache(cache, recorder)
        try:
            listening = best(lambda: hook((x,), {}, grab.options)) - base
        finally:
            tracehooks.unwatch_cache(cache, recorder)
    finally:
        tracehooks._original_maybe_define = saved
    return {"wrapper_us": wrapper, "hook_us": listening, "idle_hook_us": idle,
            "watch_us": wrapper + listening}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--calls", type=int, default=200, help="calls per round and way")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved rounds (median)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    result = measure(args.calls, args.rounds)
    for way, us in result["us_per_call"].items():
        extra = "" if way == "bare" else "  (+%.2f us)" % result["overhead_us"][way]
        print("%-8s %7.2f us per call%s" % (way, us, extra))
    own = result["own_cost"] = own_cost()
    print("watch()'s own code per call (TF's work a no-op, best of 7): wrapper %.2f us + hook "
          "%.2f us = %.2f us; other tf.functions after watch() ran: %.2f us"
          % (own["wrapper_us"], own["hook_us"], own["watch_us"], own["idle_hook_us"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
