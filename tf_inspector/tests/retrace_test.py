"""watch and monitor: every retrace trigger and warning, with its reason and fix."""

import pytest
import tensorflow as tf

import tf_inspector

SCALE = 2.0


def test_first_trace_is_initial_and_calls_pass_through():
    f = tf_inspector.watch(tf.function(lambda x: x * 3.0))
    assert float(f(tf.constant(2.0))) == 6.0
    assert f.trace_count == 1 and f.events[0].reasons == ["initial"] and f.events[0].call_index == 1
    f(tf.constant(5.0))  # same signature: no trace
    assert f.trace_count == 1


def test_shape_change():
    f = tf_inspector.watch(tf.function(lambda x: tf.reduce_sum(x)))
    f(tf.ones([2, 3]))
    f(tf.ones([4, 3]))
    event = f.events[1]
    assert event.reasons == ["shape"] and event.call_index == 2
    assert (event.argument, event.before, event.after) == ("args[0]", "float32[2,3]", "float32[4,3]")
    assert "input_signature" in f.explain()


def test_dtype_change():
    f = tf_inspector.watch(tf.function(lambda x: x + x))
    f(tf.ones([2], tf.float32))
    f(tf.ones([2], tf.float64))
    assert f.events[1].reasons == ["dtype"] and f.events[1].after == "float64[2]"


def test_python_value_change():
    f = tf_inspector.watch(tf.function(lambda x, n: x * n))
    for n in (1.0, 2.0, 3.0):
        f(tf.ones([2]), n)
    assert [e.reasons for e in f.events] == [["initial"], ["python_value"], ["python_value"]]
    assert (f.events[2].argument, f.events[2].before, f.events[2].after) in {
        ("args[1]", "1.0", "3.0"), ("args[1]", "2.0", "3.0")}
    assert "pass tensors instead of Python numbers" in f.explain()


def test_structure_changes_list_length_and_dict_keys():
    f = tf_inspector.watch(tf.function(lambda xs: tf.add_n(xs)))
    f([tf.ones([2]), tf.ones([2])])
    f([tf.ones([2]), tf.ones([2]), tf.ones([2])])
    assert f.events[1].reasons == ["structure"]
    assert f.events[1].before == "list of 2" and f.events[1].after == "list of 3"
    g = tf_inspector.watch(tf.function(lambda d: d["a"] * 2.0))
    g({"a": tf.ones([1])})
    g({"a": tf.ones([1]), "b": tf.ones([1])})
    assert g.events[1].reasons == ["structure"] and "'b'" in g.events[1].after


def test_new_function_object_for_the_same_code_in_a_loop():
    def step(x):
        return x + 1.0

    with tf_inspector.monitor() as m:
        for _ in range(3):
            tf.function(step)(tf.ones([2]))  # a new tf.function each time
    assert [e.reasons for e in m.events] == [["initial"], ["new_function"], ["new_function"]]
    assert all(e.function.endswith("step") for e in m.events)
    assert "traced 3 times in 3 calls" in m.explain()
    assert "create the tf.function once" in m.explain()


def test_stale_global_and_closure_values_warn_without_retrace():
    global SCALE
    f = tf_inspector.watch(tf.function(lambda x: x * SCALE))
    assert float(f(tf.constant(1.0))) == 2.0
    SCALE = 5.0
    try:
        assert float(f(tf.constant(1.0))) == 2.0  # TF keeps the old value silently
    finally:
        SCALE = 2.0
    assert f.trace_count == 1
    (warning,) = f.warnings
    assert warning.kind == "stale_capture" and "SCALE = 2.0" in warning.message and "5.0" in warning.message

    offset = [1.0]
    bias = 1.0

    def make():
        return tf.function(lambda x: x + bias)

    g = tf_inspector.watch(make())
    g(tf.constant(0.0))
    bias = 7.0  # noqa: F841 - the closure cell changes
    g(tf.constant(0.0))
    assert [w.kind for w in g.warnings] == ["stale_capture"]
    assert offset == [1.0]


def test_side_effects_while_tracing_warn():
    log = []

    def noisy(x):
        print("tracing!")
        log.append(1)
        return x * 2.0

    f = tf_inspector.watch(noisy)  # a plain function is made a tf.function
    f(tf.ones([2]))
    f(tf.ones([2]))
    messages = [w.message for w in f.warnings]
    assert all(w.kind == "side_effect" for w in f.warnings)
    assert any("print()" in m for m in messages) and any("log changed size" in m for m in messages)
    assert len(log) == 1  # ran once: at the trace

    v = []

    @tf.function
    def makes_variable(x):
        if not v:
            v.append(tf.Variable(1.0, name="counter"))
        return x + v[0]

    with tf_inspector.monitor() as m:
        makes_variable(tf.constant(1.0))
    assert any("tf.Variable (counter)" in w.message for w in m.warnings)
    assert "tf.print" in m.explain()


def test_reasons_are_from_the_fixed_vocabulary_and_bad_input_is_refused():
    assert tf_inspector.REASONS == ("initial", "shape", "dtype", "python_value", "structure", "new_function")
    with pytest.raises(TypeError, match="tf.function or a Python function"):
        tf_inspector.watch(3)
