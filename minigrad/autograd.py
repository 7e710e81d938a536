"""The backward pass: visit the recorded graph, each node after every node that uses its output.

Each node (a Function instance, the `grad_fn` of the one tensor it produced)
receives the sum of the gradients flowing into its output, calls its gradient
rule once, and passes one gradient per input on. As in torch's engine, nodes
run in decreasing order of creation (Function.apply numbers them): a node's
users were all made after it, so by its turn every gradient for it has
arrived. A heap of the nodes that have a gradient gives that order in the one
pass that sends the gradients, without a separate walk of the graph first.
"""

from heapq import heappop, heappush

import numpy as np

from minigrad import ops
from minigrad.function import FREED_MESSAGE
from minigrad.grad_mode import _State, tracing
from minigrad.tensor import Tensor, records_edge

_wrap = Tensor._wrap


def _nodes(roots, stop=frozenset()):
    """Every node reachable from `roots` (None entries allowed), in no particular order,
    not past the nodes in `stop` (which are included)."""
    seen = set()
    stack = [root for root in roots if root is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(value.grad_fn for value in node.inputs
                         if value.__class__ is Tensor and value.grad_fn is not None)
    return seen


def reaches_other_leaf(outputs, inputs):
    """Whether the graph behind `outputs` reaches a leaf that requires grad other than `inputs`
    (so that a gradient with respect to `inputs` can itself be differentiated through it)."""
    own = {id(t) for t in inputs}
    for node in _nodes([o.grad_fn for o in outputs]):
        for value in node.inputs:
            if (value.__class__ is Tensor and value._requires_grad and value.grad_fn is None
                    and id(value) not in own and records_edge(node, value)):
                return True
    return False


def _initial_grads(outputs, grad_outputs):
    grads = []
    for out, g in zip(outputs, grad_outputs):
        if not out._requires_grad:
            raise RuntimeError("element %d of the outputs does not require grad and has no grad_fn"
                               % len(grads))
        if g is None:
            if out.data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs; pass a "
                                   "gradient of shape %s" % (tuple(out.shape),))
            if out.data.dtype.kind == "c":
                raise RuntimeError("grad can be implicitly created only for real scalar outputs "
                                   "(as in torch); pass a gradient, or take .real of a loss")
            # (np.ones_like costs five times as much for the usual one-element loss)
            one = np.array(1, dtype=out.data.dtype)
            grads.append(_wrap(one.reshape(out.data.shape) if out.data.ndim else one))
            continue
        if not isinstance(g, Tensor):
            g = Tensor(g)
        if g.shape != out.shape and not (  # (a nested vmap's cotangents of a batched output)
                out._batch in getattr(g._batch, "ancestors", ())
                and g.data.shape[1:] == out.data.shape[1:]):
            raise RuntimeError("gradient of shape %s does not match the output's shape %s"
                               % (tuple(g.shape), tuple(out.shape)))
        if g.dtype != out.dtype:
            if (g.dtype.kind == "c") != (out.dtype.kind == "c"):  # (a cast would drop an imaginary part)
                raise RuntimeError(
                    "for complex tensors, both the gradient and the output must have the same dtype "
                    "(as in torch): gradient %d is %s, the output %s" % (len(grads), g.dtype, out.dtype))
            g = ops.Cast.apply(g, out.dtype)
        grads.append(g)
    return grads


def _run(outputs, grad_outputs, retain_graph, create_graph, capture=None, batched=False,
         since=-1):
    """Propagates; accumulates into leaves' .grad, or, with `capture` (tensors), returns
    {id(tensor): gradient} for those tensors and touches no .grad. `batched` (vjp's inputs,
    which nothing else depends on): the gradients may be batched by a vmap level on the
    stack, the graph not (vjp_fn under vmap: each rule's operations are batched over the
    cotangents, as torch.func's jacrev runs), and the pass stops at the captured tensors, as
    torch.func's does, not running on into the graph that made them (which may be freed).
    `since` (vjp's): the sequence number taken before the captured tensors were made; a node
    made earlier cannot lead to them, and is not run (a tensor f closed over from an enclosing
    transform's graph: its gradient is that transform's to take, and its nodes would run
    under levels they were not recorded for: jacfwd(grad(grad)) of a closure raised)."""
    if not batched and _State.transforms and any(level.batched for level in _State.transforms):
        raise RuntimeError("backward() and minigrad.grad inside vmap are not supported (as in "
                           "torch); use minigrad.func.grad or vjp inside vmap")
    if capture is None and tracing():
        _refuse_grad_writes()
    grads = _initial_grads(outputs, grad_outputs)
    pending = {}  # node -> the sum of the gradients its output has received so far
    ready = []  # (-sequence number, node) for each node in pending: a heap, the latest made first
    leaf_grads = {}  # id(leaf) -> gradient, when capturing
    into = leaf_grads if capture is not None else None
    captured_nodes = {t.grad_fn: t for t in capture if t.grad_fn is not None} if capture else {}
    # minigrad.grad runs only the nodes that lead to its inputs, as torch's autograd.grad: the
    # others were run, freed (a later backward through them raised) and wrote their retained
    # .grad. Under a jvp, the nodes made since that lead to no captured tensor are not run
    # either (a closure's own operations, v.tanh() of a closed-over v): a jvp outside a vmap
    # would see their rules run on the whole batch beside its per-example tangents
    # (jacfwd(grad(grad)) of such a closure raised). Elsewhere in a vjp's batched pass,
    # running them costs less than finding them.
    needed = (_reaching(outputs, capture, captured_nodes, since, stop=batched)
              if capture is not None and (not batched or any(level.forward for level in _State.transforms))
              else None)
    # ids of arrays a leaf's .grad must not take as they are: those given to leaves in this
    # pass, and the caller's own gradients (a pass-through op hands one on unchanged).
    delivered = set()
    for g in grads:  # (a loop: a comprehension is a call of its own)
        delivered.add(id(g.data))
    prev = _State.enabled
    _State.enabled = create_graph
    try:
        # The outputs receive their gradients first, through the loop that then sends each
        # node's gradients to its inputs (_initial_grads checked their shapes and dtypes).
        node, input_grads = None, grads
        sends = zip(outputs, grads)
        while True:
            for value, g in sends:
                if g is None or value.__class__ is not Tensor or not value._requires_grad:
                    continue
                got, expected = g.data, value.data
                if got.shape != expected.shape:  # (the arrays': under vmap, both batched)
                    g = _fit(node, input_grads, value, g)
                if got.dtype is not expected.dtype and got.dtype != expected.dtype:
                    # a mixed-dtype operation's gradient: its input's dtype (float32 x * a
                    # float64 y gives x a float32 gradient, as in torch)
                    g = ops.Cast.apply(g, expected.dtype)
                child = value.grad_fn
                if child is not None and (child._sequence < since or
                                          needed is not None and child not in needed):
                    continue  # (made before the captured tensors, or leading to none: `since`,
                    # `needed`)
                if child is None:
                    if node is not None and not records_edge(node, value):
                        continue  # (it did not require grad when this node was recorded)
                    _deliver(value, g, create_graph, into, delivered)
                elif child in pending:
                    pending[child] = pending[child] + g
                else:
                    pending[child] = g
                    heappush(ready, (-child._sequence, child))
            if not ready:
                break
            node = heappop(ready)[1]
            grad = pending.pop(node)
            if captured_nodes and node in captured_nodes:
                leaf_grads[id(captured_nodes[node])] = grad
                # vjp's inputs: nothing upstream of them is asked for; minigrad.grad's: only
                # what leads on to another input (torch runs no more: the node was run, and
                # freed, and a later backward through it raised)
                if batched or not _leads_on(node, needed, capture):
                    sends = ()
                    continue
            if node._freed:
                raise RuntimeError(FREED_MESSAGE)
            if node._retains is not None and not batched:  # (torch.func's leave .grad alone)
                retained = node._retains()
                if retained is not None:  # its output's .grad (retain_grad)
                    if tracing():
                        _refuse_grad_writes()
                    _retain(retained, grad, create_graph)
            input_grads = node.backward(node, grad)
            if input_grads.__class__ is not tuple:
                input_grads = (input_grads,)
            inputs = node.inputs
            if len(input_grads) != len(inputs):
                input_grads = _pad(node, input_grads)
            if not retain_graph:
                node._free()
            sends = zip(inputs, input_grads)
    finally:
        _State.enabled = prev
    return leaf_grads


def _refuse_grad_writes():
    """Under hlo.jit's trace, .grad would be written once, at the trace, with copies and sums
    made outside the program: a later call's gradients were the first call's."""
    raise RuntimeError("hlo.jit: backward() (and retain_grad) inside a jitted function writes "
                       ".grad, which the program cannot do on each call; return the gradients "
                       "instead: minigrad.func.grad (or minigrad.grad) inside f, or call backward "
                       "on jit's outputs")


def _reaching(outputs, capture, captured_nodes, since, stop):
    """The nodes made since `since` from which the backward reaches a captured tensor (a walk
    from the outputs, without recursion, as graphs can be deeper than Python's limit). With
    `stop`, the walk stops at captured nodes, as _run's batched pass does; without, it goes on
    through them to the captured tensors behind them (minigrad.grad's pass)."""
    leaves = {id(t) for t in capture if t.grad_fn is None}
    needed, done = set(), set()
    todo = [o.grad_fn for o in outputs
            if o.__class__ is Tensor and o.grad_fn is not None and o.grad_fn._sequence >= since]
    while todo:
        node = todo[-1]
        if node in done:
            todo.pop()
            continue
        children = () if stop and node in captured_nodes else [
            v.grad_fn for v in node.inputs if v.__class__ is Tensor and v.grad_fn is not None
            and v.grad_fn._sequence >= since]
        later = [c for c in children if c not in done]
        if later:
            todo.extend(later)
            continue
        todo.pop()
        done.add(node)
        if (node in captured_nodes or any(c in needed for c in children)
                or any(v.__class__ is Tensor and id(v) in leaves and records_edge(node, v)
                       for v in node.inputs)):
            needed.add(node)
    return needed


def _leads_on(node, needed, capture):
    """Whether a captured node's inputs lead on to another captured tensor (minigrad.grad's
    inputs, one behind another)."""
    for v in node.inputs:
        if v.__class__ is Tensor and (v.grad_fn in needed if v.grad_fn is not None
                                      else any(v is t for t in capture)):
            return True
    return False


def _fit(node, input_grads, value, grad):
    """A gradient rule's result of another shape than its input `value` (torch's
    validate_outputs): one the input broadcasts to is summed back to the input's shape; any
    other is the rule's bug."""
    got, shape = grad.data.shape, value.data.shape
    if grad._batch is not value._batch and grad._batch in _State.transforms and (
            got[1:] == shape or value._batch in getattr(grad._batch, "ancestors", ())
            and got[1:] == shape[1:]):
        return grad  # a batch of gradients for a value outside the vmap (_run's `batched`)
    if not ops.broadcasts_to(shape, got):
        # (found here, not counted in the engine's loop, which runs for every gradient)
        index = next(i for i, (v, g) in enumerate(zip(node.inputs, input_grads))
                     if v is value and g is grad)
        raise RuntimeError("Function %sBackward returned an invalid gradient at index %d - got %s "
                           "but expected shape compatible with %s"
                           % (type(node).__name__, index, list(got), list(shape)))
    return ops.SumTo.apply(grad, shape)


def _pad(node, input_grads):
    """Gradients for trailing non-tensor arguments (dims, shapes) may be left out."""
    missing = node.inputs[len(input_grads):]
    if len(input_grads) > len(node.inputs) or any(_needs_grad(v) for v in missing):
        raise RuntimeError("%s.backward returned %d gradients for %d inputs"
                           % (type(node).__name__, len(input_grads), len(node.inputs)))
    return input_grads + (None,) * len(missing)


def _needs_grad(value):
    return value.__class__ is Tensor and value.requires_grad


def _deliver(leaf, grad, create_graph, into, delivered):
    if not create_graph and grad._requires_grad:  # only a caller-given gradient can be
        grad = grad.detach()
    if into is not None:
        key = id(leaf)
        into[key] = into[key] + grad if key in into else grad
    elif leaf._grad is None:
        # Each leaf gets an array of its own, so updating one .grad in place cannot change
        # another: views, and arrays already handed to another leaf, are copied (under
        # create_graph by a recorded product: two leaves of (a + b) * 1 shared one tensor, and
        # a later backward added into both, twice).
        array = grad.data
        if array.base is not None or id(array) in delivered:
            grad = grad * 1 if create_graph else _wrap(array.copy())
        delivered.add(id(grad.data))
        leaf._grad = grad
    else:
        # As torch's AccumulateGrad: into the .grad tensor itself, in place, unless the sum
        # is to be differentiated (create_graph), so that a reference to x.grad taken between
        # two backward passes (gradient accumulation, clipping, logging) sees the sum. Not an
        # array given in this pass (`delivered`): a node may have sent it to another input too
        # (Add's (g, g)), whose gradient, still pending, the sum would change (review).
        current = leaf._grad
        array = current.data
        if (create_graph or not array.flags.writeable or array.shape != grad.data.shape
                or array.dtype != grad.data.dtype or id(array) in delivered):
            leaf._grad = current + grad
        else:
            np.add(array, grad.data, out=array)
            current._version[0] += 1


def _retain(tensor, grad, create_graph):
    """A retained non-leaf's .grad (Tensor.retain_grad), as torch's: always a copy of its own,
    and a sum made out of place (a reference taken between two backward passes keeps its
    value; a leaf's .grad is added into in place)."""
    grad = grad * 1 if create_graph else _wrap(grad.data.copy())
    current = tensor._grad
    tensor._grad = grad if current is None else current + grad


def backward(tensor, gradient=None, retain_graph=None, create_graph=False):
    """Tensor.backward: accumulates into .grad of the leaves that require grad."""
    if retain_graph is None:
        retain_graph = create_graph
    _run([tensor], [gradient], retain_graph, create_graph)


def vjp_grads(outputs, inputs, grad_outputs, create_graph, since):
    """minigrad.func.vjp's gradients: grad's, the graph kept, None for an unused input, and
    allowed under a vmap level that batches the cotangents (_run's `batched`); `since`: as
    _run's."""
    found = _run(outputs, grad_outputs, True, create_graph, capture=inputs, batched=True,
                 since=since)
    return [found.get(id(t)) for t in inputs]


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, without touching any .grad.

    Like torch.autograd.grad: returns a tuple with one gradient per input;
    create_graph=True makes them differentiable (for higher-order gradients).
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise RuntimeError("got %d grad_outputs for %d outputs" % (len(grad_outputs), len(outputs)))
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("one of the inputs does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    found = _run(outputs, grad_outputs, retain_graph, create_graph, capture=inputs)
    result = []
    for i, t in enumerate(inputs):
        g = found.get(id(t))
        if g is None and not allow_unused:
            raise RuntimeError("input %d was not used to compute the outputs; pass "
                               "allow_unused=True to get None for it" % i)
        result.append(g)
    return tuple(result)
