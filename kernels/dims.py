"""A dim as torch and NumPy count it, for the workspace's Python (ops.py's vmap rules and fake
kernel, tf_ops.py, minigrad's ops and functional); kernels/dims.h is the C++ bindings' twin."""


def normalize(dim, rank, op, word="dim", error=IndexError, shape=None):
    """`dim` of a tensor of rank `rank` as an index in [0, max(rank, 1)): negative counts from
    the end and a 0-d tensor has one dim. Raises `error` naming the op, the tensor (its shape
    when given) and the valid range."""
    n = max(rank, 1)
    if not -n <= dim < n:
        tensor = "a tensor of shape %s" % (tuple(shape),) if shape is not None else "%d dimensions" % rank
        raise error("%s: %s %d is out of range for %s (valid: %d to %d)" % (op, word, dim, tensor, -n, n - 1))
    return dim % n
