"""gradcheck: analytical gradients against central finite differences, in float64.

Every input that requires grad is perturbed element by element (+-eps); each
column of the numerical Jacobian is compared with the vector-Jacobian products
that backward computes, within atol + rtol * |numerical| (torch's defaults).
As in torch: a NaN on either side is a mismatch, an output cut from the graph
counts as a zero gradient (so a function that cuts it fails), and inputs may
be non-contiguous views (they are perturbed in place, element by element).
"""

import numpy as np

from minigrad.autograd import grad
from minigrad.grad_mode import no_grad
from minigrad.tensor import Tensor


class GradcheckError(RuntimeError):
    """Raised when analytical and numerical gradients disagree."""


def _outputs(fn, inputs):
    out = fn(*inputs)
    return (out,) if isinstance(out, Tensor) else tuple(out)


def _analytical(out, wrt):
    """One vector-Jacobian product per output element: rows of d(out)/d(input)."""
    analytical = [np.zeros((out.data.size, t.data.size)) for t in wrt]
    if not out.requires_grad:  # cut from the graph: its gradient is zero
        return analytical
    for k in range(out.data.size):
        direction = np.zeros(out.data.size)
        direction[k] = 1.0
        grads = grad(out, wrt, Tensor(direction.reshape(out.shape)), retain_graph=True,
                     allow_unused=True)
        for j, g in enumerate(grads):
            if g is not None:
                analytical[j][k] = g.data.ravel()
    return analytical


def _numerical(fn, inputs, o_index, t, eps, rows):
    numerical = np.zeros((rows, t.data.size))
    for e, index in enumerate(np.ndindex(t.shape)):  # C order, as ravel's
        saved = t.data[index]
        with no_grad():
            t.data[index] = saved + eps
            plus = _outputs(fn, inputs)[o_index].data.ravel()
            t.data[index] = saved - eps
            minus = _outputs(fn, inputs)[o_index].data.ravel()
        t.data[index] = saved
        numerical[:, e] = (plus - minus) / (2 * eps)
    return numerical


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """True if fn's gradients match finite differences; raises GradcheckError otherwise."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    wrt = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad")
    for t in wrt:
        if t.dtype != np.float64:
            raise ValueError("gradcheck needs float64 inputs (finite differences in lower "
                             "precision are too coarse), got %s" % t.dtype)
    outputs = _outputs(fn, inputs)
    for o_index, out in enumerate(outputs):
        analytical = _analytical(out, wrt)
        for j, t in enumerate(wrt):
            numerical = _numerical(fn, inputs, o_index, t, eps, out.data.size)
            # Written as "not within", so that a NaN on either side is a mismatch.
            bad = ~(np.abs(analytical[j] - numerical) <= atol + rtol * np.abs(numerical))
            if bad.any():
                k, e = np.argwhere(bad)[0]
                # (by identity: inputs.index would compare tensors with ==, elementwise)
                position = next(i for i, x in enumerate(inputs) if x is t)
                raise GradcheckError(
                    "Jacobian mismatch for output %d with respect to input %d at (output element "
                    "%d, input element %d): analytical %.10g, numerical %.10g (%d of %d entries "
                    "differ)" % (o_index, position, k, e, analytical[j][k, e],
                                 numerical[k, e], bad.sum(), bad.size))
    return True
