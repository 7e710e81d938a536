"""watch and monitor: every retrace trigger and warning, with its reason and fix."""

import copy
import gc
import pickle

import keras
import numpy as np
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
    g({"a": tf.ones([5]), "c": tf.ones([1])})  # the container explains its changed children
    assert [c.argument for c in g.events[2].changes] == ["args[0]"], g.events[2].changes


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
    assert not any("Variable" in w.message for w in m.warnings)  # TF's documented pattern
    assert m.events[0].variables == ["counter"]


def test_reasons_are_from_the_fixed_vocabulary_and_bad_input_is_refused():
    assert tf_inspector.REASONS == ("initial", "shape", "dtype", "python_value", "python_object",
                                    "structure", "context", "new_function", "unexplained")
    with pytest.raises(TypeError, match="tf.function or a Python function"):
        tf_inspector.watch(3)


def assert_specific(explanation, events):
    """No event explained by a bare reason: each names what changed, or is a first trace."""
    for e in events:
        assert e.reasons, e
        if e.reasons[0] not in ("initial", "new_function"):
            assert e.changes and all(c.argument and c.before != c.after for c in e.changes), e
        assert "unexplained" not in e.reasons, e
    for line in explanation.splitlines():
        assert not line.rstrip().endswith(("): structure", "): shape", "): python_value")), line


def test_variables_made_on_the_first_call_are_one_initial_event():
    class Counter(tf.Module):
        def __init__(self):
            self.v = None

        @tf.function
        def __call__(self, x):
            if self.v is None:
                self.v = tf.Variable(tf.ones([3]), name="scale")
            return x * self.v

    c = Counter()
    with tf_inspector.monitor() as m:
        c(tf.ones([3]))
        c(tf.ones([3]))
    text = m.explain()
    assert [e.reasons for e in m.events] == [["initial"]], text  # TF's inner traces folded in
    assert "traced 1 time in 2 calls" in text and "structure" not in text
    assert "initial, with variable creation (scale): TF traces twice" in text
    assert "initialize_variables" not in text and not m.warnings
    other = Counter()
    w = tf_inspector.watch(other.__call__)
    w(tf.ones([3]))
    w(tf.ones([3]))
    assert w.trace_count == 1 and "traced 1 time in 2 calls" in w.explain()
    assert_specific(text, m.events)


def test_python_objects_are_named_with_their_argument_and_the_fix():
    class Cfg:
        pass

    f = tf_inspector.watch(tf.function(lambda x, cfg: x * 2.0))
    keep = Cfg()
    f(tf.ones([2]), keep)
    f(tf.ones([2]), keep)  # the same object: no retrace
    f(tf.ones([2]), Cfg())
    assert f.trace_count == 2
    event = f.events[1]
    assert event.reasons == ["python_object"] and event.argument == "args[1]"
    assert event.before.startswith("Cfg object at") and event.after.startswith("Cfg object at")
    assert event.before != event.after
    assert "__tf_tracing_type__" in f.explain() and "reuse one object" in f.explain()
    assert_specific(f.explain(), f.events)


class _ScaleType(tf.types.experimental.TraceType):
    """Scale objects of one value share a graph (their class's __tf_tracing_type__)."""

    def __init__(self, value):
        self.value = value

    def is_subtype_of(self, other):
        return self == other

    def most_specific_common_supertype(self, others):
        return self if all(self == o for o in others) else None

    def placeholder_value(self, placeholder_context):
        return Scale(self.value)

    def __eq__(self, other):
        return isinstance(other, _ScaleType) and other.value == self.value

    def __hash__(self):
        return hash(self.value)


class Scale:
    def __init__(self, value):
        self.value = value

    def __tf_tracing_type__(self, context):
        return _ScaleType(self.value)


def test_objects_with_a_tracing_type_differ_only_when_their_types_do():
    f = tf_inspector.watch(tf.function(lambda x, s: x * s.value))
    f(tf.ones([2]), Scale(2.0))
    f(tf.ones([2]), Scale(2.0))  # a new object of an equal tracing type: the same graph
    f(tf.ones([3]), Scale(2.0))  # only the shape changed
    f(tf.ones([3]), Scale(3.0))
    assert [e.reasons for e in f.events] == [["initial"], ["shape"], ["python_object"]], f.explain()
    assert f.events[2].argument == "args[1]" and "tracing type" in f.events[2].after
    assert_specific(f.explain(), f.events)


def test_a_tensor_then_a_python_value_is_a_python_value_change():
    f = tf_inspector.watch(tf.function(lambda x: x + 1.0))
    f(tf.constant(1.0))
    f(1.0)
    event = f.events[1]
    assert event.reasons == ["python_value"], f.explain()
    assert (event.before, event.after) == ("float32[]", "1.0")


def test_the_five_classic_retraces_each_explained():
    """TF's guide: new shape, new dtype, new Python value, new Python object, new function."""
    cases = {
        "shape": ((tf.ones([2]),), (tf.ones([3]),), "args[0] shape: float32[2] -> float32[3]"),
        "dtype": ((tf.ones([2]),), (tf.ones([2], tf.float64),), "args[0] dtype: float32[2] -> float64[2]"),
        "python_value": ((2,), (3,), "args[0] python_value: 2 -> 3"),
        "python_object": ((Box(),), (Box(),), "args[0] python_object: Box object at"),
    }
    for reason, (first, second, text) in cases.items():
        f = tf_inspector.watch(tf.function(lambda x: tf.identity(tf.constant(1.0))))
        f(*first)
        f(*second)
        assert f.events[1].reasons == [reason] and text in f.explain(), f.explain()
        assert "- %s:" % reason in f.explain()
        assert_specific(f.explain(), f.events)

    def body(x):
        return x * 2.0

    with tf_inspector.monitor() as m:
        for _ in range(2):
            tf.function(body)(tf.ones([2]))
    assert m.events[1].reasons == ["new_function"]
    assert "call 1 traced (new_function): new_function" in m.explain()


def test_reduce_retracing_and_input_signature_say_what_the_graph_covers():
    f = tf_inspector.watch(tf.function(lambda x: x * 2.0, reduce_retracing=True))
    for n in (2, 3, 4, 5):
        f(tf.ones([n, 3]))
    assert f.trace_count == 2, f.explain()  # the second trace is generalised; 4 and 5 reuse it
    assert f.events[1].traced_as == {"args[0]": "float32[?,3]"}
    assert "traced as args[0] float32[?,3], which later calls of those shapes reuse" in f.explain()
    assert "traced 2 times in 4 calls" in f.explain()

    g = tf_inspector.watch(tf.function(lambda x: x * 2.0,
                                       input_signature=[tf.TensorSpec([None, 3])]))
    for n in (2, 7):
        g(tf.ones([n, 3]))
    assert g.trace_count == 1 and g.events[0].traced_as == {"args[0]": "float32[?,3]"}
    with pytest.raises((TypeError, ValueError)):
        g(tf.ones([2, 4]))  # outside the signature: TF's own error passes through
    assert "traced 1 time in 2 calls" in g.explain()


def test_the_calling_context_is_a_reason():
    inner = tf_inspector.watch(tf.function(lambda x: x + 1.0))
    inner(tf.ones([2]))
    tf.function(lambda x: inner(x))(tf.ones([2]))  # from another tf.function: the same context
    assert inner.trace_count == 1
    with tf.Graph().as_default():  # a TF1-style graph is another context
        inner(tf.ones([2]))
    event = inner.events[1]
    assert event.reasons == ["context"], inner.explain()
    assert event.before == "eager code" and event.after.startswith("inside a Graph (id 0x")
    assert_specific(inner.explain(), inner.events)


def test_keras_and_tf_data_traces_group_under_the_users_call():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 4), "float32"), np.ones((8, 2), "float32")
    with tf_inspector.monitor() as m:
        model.fit(x, y, epochs=2, verbose=0)
        model.predict(x, verbose=0)
        tf.data.Dataset.range(3).map(lambda i: i * 2)
    text = m.explain()
    assert "new_function" not in text and "How to fix" not in text, text
    assert "(initial)" not in text  # the group's line says what was traced; no line per function
    lines = text.splitlines()
    assert any(l.startswith("TensorFlowTrainer.fit at retrace_test.py:") for l in lines), text
    assert any(l.startswith("TensorFlowTrainer.predict at retrace_test.py:") for l in lines), text
    assert any(l.startswith("DatasetV2.map at retrace_test.py:") and
               l.endswith("traced 1 function of their own (wrapped_fn)") for l in lines), text
    assert all(e.site for e in m.events)
    assert_specific(text, m.events)


def test_watch_objects_copy_and_pickle():
    with pytest.raises(AttributeError):
        tf_inspector.watch.__new__(tf_inspector.watch).get_concrete_function  # not RecursionError
    f = tf_inspector.watch(tf.function(_double))
    f(tf.ones([2]))
    copies = [copy.copy(f), copy.deepcopy(f)]
    unpickled = pickle.loads(pickle.dumps(f))
    for clone in copies + [unpickled]:
        assert clone.trace_count == 1 and clone.events[0].reasons == ["initial"]
    assert float(copies[0](tf.constant(2.0))) == 4.0  # the copies share f's tf.function ...
    assert [len(w.events) for w in [f] + copies] == [2, 2, 2]  # ... so all three hear it
    assert copies[1].events[1] is not f.events[1]  # in lists of their own
    assert float(unpickled(tf.constant(2.0))) == 4.0  # a tf.function of its own, untraced
    assert f.trace_count == 2 and [e.reasons for e in unpickled.events] == [["initial"]] * 2


def test_watch_hears_direct_calls_and_stops_when_dropped():
    from tf_inspector import tracehooks
    fn = tf.function(_double)
    f = tf_inspector.watch(fn)
    fn(tf.ones([2]))  # not through the watch: TF's trace cache is the same
    f(tf.ones([3]))
    assert [e.reasons for e in f.events] == [["initial"], ["shape"]]
    assert f.events[1].changes[0].before == "float32[2]"
    cache = fn._function_cache
    assert tracehooks.watched[cache] == [f._recorder]
    del f
    gc.collect()
    assert cache not in tracehooks.watched  # nothing listens to fn any more
    fn(tf.ones([4]))


def test_between_watched_calls_other_functions_go_unrecorded_and_monitor_still_works():
    from tf_inspector import tracehooks
    f = tf_inspector.watch(tf.function(_double))
    g = tf.function(lambda x: x + 1.0)
    assert tracehooks.installed()  # watch() installs them for good
    f(tf.ones([2]))
    g(tf.ones([2]))
    g(tf.ones([3]))  # a retrace no recorder listens to
    assert f.trace_count == 1 and float(g(tf.constant(1.0))) == 2.0
    with tf_inspector.monitor() as m:
        g(tf.ones([4]))
        f(tf.ones([5]))
    assert [e.function.rpartition(".")[2] for e in m.events] == ["<lambda>", "_double"]
    assert tracehooks.installed()  # monitor() leaves them to the watch
    f(tf.ones([6]))
    assert f.trace_count == 3 and [e.reasons for e in f.events[1:]] == [["shape"], ["shape"]]
    assert tracehooks._original_maybe_define is not tracehooks._patched_maybe_define


class Box:
    pass


def _double(x):
    return x * 2.0


def test_an_input_traced_with_unknown_rank_does_not_break_the_call():
    f = tf_inspector.watch(tf.function(lambda x: x + 1.0, reduce_retracing=True))
    for shape in ([2], [3], [2, 2]):
        assert f(tf.ones(shape)).shape == shape
    assert f.events[-1].traced_as == {"args[0]": "float32[<unknown rank>]"}, f.explain()
    g = tf_inspector.watch(tf.function(lambda x: x + 1.0,
                                       input_signature=[tf.TensorSpec(None, tf.float32)]))
    assert float(g(tf.constant(1.0))) == 2.0
    h = tf_inspector.watch(tf.function(lambda x: x + 1.0))
    h.get_concrete_function(tf.TensorSpec([2], tf.float32))
    h.get_concrete_function(tf.TensorSpec(None, tf.float32))
    assert (h.events[1].before, h.events[1].after) == ("float32[2]", "float32[<unknown rank>]")
    with tf_inspector.monitor() as m:
        g(tf.ones([2, 2]))
        tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec(None)])(tf.ones([3]))
    assert m.events[0].traced_as == {"args[0]": "float32[<unknown rank>]"}


def test_ragged_and_sparse_retraces_are_shape_and_dtype_changes():
    f = tf_inspector.watch(tf.function(lambda x: x * 2))
    f(tf.ragged.constant([[1.0, 2.0], [3.0]]))
    f(tf.ragged.constant([[1.0, 2.0], [3.0], [4.0]]))
    f(tf.ragged.constant([[1, 2], [3], [4]]))
    f(tf.ones([3, 2], tf.int32))
    assert [e.reasons for e in f.events[1:]] == [["shape"], ["dtype"], ["structure"]], f.explain()
    assert (f.events[1].before, f.events[1].after) == ("RaggedTensor float32[2,?]",
                                                       "RaggedTensor float32[3,?]")
    assert f.events[3].after == "int32[3,2]"
    g = tf_inspector.watch(tf.function(lambda x: tf.sparse.reduce_sum(x)))
    g(tf.sparse.SparseTensor([[0, 0]], [1.0], [2, 2]))
    g(tf.sparse.SparseTensor([[0, 0]], [1.0], [3, 3]))
    g(tf.sparse.SparseTensor([[0, 0], [1, 1]], [1.0, 2.0], [3, 3]))  # more values: the same graph
    assert g.trace_count == 2 and g.events[1].reasons == ["shape"], g.explain()
    assert g.events[1].after == "SparseTensor float32[3,3]" and "reuse one object" not in g.explain()


def test_numpy_scalars_retrace_as_the_tensors_tf_makes_of_them():
    f = tf_inspector.watch(tf.function(lambda x, k: x * tf.cast(tf.reduce_sum(k), tf.float32)))
    f(tf.ones([2]), np.float32(2.0))
    f(tf.ones([2]), np.float32(3.0))  # a new value of a 0-d tensor: the same graph
    f(tf.ones([2]), np.int32(3))
    f(tf.ones([2]), np.ones([2], np.float32))
    assert f.trace_count == f.experimental_get_tracing_count() == 3, f.explain()
    assert [(e.reasons, e.before, e.after) for e in f.events[1:]] == [
        (["dtype"], "float32[]", "int32[]"), (["shape"], "float32[]", "float32[2]")], f.explain()
    assert "pass tensors instead of Python numbers" not in f.explain()


def test_a_retrace_is_explained_against_the_most_similar_trace():
    f = tf_inspector.watch(tf.function(lambda x, k: x + tf.reduce_sum(k)))
    f(tf.ones([2]), 1.0)
    f(tf.ones([2]), tf.ones([2]))
    f(tf.ones([2]), tf.ones([3]))  # as far from call 1 (a number) as from call 2, in kind less
    assert [(c.argument, c.reason, c.before, c.after) for c in f.events[2].changes] == [
        ("args[1]", "shape", "float32[2]", "float32[3]")], f.explain()
    g = tf_inspector.watch(tf.function(lambda a: tf.add_n(tf.nest.flatten(a))))
    g({"a": tf.ones([2])})
    g([tf.ones([2]), [tf.ones([2])]])
    g([tf.ones([2]), (tf.ones([2]),)])  # one structure change from either: call 2's is inside
    assert [(c.argument, c.before, c.after) for c in g.events[2].changes] == [
        ("args[0][1]", "list of 1", "tuple of 1")], g.explain()


def test_a_trace_that_raised_is_not_counted():
    broken = [True]

    def step(x):
        if broken[0]:
            raise ValueError("not yet")
        return x * 2.0

    f = tf_inspector.watch(step)
    for _ in range(2):
        with pytest.raises(ValueError, match="not yet"):
            f(tf.ones([2]))
    assert f.trace_count == f.experimental_get_tracing_count() == 0
    broken[0] = False
    f(tf.ones([2]))
    assert [e.reasons for e in f.events] == [["initial"]] and f.events[0].call_index == 3
    assert "traced 1 time in 3 calls" in f.explain() and "unexplained" not in f.explain()


class _Doubler(tf.Module):
    @tf.function
    def __call__(self, x):
        return x * 2.0


def test_watching_a_method_through_its_class_is_refused_with_the_way_that_works():
    with pytest.raises(TypeError, match=r"watch the bound method \(instance.__call__\)"):
        tf_inspector.watch(_Doubler.__call__)  # instances' calls never reach its trace cache
    m = _Doubler()
    f = tf_inspector.watch(m.__call__)
    m(tf.ones([2]))
    m(tf.ones([3]))
    assert [e.reasons for e in f.events] == [["initial"], ["shape"]], f.explain()


def test_an_argument_more_in_star_args_or_kwargs_is_a_structure_change():
    f = tf_inspector.watch(tf.function(lambda *xs, **kw: xs[0]))
    f(tf.ones([2]))
    f(tf.ones([2]), tf.ones([2]))
    f(tf.ones([2]), extra=3)
    assert f.trace_count == f.experimental_get_tracing_count() == 3, f.explain()
    assert [(c.argument, c.reason, c.before, c.after) for e in f.events[1:] for c in e.changes] == [
        ("args[1]", "structure", "absent", "float32[2]"),
        ("extra", "structure", "absent", "3")], f.explain()


def test_a_variable_where_a_tensor_was_is_a_structure_change():
    f = tf_inspector.watch(tf.function(lambda v: v * 2.0))
    f(tf.Variable(tf.ones([2])))
    f(tf.Variable(tf.ones([2])))  # another variable of that shape: the same graph
    f(tf.ones([2]))
    assert f.trace_count == f.experimental_get_tracing_count() == 2, f.explain()
    assert (f.events[1].reasons, f.events[1].before, f.events[1].after) == (
        ["structure"], "Variable float32[2]", "float32[2]"), f.explain()


def test_objects_compared_by_identity_are_shown_by_their_own_repr():
    import enum

    class Mode(enum.Enum):
        TRAIN = 1
        EVAL = 2

    f = tf_inspector.watch(tf.function(lambda x, mode, dtype: tf.cast(x, dtype)))
    f(tf.ones([2]), Mode.TRAIN, tf.float16)
    f(tf.ones([2]), Mode.EVAL, tf.float16)
    f(tf.ones([2]), Mode.EVAL, tf.int32)
    assert [(e.before.split(" (object")[0], e.after.split(" (object")[0]) for e in f.events[1:]] == [
        ("<Mode.TRAIN: 1>", "<Mode.EVAL: 2>"), ("tf.float16", "tf.int32")], f.explain()
    assert_specific(f.explain(), f.events)


def test_a_function_traced_before_it_was_watched_retraces_against_those_traces():
    f = tf.function(lambda x: x + 1.0)
    f(tf.ones([1]))
    f(tf.ones([2]))
    w = tf_inspector.watch(f)
    f(tf.ones([2]))  # a graph made before the watch: no trace
    f(tf.ones([3]))
    assert f.experimental_get_tracing_count() == 3
    assert [(e.call_index, e.reasons, e.before, e.after) for e in w.events] == [
        (2, ["shape"], "float32[1]", "float32[3]")], w.explain()
    with tf_inspector.monitor() as m:
        f(tf.ones([4]))
    assert [e.reasons for e in m.events] == [["shape"]], m.explain()
