"""minigrad.hlo: minigrad programs as StableHLO (MLIR text), compiled and run by XLA.

    text = hlo.export(loss, params, x, y, grad=True)   # forward and minigrad's backward
    step = hlo.jit(train_step)                          # compiled once per argument shapes
    loss, params = step(params, x, y)

export runs f once on the example arguments with a trace level on the transform
stack (levels.py), which records every operation: class, arguments, result.
With grad=True, minigrad's own backward pass runs under the trace too, so the
backward graph emitted is the one minigrad records, op by op. Each operation
becomes StableHLO ops by its row in EMIT (emit_ops.py); tensors and arrays among
the arguments are the program's inputs, anything else it did not compute is a
constant. jit(f) traces f once per argument signature, compiles the text with
XLA's CPU backend through jax's backend API (jax==0.10.2, pinned: the API is
not public), and runs it through jax's C++ dispatch (load); its outputs are plain
tensors (not differentiable) over XLA's device buffers, read into read-only arrays
when first read, and passed back in (a training loop's parameters) they stay on
the device; with jit(f, donate_argnums=...) XLA writes the new ones into their buffers.
"""

import warnings

import numpy as np

from minigrad import autograd
from minigrad.emit_ops import EMIT, Emitter, targets_out_of_range
from minigrad.function import Function
from minigrad.functional import check_target
from minigrad.grad_mode import _State, enable_grad
from minigrad.levels import Level, Suspend, flatten, sequence, unflatten
from minigrad.tensor import OnDevice, Tensor, host_view, on_device, unread_buffer

__all__ = ["export", "jit"]


class _Trace(Level):
    """Records each operation (class, arguments, result) as it runs."""

    traces = True

    def __init__(self, inputs):
        self.nodes = []
        self.traced = {id(t) for t in inputs}  # the inputs and what is computed from them
        self.made = set()  # what the recorded operations computed (each kept alive by nodes)
        # id -> (tensor, its version, its array): the tensors from outside f's arguments whose
        # values the program holds as constants (closed over, or read in Python): jit traces
        # again when one has changed since (_Compiled.stale)
        self.captured = {}

    def process(self, cls, args):
        for a in args:
            if a.__class__ is not Tensor and isinstance(a, (tuple, list, slice)) and self._holds(a):
                # (NumPy reads it as an int, through __index__, while this level is suspended)
                raise RuntimeError(
                    "hlo.jit: a traced tensor used as an index or a shape (a slice bound, a "
                    "reshape size): it stands for every call's value, and the trace's would be "
                    "compiled in; pass a Python int (jax.jit raises too)")
        with Suspend(self):
            out = cls.apply(*args)
        if cls not in EMIT:
            raise NotImplementedError("hlo: %s has no StableHLO rule; add one to minigrad/emit_ops.py's "
                                      "EMIT, or keep it out of the exported function" % cls.__name__)
        self.nodes.append((cls, args, out))
        traced = False
        for a in args:
            if isinstance(a, Tensor):
                if id(a) in self.traced:
                    traced = True
                elif id(a) not in self.made:
                    self._capture(a)
        (self.traced if traced else self.made).add(id(out))
        return out

    def _holds(self, value):
        """Whether a traced tensor is inside an index, a slice or a shape."""
        if isinstance(value, Tensor):
            return id(value) in self.traced
        if isinstance(value, slice):
            value = (value.start, value.stop, value.step)
        return isinstance(value, (tuple, list)) and any(self._holds(v) for v in value)

    def _capture(self, t):
        if id(t) not in self.captured:
            self.captured[id(t)] = (t, t._version[0], t.data)

    def unreadable(self, t):
        if id(t) in self.traced:
            return ("hlo.jit", "a traced tensor: it stands for the value of every call, and the "
                    "trace's would be compiled in", "jax.jit")
        if id(t) not in self.made:
            self._capture(t)  # (its value, read now, is compiled in)
        return None


def _native(array):
    """array in the machine's byte order: XLA reads an input's bytes as such, so a big-endian
    array's values would be silently wrong."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _inputs(args, grad):
    """The arguments with their arrays and tensors made the program's inputs (fresh leaves,
    requiring grad when grad=True and floating point; numbers stay constants), the inputs,
    and for each input the index of the argument it came from."""
    rebuilt, inputs, owners = [], [], []
    for i, arg in enumerate(args):
        leaves, spec = flatten(arg)
        values = []
        for leaf in leaves:
            if isinstance(leaf, (Tensor, np.ndarray)):
                array = leaf.data if isinstance(leaf, Tensor) else leaf
                # (np.asarray with order="C": ascontiguousarray makes 0-d arrays 1-d)
                t = Tensor._wrap(np.asarray(_native(array), order="C"))
                if grad and array.dtype.kind == "f":
                    t.requires_grad = True
                inputs.append(t)
                owners.append(i)
                values.append(t)
            else:
                values.append(leaf)
        rebuilt.append(unflatten(spec, values))
    return rebuilt, inputs, owners


def _trace(f, args, grad):
    """f run under a trace level: its inputs, the argument index of each, the operations
    recorded, its outputs and their structure."""
    rebuilt, inputs, owners = _inputs(args, grad)
    trace = _Trace(inputs)
    with trace:
        out = f(*rebuilt)
        outs, out_spec = flatten(out)
        if grad:
            if len(outs) != 1 or not isinstance(outs[0], Tensor) or outs[0].data.size != 1:
                raise ValueError("hlo.export(grad=True): f must return one scalar tensor")
            wrt = [t for t in inputs if t.requires_grad]
            grads = autograd.grad(outs[0], wrt, allow_unused=True)
            grads = [g if g is not None else Tensor._wrap(np.zeros_like(t.data))
                     for g, t in zip(grads, wrt)]
            outs = outs + grads
            out_spec = (tuple, [None] * len(outs))  # (output, gradient, gradient, ...)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError("hlo: f's outputs must be tensors, got %s" % type(o).__name__)
    return inputs, owners, trace, outs, out_spec


def _module(inputs, nodes, outs, flag=False, donate=()):
    """The program's text; with flag=True, also its checks and the (shape, dtype) of each
    target it computes. A check is (computed, index, logits shape), one per class-index
    target that is an input or computed from one, in trace order (none for an empty batch);
    `index` is the input's, or the computed target's. With checks, the program returns first
    whether any fails (emit_ops.targets_out_of_range), then the targets it computes (a failed
    check reads them for eager's error), then f's outputs. Each input index in `donate` is
    aliased to the first output of its shape and dtype not taken yet, if any: XLA writes that
    output into the input's buffer, when the buffer is the program's to take (_Compiled)."""
    em = Emitter()
    for k, t in enumerate(inputs):
        em.bind(t, "%%arg%d" % k)
    for cls, args, out in nodes:
        em.bind(out, EMIT[cls](em, args, out))
    results = [em.value(o) for o in outs]
    types = [em.type(o.data.shape, o.data.dtype) for o in outs]
    # (once each: the gradient's PickGrad checks the target its Pick checked)
    checks = list(dict.fromkeys(c for c in em.target_checks if c[3][0])) if flag else []
    sources, computed = [], {}  # computed: {SSA name: (index, shape, dtype)}
    for name, t_shape, t_dtype, shape in checks:
        if name.startswith("%arg"):
            sources.append((False, int(name[4:]), shape))
        else:
            index = computed.setdefault(name, (len(computed), t_shape, t_dtype))[0]
            sources.append((True, index, shape))
    if checks:
        results = [targets_out_of_range(em, checks)] + list(computed) + results
        types = ([em.type((), bool)] + [em.type(t_shape, t_dtype) for _, t_shape, t_dtype
                                         in computed.values()] + types)
    offset, free, aliases = len(results) - len(outs), list(range(len(outs))), {}
    for k in donate:
        t = inputs[k].data
        j = next((j for j in free if (outs[j].data.shape, outs[j].data.dtype) == (t.shape, t.dtype)),
                 None)
        if j is not None:
            free.remove(j)
            aliases[k] = " {tf.aliasing_output = %d : i32}" % (j + offset)
    signature = ", ".join("%%arg%d: %s%s" % (k, em.type(t.data.shape, t.data.dtype),
                                             aliases.get(k, "")) for k, t in enumerate(inputs))
    types = ", ".join(types)
    body = "\n".join("    " + line for line in em.lines)
    return ("module @minigrad {\n  func.func public @main(%s) -> (%s) {\n%s\n    return %s : %s\n  }\n}\n"
            % (signature, types, body, ", ".join(results), types)), sources, [
                (t_shape, t_dtype) for _, t_shape, t_dtype in computed.values()]


def export(f, *example_args, grad=False):
    """StableHLO text of f on arguments like example_args; with grad=True (f returns a scalar),
    the program returns f's output and its gradient with respect to each floating-point input
    (in argument order), computed by the backward graph minigrad records."""
    inputs, _, trace, outs, _ = _trace(f, example_args, grad)
    return _module(inputs, trace.nodes, outs)[0]


_client = []  # the synchronous XLA CPU client, made on first use


def _cpu_client():
    """A synchronous XLA CPU client of minigrad's own: a call returns when the program is done.
    jax's default client queues every call for a worker thread and returns a future, and on a
    busy machine the extra hand-offs cost more than a small program takes. (XLA's thunk
    executor still runs much of a program on its own worker pool.)"""
    if not _client:
        from jax._src.lib import xla_client
        _client.append(xla_client.make_cpu_client(asynchronous=False))
    return _client[0]


_registry, _kinds = [], {list, tuple, dict}  # made on first use; the container types it takes


def _pytrees(kinds=()):
    """The pytree registry with which jax's C++ dispatch builds a program's outputs as
    levels.unflatten does (a dict in its keys' order, where jax's own registry sorts them; a
    list or tuple subclass among `kinds`, registered here, rebuilt by levels.sequence), each output
    buffer wrapped as an unread tensor (tensor.on_device) by a callback: no Python frame of
    minigrad's runs around the call."""
    if not _registry:
        from jax._src.lib import _jax
        registry = _jax.pytree.PyTreeRegistry(enable_none=False, enable_tuple=True,
                                              enable_namedtuple=False, enable_list=True,
                                              enable_dict=False)
        registry.register_node(dict, lambda d: (tuple(d.values()), tuple(d)),
                               lambda keys, values: dict(zip(keys, values)))
        registry.register_node(OnDevice, lambda t: ((unread_buffer(t),), None),
                               lambda _, buffer: on_device(buffer[0]))
        _registry.append(registry)
    for kind in set(kinds) - _kinds:
        _registry[0].register_node(kind, lambda t: (tuple(t), None),
                                   lambda _, children, kind=kind: sequence(kind, children))
        _kinds.add(kind)
    return _registry[0]


def _out_tree(spec, outputs, flag, computed=0):
    """The PyTreeDef of a program's results: `outputs` leaves arranged as levels' `spec`,
    after the flag (targets_out_of_range) and a tuple of the `computed` targets, if the
    program returns a flag."""
    tree = unflatten(spec, [on_device(None)] * outputs)
    return _pytrees(_containers(spec)).flatten((None, (None,) * computed, tree) if flag
                                               else tree)[1]


def _containers(spec):
    if spec is None:
        return []
    children = [spec[2]] if spec[0] is dict else spec[1]
    return [spec[0]] + [kind for child in children for kind in _containers(child)]


def load(text, in_types, out_types, out_tree=None):
    """StableHLO text compiled by XLA's CPU backend: a function of arrays with the given
    (shape, dtype) inputs, returning the outputs as read-only arrays. Its `on_device`
    attribute takes arrays or XLA buffers (of minigrad's client) and returns the outputs as
    XLA buffers (a tuple, or as `out_tree`, a PyTreeDef of _pytrees(), arranges them); arrays
    of other shapes or dtypes raise _OtherTypes.

    A call goes through jax's C++ dispatch (the one jax.jit's calls take once compiled): the
    first call of each kind of arguments (arrays or buffers) runs the program from Python and
    hands the C++ path what it needs (`pxla.MeshExecutableFastpathData`: minigrad's executable,
    its shardings and output types); later ones check, transfer, execute and wrap the results
    in C++. The digits MLP's step program at batch 64, its parameters fed back as buffers,
    took 62 us a call that way against 77 us through the Python path it replaced
    (batched_device_put, execute_sharded, result handlers, outputs viewed as arrays; Intel
    Xeon family 6 model 167, one process, 15 interleaved rounds).
    """
    import jax
    from jax._src import core  # ShapedArray: the abstract value batched_device_put takes
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax
    from jax.extend import backend
    from jax.sharding import SingleDeviceSharding
    # float64 and int64 arrays keep their dtypes on their way in under x64 alone; it is set for
    # minigrad's own calls, never process-wide (where it would change the caller's jax code's
    # default dtypes, and a caller who turned it off again broke every compiled program).
    x64 = jax.enable_x64
    client = _cpu_client()
    device = client.devices()[0]
    options = backend.get_compile_options(1, 1)
    # XLA hands dots and reductions to YNNPACK fusions by default; XLA's own dot and loop
    # fusions ran the digits MLP's step 19% faster at batch 1347 (median execute 940 vs
    # 1157 us, AMD EPYC AVX2, one thread) and as fast at batch 64.
    options.env_option_overrides = [("xla_cpu_experimental_ynn_fusion_type", "")]
    executable = client.compile_and_load(text, [device], options)
    in_types = [(tuple(s), np.dtype(d)) for s, d in in_types]
    sharding, devices = SingleDeviceSharding(device), [device]
    avals = [core.ShapedArray(s, d) for s, d in in_types]
    out_types = [(tuple(s), np.dtype(d)) for s, d in out_types]
    out_avals = [core.ShapedArray(s, d) for s, d in out_types]
    handlers = [_jax.array_result_handler(a, sharding, committed=True, _skip_checks=True)
                for a in out_avals]
    put, copy = _jax.batched_device_put, _jax.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL
    registry = _pytrees()
    if out_tree is None:
        out_tree = registry.flatten(tuple(range(len(out_types))))[1]
    fastpath = []

    def first_call(*arrays):
        """The C++ path's cache miss: the program run from Python, and what the C++ path
        needs to run it for arguments like these (buffers of minigrad's client, or arrays).
        Arrays of other shapes or dtypes than the program takes raise _OtherTypes."""
        if [(a.shape, np.dtype(a.dtype)) for a in arrays] != in_types:
            raise _OtherTypes
        buffers = [a if a.__class__ is _jax.ArrayImpl else
                   put(aval, sharding, [np.asarray(a, order="C")], devices, True, False, copy)
                   for a, aval in zip(arrays, avals)]
        results = executable.execute_sharded(buffers).consume_with_handlers(handlers)
        if not fastpath:
            # The handlers skip this check (once is enough: the program's outputs do not change).
            if [(memoryview(r).shape, np.dtype(r.dtype)) for r in results] != out_types:
                raise TypeError("hlo: the program returns %s, not %s" % (
                    [(memoryview(r).shape, r.dtype) for r in results], out_types))
            n, m = len(arrays), len(results)
            fastpath.append(pxla.MeshExecutableFastpathData(
                executable, out_tree, [sharding] * n, [sharding] * m, out_avals, [True] * m,
                [True] * n, [None] * n, []))
        # (False: no profile-guided recompile)
        return out_tree.unflatten(results), fastpath[0], False

    # The cache holds an entry per mix of arrays and buffers among the arguments (a training
    # loop uses one or two); an entry it drops is made again by first_call.
    dispatch = _jax.pjit("minigrad", first_call, first_call, [], [], pxla.JitGlobalCppCacheKeys(),
                         registry, pxla.cc_shard_arg,
                         _jax.PjitFunctionCache(capacity=8))

    def on_device(*arrays):
        prev = x64.swap_local(True)  # (what `with jax.enable_x64(True)` does, at a fifth the cost)
        try:
            return dispatch(*arrays)
        finally:
            x64.set_local(prev)

    def run(*arrays):
        # The error on_device would give is the bare _OtherTypes: say what was expected.
        arrays = [_native(np.asarray(a)) for a in arrays]
        if [(a.shape, a.dtype) for a in arrays] != in_types:
            raise TypeError("hlo: the program takes %s, got %s" % (
                in_types, [(a.shape, a.dtype) for a in arrays]))
        return [host_view(r) for r in on_device(*arrays)]
    run.on_device = on_device
    return run


class _Compiled:
    def __init__(self, f, args, donate_argnums):
        if donate_argnums and max(donate_argnums) >= len(args):
            raise ValueError("hlo.jit: donate_argnums %s, but f got %d arguments"
                             % (sorted(donate_argnums), len(args)))
        inputs, owners, trace, outs, out_spec = _trace(f, args, grad=False)
        self.captured = list(trace.captured.values())
        donate = [k for k, i in enumerate(owners) if i in donate_argnums]
        self.text, self.checks, computed = _module(inputs, trace.nodes, outs, flag=True,
                                                   donate=donate)
        # The signature fixes each target's shape and dtype, and eager's check passed them at
        # the trace: the program checks the values (targets_out_of_range), a call reads its
        # flag, and jax's C++ dispatch builds the outputs (_out_tree). Checking the targets
        # here (functional.out_of_range) and building the outputs in Python made the digits
        # MLP's jit step 76.5 us against 74.4 (the dispatch alone: 69.6; medians of 21
        # interleaved rounds, Intel Xeon family 6 model 167).
        flag = bool(self.checks)
        out_types = [(o.data.shape, o.data.dtype) for o in outs]
        self.on_device = load(self.text, [(t.data.shape, t.data.dtype) for t in inputs],
                              [((), np.bool_)] * flag + computed + out_types,
                              _out_tree(out_spec, len(outs), flag, len(computed))).on_device

    def stale(self):
        """Whether a tensor the program holds as a constant has changed since the trace: an
        in-place operation or an optimizer's step (its version), or its array replaced. (A
        write into its array through .data is not seen, as torch's version counter does not
        see it either.)"""
        for t, version, array in self.captured:
            if t._version[0] != version or t.data is not array:
                return True
        return False

    def tracked(self):
        """The tensors the program holds as constants that require grad (a model's
        parameters that f closes over): its outputs must carry a gradient to them."""
        return [t for t, _, _ in self.captured if t._requires_grad]

    def __call__(self, arrays):
        """The program's outputs as tensors; _OtherTypes (before running it) for arrays of
        other shapes or dtypes than it takes."""
        try:
            if not self.checks:
                return self.on_device(*arrays)
            out_of_range, computed, results = self.on_device(*arrays)
        except Exception as error:  # (XLA's own words name neither the argument nor the fix)
            message = str(error)
            if ("donate the same buffer twice" in message
                    or "previously donated in the same call" in message):
                raise ValueError("hlo.jit: a tensor passed twice, at least once where it is "
                                 "donated (donate_argnums): its buffer can be given up only once; "
                                 "pass a copy in the other place") from None
            raise
        # On a target out of range the outputs are dropped: the run had no other effect, but
        # for consuming donated arguments (as any failed call of jax.jit's would). The checks
        # run in eager's order, so the first that fails raises eager's error.
        if memoryview(out_of_range)[()]:
            for is_computed, k, shape in self.checks:
                target = computed[k] if is_computed else arrays[k]
                check_target(shape, target if target.__class__ is np.ndarray else host_view(target))
        return results


class _Recomputed(Function):
    """One output of a compiled call whose arguments or closed-over tensors require grad:
    the program's value, and a backward that runs f again, recorded, for the gradient (a
    program's outputs carry none: grad(jit(f)), or a backward through a jitted forward of a
    model, gave zeros). As jax.jit and torch.compile, jit differentiates through; the forward
    stays compiled (a jitted step that takes the gradient inside never runs this backward).
    `tracked` (the tensors that require grad) are the node's inputs; `args` are saved, so
    that an in-place change to one before the backward raises, as a saved tensor's does."""

    @staticmethod
    def forward(ctx, value, call, index, *tracked):
        ctx.call, ctx.index = call, index  # call: (f, its args, the tensors among them)
        ctx.save_for_backward(*call[2])
        return Tensor._wrap(value.data)

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if an argument changed in place since
        f, args, _ = ctx.call
        tracked = ctx.inputs[3:]
        create_graph = _State.enabled
        with enable_grad():
            out = flatten(f(*args))[0][ctx.index]
        grads = autograd.grad(out, tracked, grad, allow_unused=True, create_graph=create_graph)
        return (None, None, None) + tuple(grads)


def _differentiable(outs, f, args, tracked):
    """jit's outputs, each floating one a _Recomputed node's (see there)."""
    call = (f, args, [t for t in flatten(args)[0] if isinstance(t, Tensor)])
    leaves, spec = flatten(outs)
    return unflatten(spec, [
        _Recomputed.apply(o, call, i, *tracked)
        if isinstance(o, Tensor) and o.data.dtype.kind in "fc" else o
        for i, o in enumerate(leaves)])


class _OtherTypes(Exception):
    """Arrays of other shapes or dtypes than a compiled program takes."""


def _structure(tree, arrays, key, tracked):
    """Appends tree's arrays (a Tensor's data, or a jit output's device buffer), in flatten's
    order, to `arrays`, and to `key` its structure: each container's type and length (or
    keys), each other leaf's repr. With the arrays' shapes and dtypes, it selects a compiled
    program. Appends to `tracked` each tensor that requires grad."""
    if isinstance(tree, Tensor):
        # A jit output passes its device buffer (no transfer): unread, or read on the host
        # while its data is still the buffer's view.
        array = unread_buffer(tree)
        if array is None:
            if tree._requires_grad:
                tracked.append(tree)
            array = tree.data
            view = getattr(tree, "_buffer", None)
            if view is not None and array.base is view:
                array = view.obj
            else:
                array = _native(array)
        arrays.append(array)
    elif isinstance(tree, np.ndarray):
        arrays.append(_native(tree))
    elif isinstance(tree, (list, tuple)):
        key.append((type(tree), len(tree)))
        for t in tree:
            _structure(t, arrays, key, tracked)
    elif isinstance(tree, dict):
        key.append((dict, tuple(tree)))
        for k in tree:
            _structure(tree[k], arrays, key, tracked)
    else:
        key.append(repr(tree))


def jit(f, donate_argnums=()):
    """f compiled by XLA: traced and compiled once per signature (the structure of its
    arguments' containers, the values of its other arguments, the shapes and dtypes of its
    arrays), then run by XLA on each call.

    donate_argnums (an index or indices of f's arguments), as in jax.jit: the device buffers
    of those arguments' unread jit outputs (a training loop's parameters fed back) are the
    program's to reuse for its outputs of the same shapes and dtypes, saving their
    allocation: the tensors passed are unusable afterwards (reading one raises), even when
    the call raises (a class index out of range, found by the program). An array,
    or a jit output already read on the host, is copied in and never changed. The digits
    MLP's jit step took 61.3 us with its parameters donated against 65.0 (the program run
    alone; medians of 15 interleaved rounds, Intel Xeon family 6 model 167)."""
    donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
    if not all(isinstance(i, int) and i >= 0 for i in donate_argnums):
        raise TypeError("hlo.jit: donate_argnums must be non-negative ints, got %r"
                        % (donate_argnums,))
    donate_argnums = frozenset(donate_argnums)
    cache = {}  # signature -> _Compiled
    # structure -> the program its last call ran. A call first tries that program, whose C++
    # dispatch checks the arrays' shapes and dtypes anyway (in its cache lookup), and takes
    # the whole signature only if they differ: building it in Python cost 1.9 us of the
    # digits MLP's 74 us jit step (Intel Xeon family 6 model 167, 15 interleaved rounds).
    last = {}
    retraced = [0]  # traces again because a captured tensor changed (_Compiled.stale)

    def run(*args, **kwargs):
        if kwargs:
            raise TypeError("hlo.jit: keyword arguments are not taken (%s); pass them positionally, "
                            "or close over them" % ", ".join(sorted(kwargs)))
        if _State.transforms:
            # Inside vmap, jvp or another jit's trace, f runs as it is, so that the transform
            # sees its operations (the enclosing jit compiles them into its own program); its
            # program would read the whole batch, or the trace's values, as constants.
            return f(*args)
        arrays, key, tracked = [], [], []
        _structure(args, arrays, key, tracked)
        key = tuple(key)
        compiled = last.get(key)
        if compiled is not None and not (compiled.captured and compiled.stale()):
            try:
                outs = compiled(arrays)
            except _OtherTypes:
                pass
            else:
                return _with_gradients(outs, f, args, tracked, compiled)
        signature = key + tuple((a.shape, np.dtype(a.dtype)) for a in arrays)
        compiled = cache.get(signature)
        if compiled is None or compiled.captured and compiled.stale():
            if compiled is not None:
                retraced[0] += 1
                if retraced[0] == 3:
                    warnings.warn(
                        "hlo.jit(%s): traced and compiled again, a third time, because tensors it "
                        "closes over (or reads) changed since; pass them as arguments, so that one "
                        "program serves every value" % getattr(f, "__name__", f), stacklevel=2)
            compiled = cache[signature] = _Compiled(f, args, donate_argnums)
        last[key] = compiled
        return _with_gradients(compiled(arrays), f, args, tracked, compiled)
    run.compiled = cache
    return run


def _with_gradients(outs, f, args, tracked, compiled):
    """outs, differentiable where grad mode is on and a tensor f takes (`tracked`) or the
    program holds requires grad."""
    if not _State.enabled:
        return outs
    if compiled.captured:
        tracked = tracked + compiled.tracked()
    return _differentiable(outs, f, args, tracked) if tracked else outs
