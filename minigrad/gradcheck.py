"""gradcheck: analytical gradients against central finite differences, in float64.

Every input that requires grad is perturbed element by element (+-eps); each
column of the numerical Jacobian is compared with the vector-Jacobian products
that backward computes, within atol + rtol * |numerical| (torch's defaults).
As in torch: a NaN on either side is a mismatch; only the outputs that require
grad are checked, and where none does, every output's finite differences must
be zero (so a function that cuts its output from the graph fails); a complex
output is checked as its real and imaginary parts; inputs may be
non-contiguous views (they are perturbed in place, element by element), not
overlapping ones (a stride-0 view: one perturbation would move several
elements); raise_exception=False returns False instead of raising.
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


def _parts(out):
    """The vector-Jacobian directions of an output's elements: 1, and for a complex output
    also 1j (torch's: the vjp of 1j is the gradient of the imaginary part)."""
    return (1.0, 1j) if out.data.dtype.kind == "c" else (1.0,)


def _analytical(out, wrt):
    """One vector-Jacobian product per output element (and part): rows of d(out)/d(input)."""
    size, parts = out.data.size, _parts(out)
    analytical = [np.zeros((size * len(parts), t.data.size)) for t in wrt]
    if not out.requires_grad:  # cut from the graph: its gradient is zero
        return analytical
    for p, part in enumerate(parts):
        for k in range(size):
            direction = np.zeros(size, out.data.dtype)
            direction[k] = part
            grads = grad(out, wrt, Tensor(direction.reshape(out.shape)), retain_graph=True,
                         allow_unused=True)
            for j, g in enumerate(grads):
                if g is not None:
                    analytical[j][p * size + k] = g.data.ravel()
    return analytical


def _numerical(fn, inputs, o_index, t, eps, rows):
    numerical = np.zeros((rows, t.data.size))
    for e, index in enumerate(np.ndindex(t.shape)):  # C order, as ravel's
        saved = t.data[index]
        with no_grad():
            # (copies: an output that views the input would move with it)
            t.data[index] = saved + eps
            plus = _outputs(fn, inputs)[o_index].data.ravel().copy()
            t.data[index] = saved - eps
            minus = _outputs(fn, inputs)[o_index].data.ravel().copy()
        t.data[index] = saved
        column = (plus - minus) / (2 * eps)
        numerical[:, e] = (np.concatenate([column.real, column.imag])
                           if column.dtype.kind == "c" else column)
    return numerical


def _check_input(k, t):
    if t.dtype.kind == "c":
        raise ValueError("gradcheck: input %d is complex, which it does not check; pass its real "
                         "and imaginary parts as two float64 inputs" % k)
    if t.dtype != np.float64:
        raise ValueError("gradcheck needs float64 inputs (finite differences in lower "
                         "precision are too coarse), got %s" % t.dtype)
    if any(stride == 0 and n > 1 for stride, n in zip(t.data.strides, t.data.shape)):
        raise ValueError("gradcheck: input %d has a dimension with stride 0 (an expanded view), "
                         "so one perturbation would move several elements; pass a copy" % k)
    if not t.data.flags.writeable:
        raise ValueError("gradcheck perturbs each input in place, and input %d's array is "
                         "read-only; pass a writable copy" % k)


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """True if fn's gradients match finite differences; otherwise raises GradcheckError, or
    returns False with raise_exception=False."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    wrt = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad")
    for k, t in enumerate(inputs):
        if any(t is w for w in wrt):
            _check_input(k, t)
    try:
        _compare(fn, inputs, wrt, eps, atol, rtol)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def _compare(fn, inputs, wrt, eps, atol, rtol):
    outputs = _outputs(fn, inputs)
    # As torch's: the outputs that require grad; where none does, all of them, whose finite
    # differences must then be zero (a function that cuts its output from the graph fails).
    checked = [k for k, out in enumerate(outputs) if out.requires_grad] or range(len(outputs))
    for o_index in checked:
        out = outputs[o_index]
        analytical = _analytical(out, wrt)
        for j, t in enumerate(wrt):
            numerical = _numerical(fn, inputs, o_index, t, eps, analytical[j].shape[0])
            # Written as "not within", so that a NaN on either side is a mismatch.
            bad = ~(np.abs(analytical[j] - numerical) <= atol + rtol * np.abs(numerical))
            if bad.any():
                k, e = np.argwhere(bad)[0]
                part, k = divmod(k, out.data.size)
                # (by identity: inputs.index would compare tensors with ==, elementwise)
                position = next(i for i, x in enumerate(inputs) if x is t)
                raise GradcheckError(
                    "Jacobian mismatch for output %d%s with respect to input %d at (output element "
                    "%d, input element %d): analytical %.10g, numerical %.10g (%d of %d entries "
                    "differ)" % (o_index, " (its imaginary part)" if part else "", position, k, e,
                                 analytical[j][part * out.data.size + k, e],
                                 numerical[part * out.data.size + k, e], bad.sum(), bad.size))
