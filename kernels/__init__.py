"""warp_softmax: one C++/CUDA softmax kernel (softmax.h) served to PyTorch, NumPy and TensorFlow.

    import kernels
    kernels.warp_softmax(x, dim=-1)

The PyTorch operator is registered on import (ops.py).
"""

from kernels.ops import warp_log_softmax, warp_softmax

__all__ = ["warp_log_softmax", "warp_softmax"]
