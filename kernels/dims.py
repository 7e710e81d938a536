"""The softmax dim as torch and NumPy count it, for the Python bindings (ops.py's vmap rules,
tf_ops.py); kernels/dims.h is the C++ bindings' twin, with the same message."""


def normalize(dim, rank, op, word="dim", error=IndexError):
    """`dim` of a tensor of rank `rank` as an index in [0, max(rank, 1)): negative counts from
    the end and a 0-d tensor has one dim. Raises `error` naming the op and the valid range."""
    n = max(rank, 1)
    if not -n <= dim < n:
        raise error("%s: %s %d is out of range for %d dimensions (valid: %d to %d)"
                    % (op, word, dim, rank, -n, n - 1))
    return dim % n
