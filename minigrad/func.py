"""minigrad.func: torch.func's transforms, with their names and semantics.

    from minigrad import func
    per_example = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, x, y)

grad, vjp: reverse mode (the recorded graph, autograd.py). jvp: forward mode,
a tangent pushed through every operation by its rule (tangents.py). vmap: each
operation rewritten over a batch dimension by its rule (batching.py). jacrev
and jacfwd take one vjp / jvp per basis vector; hessian is jacfwd(jacrev).
Transforms compose: jvp and vmap are levels on a stack that Function.apply
hands each operation to (innermost first); grad inside vmap copies unbatched
inputs per example and differentiates the batched graph in one backward pass. A vmap
inside a vmap folds its batch into the enclosing one's dim 0 (levels.FoldLevel), so the
one-level batching rules serve any depth, and jacrev, jacfwd and hessian, which vmap over
their basis, take one pass inside vmap too.
Arguments may be tensors, arrays, numbers, or lists/tuples/dicts of them (vmap's in_dims
entries too: one dim for a whole argument, or a tree of dims shaped as it); so may vmap's
outputs and an aux, while vjp's, jvp's and the Jacobians' outputs are trees of tensors (as
torch.func's: a number has no derivative to give). jacrev and
jacfwd nest Jacobians as torch.func: the output's structure, then a tuple over argnums (if a
tuple), then each argument's structure, one Jacobian per (output, input) pair of tensors.
Limits: indexing with batched index tensors inside vmap is refused.
"""

import numbers

import numpy as np

from minigrad import autograd, batching, function, ops
from minigrad.batching import repeated
from minigrad.grad_mode import _State, enable_grad, no_grad, tracing
from minigrad.levels import (BatchLevel, FoldLevel, ForwardLevel, Suspend, as_tensor, enclosing,
                             flatten, innermost_batch, mark_batched, promote, release, structure,
                             suspended, unflatten)
from minigrad.nn import functional_call
from minigrad.tensor import Tensor

__all__ = ["functional_call", "grad", "hessian", "jacfwd", "jacrev", "jvp", "vjp", "vmap"]


# -- reverse mode ---------------------------------------------------------------------------

def _fresh_input(value, level, connect, copy_shared=False):
    """A new differentiable input standing for `value` (connected to it, if it is tracked and
    `connect`). Under vmap, an unbatched value gets one copy per example, so that each
    example's gradient is its own: a recorded copy if something outside differentiates
    through it (grad, or a jvp outside the vmap), else a stride-0 view. One whose only
    tangents are jvps' inside a vmap that batches nothing but tangents (hessian's jvp over a
    basis) stays unbatched, as in torch.func: f then sees its values, and vjp_fn runs the
    backward pass under the vmap; were f's output batched after all (a tangent used as a
    value too), vjp would run f again with copies (`copy_shared`)."""
    t = as_tensor(value)
    if t.dtype.kind not in "fc":
        raise TypeError("grad/vjp: differentiated inputs must be floating point or complex, got %s"
                        % t.dtype)
    if t.requires_grad and not connect:  # under an outer no_grad: see vjp
        t = t.detach()
    if level is not None and t._batch is not level:
        stack = _State.transforms
        at = stack.index(level)
        inside = any(inner.tangent(t) is not None for inner in stack[at + 1:])
        if (t.requires_grad or any(outer.tangent(t) is not None for outer in stack[:at])
                or inside and (copy_shared or not _batches_only_tangents(level, stack[at + 1:])
                               or enclosing(level))):  # (nested in a vmap whose
            # batched tensors f may use: copied, so that the backward runs on the whole batch)
            t = promote(t, level)
        elif t._batch in enclosing(level):  # batched by an enclosing vmap
            t = level.lift(t)
        elif not inside:
            if tracing():
                # (a jit around the vmap, as one is never inside: the copy in operations that
                # its trace records, so that the program computes it from its input; a bare
                # view was compiled in as a constant, and later calls' parameters were not read)
                with suspended(stack[at:]):
                    t = repeated(t, level.size)
            else:
                t = Tensor._wrap(np.broadcast_to(t.data, (level.size,) + t.shape))
            t._batch = level
    # An operation, so that the levels outside (tangents, batch, trace) see x as t.
    x = ops.Alias.apply(t)
    if not t.requires_grad:
        x.requires_grad = True  # a leaf of its own
    return x


def _batches_only_tangents(level, inner):
    """Whether every tensor vmap `level` batched is a tangent given to a jvp inside it (jacfwd
    over a basis; Hessian-vector products at one point): then f's values are unbatched, and a
    shared input's gradient comes out unbatched (its tangents batched), as torch.func's."""
    given = {k for jvp_level in inner for k in getattr(jvp_level, "given", ())}
    return all(k in given for k in level.inputs)


def vjp(f, *primals, has_aux=False):
    """(f(*primals), vjp_fn[, aux]); vjp_fn(cotangents) gives one gradient per primal."""
    return _vjp(f, primals, has_aux, check_outputs=True)


def _vjp(f, primals, has_aux, check_outputs):
    level = innermost_batch()
    flat = [flatten(p) for p in primals]
    # A transform ignores a no_grad around it (as torch.func): f is differentiated anyway, and
    # only the graph outside is cut. A no_grad inside f is respected.
    connect = _State.enabled

    def run(copy_shared):
        # (the graph vjp_fn runs starts after this number: autograd._run's `since`)
        since[0] = next(function._sequence)
        with enable_grad():
            inputs = [[_fresh_input(x, level, connect, copy_shared) for x in leaves]
                      for leaves, _ in flat]
            out = f(*[unflatten(spec, xs) for (_, spec), xs in zip(flat, inputs)])
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ValueError("vjp(has_aux=True): f must return (output, aux)")
            return inputs, out[0], out[1]
        return inputs, out, None

    since = [0]
    inputs, out, aux = run(False)
    shared = level is not None and any(x._batch is not level for xs in inputs for x in xs)
    if shared and any(isinstance(o, Tensor) and o._batch is level for o in flatten(out)[0]):
        # A shared input's per-example gradients through a batched graph need its copies.
        inputs, out, aux = run(True)
        shared = False
    out_leaves, out_spec = flatten(out)
    if check_outputs:  # (an integer output has no cotangent space; torch.func's grad asks not)
        _only_tensors("vjp(f, *primals)", out_leaves)
        for o in out_leaves:
            if o.dtype.kind not in "fc":
                raise RuntimeError("vjp(f, ...): All outputs of f must be floating-point or "
                                   "complex Tensors, got a Tensor of dtype %s" % o.dtype)
    all_inputs = [x for xs in inputs for x in xs]
    tracked = connect and any(as_tensor(x).requires_grad for leaves, _ in flat for x in leaves)
    closed_over = []  # whether f's graph reaches tensors from outside (decided once, if asked)

    def differentiable():
        """Whether the gradients must be recorded: something outside can differentiate them,
        through the primals or through tensors f closed over (an enclosing grad's inputs,
        parameters). Decided at call time, as the grad mode then is what counts."""
        if not _State.enabled:
            return False
        if tracked:
            return True
        if not closed_over:
            closed_over.append(autograd.reaches_other_leaf(
                [o for o in out_leaves if isinstance(o, Tensor) and o.requires_grad], all_inputs))
        return closed_over[0]

    def vjp_fn(cotangents):
        ct_leaves, ct_spec = flatten(cotangents)
        if ct_spec != out_spec:  # (a dict's cotangents in another key order went by position)
            raise RuntimeError(
                "vjp_fn: expected the cotangents to have the structure of f's outputs (as in "
                "torch.func): outputs %s, cotangents %s" % (
                    structure(out_spec, len(out_leaves)), structure(ct_spec, len(ct_leaves))))
        cts = []
        for o, c in zip(out_leaves, ct_leaves):
            c = as_tensor(c)
            batch = o._batch  # (level's, or an enclosing vmap's)
            if (level is not None and batch is not None and c._batch is not batch
                    and batch in (level,) + enclosing(level)
                    and batch not in enclosing(c)):  # (a nested vmap's
                # cotangents: lifted where they meet the graph, FoldLevel)
                if c._batch in batch.ancestors:  # (only an enclosing vmap batches it)
                    c = batch.lift(c)
                else:
                    with Suspend(batch):
                        c = repeated(c, batch.size)
                    c._batch = batch
            if c.shape != o.shape:
                raise ValueError("vjp_fn: cotangent of shape %s for an output of shape %s"
                                 % (c.shape, o.shape))
            cts.append(c)
        live = [(o, c) for o, c in zip(out_leaves, cts) if o.requires_grad]
        # recorded where something outside can differentiate the gradients: through f's
        # inputs or closures, or through the cotangents (grad of c -> vjp_fn(c * c) was 0)
        record = bool(live) and (differentiable() or _State.enabled
                                 and any(c.requires_grad for _, c in live))
        grads = [None] * len(all_inputs)
        outer = innermost_batch()
        if outer is not None and outer is not level:  # vmap of vjp_fn: the backward batched
            strange = _unbatchable([o for o, _ in live], all_inputs)
            if strange:
                raise NotImplementedError(
                    "vjp_fn under vmap: %s has no batching rule, and its backward may compute on "
                    "arrays whose batch dim vmap would not see; call vjp_fn per cotangent"
                    % strange.__name__)
        if live and not shared and level is not None and level in enclosing(outer):  # (jacrev)
            grads = _folded_vjp(live, all_inputs, level, outer, record, since[0])
        elif live:
            # The batched graph is differentiated as it is (on the whole batch of its level and
            # the enclosing ones); an unbatched one (with a shared input) under the vmap, each
            # rule batched over the tangents (_fresh_input).
            with suspended(() if shared or level is None else (level,) + level.ancestors):
                grads = autograd.vjp_grads([o for o, _ in live], all_inputs,
                                           [c for _, c in live], record, since[0])
        result, k = [], 0
        for (leaves, spec), xs in zip(flat, inputs):
            gs = []
            for x in xs:
                g = grads[k] if grads[k] is not None else Tensor._wrap(np.zeros_like(x.data))
                if x._batch is not None and x._batch not in enclosing(g):
                    mark_batched(g, x._batch)  # (else batched by a vmap of vjp_fn: jacrev)
                gs.append(g)
                k += 1
            result.append(unflatten(spec, gs))
        return tuple(result)

    if not differentiable():  # as torch.func: f's graph is not handed out with its results
        out = _unrecorded(out)
    if has_aux and not (_State.enabled and (tracked or autograd.reaches_other_leaf(
            [a for a in flatten(aux)[0] if isinstance(a, Tensor) and a.requires_grad],
            all_inputs))):  # (decided apart: aux may reach what the outputs do not)
        aux = _unrecorded(aux)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _only_tensors(call, leaves):
    """As torch.func: vjp's and jvp's outputs are tensors (a number or an array has no
    derivative to give; jacrev and jacfwd failed on one with an AttributeError)."""
    for o in leaves:
        if not isinstance(o, Tensor):
            raise RuntimeError("%s: expected f(*primals) to return only tensors, got unsupported "
                               "type %s" % (call, type(o)))


def _folded_vjp(live, inputs, level, fold, create_graph, since):
    """vjp_fn of a graph batched by vmap `level`, under a vmap nested in it (`fold`, jacrev's
    over the basis inside a vmap): the graph is differentiated as it is, on its whole batch,
    with every vmap level off the stack, and the k cotangents of each example become a batch
    of k over that: fold's rows (b * k + j) as (j, b), batched by a level of their own, so
    that each rule runs once over both batches (as for an unbatched graph, jacrev outside
    vmap). The gradients go back to fold's rows."""
    k = fold.rows_per(level)
    inner = BatchLevel(k)
    with suspended([lv for lv in _State.transforms if lv.batched]):
        cts = []
        for _, c in live:
            if c._batch is fold:  # (level.size * k, ...) -> (k, level.size, ...)
                rest = c.data.shape[1:]
                c = ops.Permute.apply(ops.Reshape.apply(c, (level.size, k) + rest),
                                      (1, 0) + tuple(range(2, len(rest) + 2)))
                c._batch = inner
            cts.append(c)
        with inner:
            grads = autograd.vjp_grads([o for o, _ in live], inputs, cts, create_graph, since)
        folded = []
        for g in grads:
            if g is not None:
                if g._batch is not inner:  # (the same for every cotangent)
                    g = repeated(g, k)
                rest = g.data.shape[2:]
                swap = (1, 0) + tuple(range(2, len(rest) + 2))
                g = ops.Reshape.apply(ops.Permute.apply(g, swap), (fold.size,) + rest)
                mark_batched(g, fold)
            folded.append(g)
    return folded


def _unbatchable(outputs, inputs):
    """A Function between `inputs` and `outputs` without a batching rule, if any: a backward
    pass batched over a vmap of cotangents is right when every node's backward is written in
    operations with batching rules, as minigrad's are; a Function of the user's may compute
    its gradient on arrays, whose batch dim the vmap would not see (every row got the summed
    gradient)."""
    nodes = autograd._nodes([o.grad_fn for o in outputs], {x.grad_fn for x in inputs})
    return next((type(node) for node in nodes if type(node) not in batching.RULES), None)


def _unrecorded(tree):
    """tree's tensors cut from the recorded graph (requires_grad False), still seen by the
    levels outside (tangents, batch, trace): an Alias under no_grad, not a detach."""
    leaves, spec = flatten(tree)
    with no_grad():
        return unflatten(spec, [ops.Alias.apply(x) if isinstance(x, Tensor) and x.requires_grad
                                else x for x in leaves])


def _select(args, argnums, kwargs):
    if not isinstance(argnums, (int, tuple)) or (
            isinstance(argnums, tuple) and not all(isinstance(i, int) for i in argnums)):
        raise RuntimeError("argnums must be int or Tuple[int, ...], got: %s" % type(argnums))
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    for i in nums:
        if not -len(args) <= i < len(args):
            raise ValueError("argnums %r is out of range for %d positional arguments" % (argnums, len(args)))
    if len({i % len(args) for i in nums}) < len(nums):  # (as torch.func: one gradient each)
        raise RuntimeError("argnums elements must be unique, got %r" % (argnums,))

    def call_with(f):
        def g(*diff):
            full = list(args)
            for i, d in zip(nums, diff):
                full[i] = d
            return f(*full, **kwargs)  # (keyword arguments passed through, as torch.func's)
        return g
    return nums, call_with


def grad(f, argnums=0, has_aux=False):
    """The gradient of f's scalar output with respect to the argument(s) `argnums`."""
    def wrapped(*args, **kwargs):
        nums, call_with = _select(args, argnums, kwargs)
        result = _vjp(call_with(f), [args[i] for i in nums], has_aux, check_outputs=False)
        out = result[0]
        batched = isinstance(out, Tensor) and out._batch is not None and out._batch is innermost_batch()
        if not isinstance(out, Tensor) or out.data.ndim - batched != 0:
            raise RuntimeError("grad: f must return a scalar (0-d) Tensor, got %s; use vjp or "
                               "jacrev for other outputs" % (
                                   "shape %s" % (out.shape,) if isinstance(out, Tensor)
                                   else type(out).__name__))
        if out.dtype.kind == "c":  # (its gradient would be the real part's: torch refuses)
            raise RuntimeError("grad can be implicitly created only for real scalar outputs but "
                               "got %s; return .real (or .imag) of f's output" % out.dtype)
        ones = Tensor._wrap(np.ones(out.data.shape, out.dtype))
        ones._batch = out._batch
        grads = result[1](ones)
        grads = grads[0] if isinstance(argnums, int) else grads
        return (grads, result[2]) if has_aux else grads
    return wrapped


# -- forward mode ---------------------------------------------------------------------------

def jvp(f, primals, tangents, has_aux=False):
    """(f(*primals), the directional derivative along `tangents`[, aux]), in forward mode."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise TypeError("jvp: primals and tangents must be tuples (as in torch.func)")
    p_leaves, spec = flatten(primals)
    t_leaves, t_spec = flatten(tangents)
    if t_spec != spec:  # (a dict's tangents in another key order went by position)
        raise RuntimeError("jvp: expected the tangents to have the structure of the primals (as "
                           "in torch.func): primals %s, tangents %s"
                           % (structure(spec, len(p_leaves)), structure(t_spec, len(t_leaves))))
    level, batch = ForwardLevel(), innermost_batch()
    inputs = []
    for p, t in zip(p_leaves, t_leaves):
        x, t = ops.Alias.apply(as_tensor(p)), as_tensor(t)
        for what, v in (("primals", x), ("tangents", t)):  # (integers have no tangent space)
            if v.dtype.kind not in "fc":
                raise TypeError("jvp: %s must be floating point or complex, got %s"
                                % (what, v.dtype))
        if t.shape != x.shape:
            raise ValueError("jvp: tangent of shape %s for a primal of shape %s" % (t.shape, x.shape))
        if batch is not None and x._batch is batch and t._batch is not batch:
            # Under vmap, a shared tangent of a batched primal gets the batch dim too, so that a
            # backward pass run on the whole batch can carry it: by operations, which the
            # transforms outside see (a stride-0 view made apart cut it from them: grad of a
            # function whose vmap(jvp) took its input as the tangent was 0); one only an
            # enclosing vmap batches is repeated per row (promote lifts it).
            t = promote(t, batch)
        level.tangents[id(x)] = (x, t)
        level.given.append(id(t))
        inputs.append(x)
    with level:
        out = f(*unflatten(spec, inputs))
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError("jvp(has_aux=True): f must return (output, aux)")
        out, aux = out
    out_leaves, out_spec = flatten(out)
    _only_tensors("jvp(f, primals, tangents)", out_leaves)
    outs = []
    for o in out_leaves:
        t = level.tangent(o)
        if t is None:  # no dependence on the primals: a zero tangent, batched as o is
            t = Tensor._wrap(np.zeros_like(o.data))
            t._batch = o._batch
        outs.append(t)
    result = (out, unflatten(out_spec, outs))
    return result + (aux,) if has_aux else result


# -- Jacobians ------------------------------------------------------------------------------

def _trees(args, nums):
    """Each differentiated argument as (its tensors, its structure): a tensor, or a tree of
    them (as torch.func)."""
    trees = []
    for i in nums:
        leaves, spec = flatten(args[i])
        trees.append(([as_tensor(x) for x in leaves], spec))
    return trees


def _real(name, what, tensors):
    """Jacobians are of real functions, as torch.func's (a complex one's is not a matrix of
    numbers: jacrev would give the conjugate of jacfwd's)."""
    for k, t in enumerate(tensors):
        if t.dtype.kind == "c":
            raise RuntimeError("%s: Expected all %s to be real but received complex tensor at "
                               "flattened input idx: %d" % (name, what, k))


def _assemble(blocks, shape, dtype):
    """zeros(shape, dtype) with each (index, tensor) of `blocks` placed at its index, recorded
    so that transforms outside see through it."""
    total = None
    for index, part in blocks:
        placed = ops.IndexAdd.apply(part, index, shape)
        total = placed if total is None else total + placed
    return total if total is not None else Tensor._wrap(np.zeros(shape, dtype))


def _stack(parts, shape, dtype, last=False):
    """Tensors of one shape stacked into `shape` along a new first (or last) dim."""
    return _assemble([((Ellipsis, k) if last else (k,), part) for k, part in enumerate(parts)],
                     shape, dtype)


def _per_output(out_spec, jacs, argnums):
    """jacs[j][m] (argument j, output m; each a tree shaped as argument j) as torch.func gives
    them: f's output structure, and in each place one argument's Jacobians, or a tuple of them
    over a tuple of argnums."""
    count = len(jacs[0])
    return unflatten(out_spec, [jacs[0][m] if isinstance(argnums, int)
                                else tuple(by_arg[m] for by_arg in jacs) for m in range(count)])


def jacrev(f, argnums=0, has_aux=False, chunk_size=None):
    """The Jacobian of f by reverse mode: shape output.shape + input.shape for each output and
    each tensor differentiated, in the structures of f's output and of its arguments (with
    has_aux, f returns (output, aux) and this (Jacobian, aux)).
    Outside vmap, f runs once and every row comes from one backward pass, vmap of vjp_fn over
    the basis of cotangents (as torch.func's): 2x a pass per row for the bench's 10 rows,
    42x for a 160x320 Jacobian (Intel Xeon family 6 model 167).
    Inside vmap the same (a nested vmap). chunk_size, as torch.func's, bounds the rows per
    pass (memory: each pass holds the backward's work once per row); 1 is a pass per row, as
    where a Function of the user's has no batching rule."""
    if chunk_size is not None and (not isinstance(chunk_size, numbers.Integral)
                                   or isinstance(chunk_size, bool) or chunk_size < 1):
        raise ValueError("jacrev: chunk_size must be None or a positive int, got %r"
                         % (chunk_size,))

    def wrapped(*args, **kwargs):
        nums, call_with = _select(args, argnums, kwargs)
        trees = _trees(args, nums)
        _real("jacrev", "inputs", [x for xs, _ in trees for x in xs])
        primals = [unflatten(spec, xs) for xs, spec in trees]
        out, fn, *aux = vjp(call_with(f), *primals, has_aux=has_aux)
        outs, out_spec = flatten(out)
        _real("jacrev", "outputs", outs)
        sizes = [o.numel() for o in outs]  # inside vmap: one example's
        starts = [int(k) for k in np.cumsum([0] + sizes)]
        total = starts[-1]
        basis = []  # cotangent row k: 1 at the k-th of all the outputs' elements, in order
        for o, start, size in zip(outs, starts, sizes):
            basis.append(np.eye(total, size, -start, dtype=o.dtype).reshape((total,) + o.shape))
        rows = None
        if total > 1 and chunk_size != 1:
            row = lambda *cts: fn(unflatten(out_spec, list(cts)))
            step = int(chunk_size or total)
            try:
                chunks = [(k, [flatten(g)[0] for g in vmap(row)(*[Tensor._wrap(b[k:k + step])
                                                                    for b in basis])])
                          for k in range(0, total, step)]
            except NotImplementedError:  # a Function of the user's: a pass per row
                pass
            else:
                rows = [[chunks[0][1][j][l] if step >= total else
                         _assemble([((slice(k, k + step),), c[j][l]) for k, c in chunks],
                                   (total,) + x.shape, x.dtype)
                         for l, x in enumerate(xs)] for j, (xs, _) in enumerate(trees)]
        if rows is None:
            each = [[flatten(g)[0] for g in fn(unflatten(out_spec, [Tensor._wrap(b[k])
                                                                    for b in basis]))]
                    for k in range(total)]
            rows = [[_stack([r[j][l] for r in each], (total,) + x.shape, x.dtype)
                     for l, x in enumerate(xs)] for j, (xs, _) in enumerate(trees)]
        jacs = [[unflatten(spec, [ops.Reshape.apply(rows[j][l][start:start + size],
                                                    o.shape + x.shape)
                                  for l, x in enumerate(xs)])
                 for o, start, size in zip(outs, starts, sizes)]
                for j, (xs, spec) in enumerate(trees)]
        jac = _per_output(out_spec, jacs, argnums)
        return (jac, aux[0]) if has_aux else jac
    return wrapped


def jacfwd(f, argnums=0, has_aux=False):
    """The Jacobian of f by forward mode: shape output.shape + input.shape for each output and
    each tensor differentiated, in the structures of f's output and of its arguments (with
    has_aux, f returns (output, aux) and this (Jacobian, aux)).
    Every column comes from one forward pass, vmap of jvp over the basis of tangents of all
    the input tensors, the primal unbatched (as torch.func's), inside vmap too (a nested
    vmap); a forward pass per column where a Function of the user's has no batching rule."""
    def wrapped(*args, **kwargs):
        nums, call_with = _select(args, argnums, kwargs)
        trees = _trees(args, nums)
        leaves = [x for xs, _ in trees for x in xs]
        _real("jacfwd", "inputs", leaves)
        primals = tuple(unflatten(spec, xs) for xs, spec in trees)
        found = {}  # f's output structure and count, and its aux

        def push(tangents):
            """f's output, its tangents along `tangents` (one per input tensor, in order) and,
            with has_aux, its aux."""
            it = iter(tangents)
            return jvp(call_with(f), primals,
                       tuple(unflatten(spec, [next(it) for _ in xs]) for xs, spec in trees),
                       has_aux=has_aux)

        def found_outputs(out, aux):
            found["aux"] = aux[0] if aux else None
            outs, found["spec"] = flatten(out)
            found["count"] = len(outs)
            return outs

        def one_pass():
            """Each input tensor's columns, stacked last for each output (output.shape +
            (x.numel(),)), from one vmap of jvp over a block basis; None where vmap raises
            NotImplementedError (a Function without a batching rule)."""
            sizes = [x.numel() for x in leaves]
            starts = [int(k) for k in np.cumsum([0] + sizes)]
            bases = []
            for x, start, n in zip(leaves, starts, sizes):  # rows start.. of the identity
                b = np.eye(starts[-1], n, -start, dtype=x.dtype)
                bases.append(Tensor._wrap(b.reshape((starts[-1],) + x.shape)))
            try:
                cols, *aux = vmap(lambda *ts: push(ts)[1:],
                                  out_dims=(-1, 0) if has_aux else (-1,))(*bases)
            except NotImplementedError:
                return None
            except ValueError:
                # Inside a vmap, a tangent rule run by a backward node can still meet rows of
                # two nested batches (vmap(grad(jacfwd(grad(...))))) of closures over the
                # enclosing inputs: a pass per column, as before nested vmap, instead.
                if innermost_batch() is None:
                    raise
                return None
            if aux:  # the same for every tangent: the first's
                parts, spec = flatten(aux[0])
                aux = [unflatten(spec, [a[0] if isinstance(a, Tensor) else a for a in parts])]
            cols, found["spec"] = flatten(cols)
            found["aux"], found["count"] = (aux[0] if aux else None), len(cols)
            if len(leaves) == 1:
                return [cols]
            return [[c[..., start:start + n] for c in cols] for start, n in zip(starts, sizes)]

        def columns(k, x):
            """The same for input tensor k alone, a forward pass per column."""
            n = x.numel()  # inside vmap: one example's
            each = []
            for e in np.eye(n, dtype=x.dtype) if n else np.zeros((1, n), x.dtype):  # (empty
                # x: one pass for the output's shapes)
                out, tangent, *aux = push([Tensor._wrap(e.reshape(x.shape)) if i == k else
                                           Tensor._wrap(np.zeros(y.shape, y.dtype))
                                           for i, y in enumerate(leaves)])
                each.append(flatten(tangent)[0])
            outs = found_outputs(out, aux)
            return [_stack([c[m] for c in each[:n]], o.shape + (n,),
                           np.result_type(o.dtype, x.dtype), last=True)
                    for m, o in enumerate(outs)]

        by_leaf = None
        if sum(x.numel() for x in leaves) > 1:
            by_leaf = one_pass()
        if by_leaf is None:
            by_leaf = [columns(k, x) for k, x in enumerate(leaves)]
        if "spec" not in found:  # no tensor to differentiate: f's output structure, once
            out, _, *aux = push([])
            found_outputs(out, aux)
        _real("jacfwd", "outputs", [c for cols in by_leaf for c in cols])
        jacs, k = [], 0
        for xs, spec in trees:
            cols, k = by_leaf[k:k + len(xs)], k + len(xs)
            jacs.append([unflatten(spec, [ops.Reshape.apply(c[m], c[m].shape[:-1] + x.shape)
                                          for x, c in zip(xs, cols)])
                         for m in range(found["count"])])
        jac = _per_output(found["spec"], jacs, argnums)
        return (jac, found["aux"]) if has_aux else jac
    return wrapped


def hessian(f, argnums=0):
    """The Hessian of a scalar f: forward mode over reverse mode (as torch.func.hessian)."""
    return jacfwd(jacrev(f, argnums), argnums)


# -- vmap -----------------------------------------------------------------------------------

def _per_arg(dims, args, name):
    if isinstance(dims, (int, type(None))):
        return (dims,) * len(args)
    if len(dims) != len(args):
        raise ValueError("vmap: %s has %d entries for %d arguments" % (name, len(dims), len(args)))
    return tuple(dims)


def _per_leaf(dims, leaves, spec):
    """An argument's in_dims entry, one per tensor in it: one dim for all, or a tree of dims
    shaped as the argument (as torch.func)."""
    if isinstance(dims, (int, type(None))):
        return [dims] * len(leaves)
    dim_leaves, dim_spec = flatten(dims)
    if dim_spec != spec:
        raise ValueError("vmap: in_dims entry %r does not match the structure of its argument"
                         % (dims,))
    return dim_leaves


def vmap(f, in_dims=0, out_dims=0):
    """f over a batch: in_dims says which dim of each argument is the batch (None: shared; a
    tree of dims for an argument that is a tree), out_dims where the batch goes in each output.
    Each operation runs once over the batch. Keyword arguments reach f as they are, unbatched
    (as torch.func's)."""
    def wrapped(*args, **kwargs):
        outer = innermost_batch()
        size, prepared = None, []
        for arg, dims in zip(args, _per_arg(in_dims, args, "in_dims")):
            leaves, spec = flatten(arg)
            dims = _per_leaf(dims, leaves, spec)
            moved = []
            for leaf, dim in zip(leaves, dims):
                if dim is None:
                    moved.append(leaf)
                else:
                    t = as_tensor(leaf)
                    if not -t.ndim <= dim < t.ndim:
                        raise ValueError("vmap: in_dim %d is out of range for an argument of shape "
                                         "%s" % (dim, t.shape))
                    d = dim % t.ndim
                    if size is not None and t.shape[d] != size:
                        raise ValueError("vmap: in_dims give batch sizes %d and %d; every batched "
                                         "argument needs the same size" % (size, t.shape[d]))
                    size = t.shape[d]
                    order = (d,) + tuple(k for k in range(t.ndim) if k != d)
                    moved.append(ops.Permute.apply(t, order) if d else ops.Alias.apply(t))
            prepared.append((moved, spec, dims))
        if size is None:
            raise ValueError("vmap: at least one argument must be batched (in_dims all None)")
        level = BatchLevel(size) if outer is None else FoldLevel(outer, size)
        for leaves, _, dims in prepared:
            for k, (t, dim) in enumerate(zip(leaves, dims)):
                if dim is not None:
                    if outer is None:
                        t._batch = level
                    else:
                        leaves[k] = t = level.adopt(t)
                    level.inputs.append(id(t))
        with level:
            out = f(*[unflatten(spec, leaves) for leaves, spec, _ in prepared], **kwargs)
        out_leaves, spec = flatten(out)
        if isinstance(out_dims, (int, type(None))):
            dims = [out_dims] * len(out_leaves)
        else:  # one entry per output, for all the tensors in it
            tops = out if isinstance(out, tuple) else (out,)
            dims = [d for top, d in zip(tops, _per_arg(out_dims, tops, "out_dims"))
                    for _ in flatten(top)[0]]
        results = []
        for o, dim in zip(out_leaves, dims):
            if not isinstance(o, Tensor):
                results.append(o)
                continue
            if o._batch is not level:
                if dim is None:
                    results.append(o)
                    continue
                o = repeated(o, size)
            elif dim is None:
                raise ValueError("vmap: out_dims is None for an output that depends on the batch")
            elif outer is not None:  # (outer's batch, this one, ...): the enclosing level's again
                o = level.unfold(o)
            if not -o.ndim <= dim < o.ndim:
                raise IndexError("vmap: out_dim %d is out of range for an output of %d dims with "
                                 "the batch (valid: %d to %d)" % (dim, o.ndim, -o.ndim, o.ndim - 1))
            d = dim % o.ndim
            order = tuple(range(1, d + 1)) + (0,) + tuple(range(d + 1, o.ndim))
            o = ops.Permute.apply(o, order) if d else ops.Alias.apply(o)
            release(o, level)
            results.append(o)
        return unflatten(spec, results)
    return wrapped
