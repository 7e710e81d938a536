"""bench_overhead's timing of watch()'s own code leaves TF as it found it."""

import math

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import tracing_compilation

import tf_inspector
from tf_inspector import bench_overhead, tracehooks


def test_own_cost_times_each_part_and_restores_the_hooks():
    cost = bench_overhead.own_cost(number=5000, repeat=3)
    assert set(cost) == {"wrapper_us", "hook_us", "idle_hook_us", "watch_us"}
    assert all(math.isfinite(v) for v in cost.values())
    # No ordering of the parts is asserted: they are sub-microsecond differences of timings,
    # which a loaded 2-core runner reorders; comparing them is the benchmark's job.
    assert math.isclose(cost["watch_us"], cost["wrapper_us"] + cost["hook_us"])
    original = tracehooks._original_maybe_define  # TF's own again, after the timed no-op
    assert (original.__module__, original.__name__) == (tracing_compilation.__name__,
                                                         "_maybe_define_function")
    assert not tracehooks.active
    f = tf_inspector.watch(tf.function(lambda x: x * 2.0))  # recording still works after it
    f(tf.ones([2]))
    f(tf.ones([3]))
    assert [e.reasons for e in f.events] == [["initial"], ["shape"]]
