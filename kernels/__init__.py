"""warp_softmax: one C++/CUDA softmax kernel (softmax.h) served to PyTorch, NumPy and TensorFlow.

    import kernels
    kernels.warp_softmax(x, dim=-1)                   # the PyTorch operator (ops.py)
    kernels.warp_softmax_masked(x, mask, scale=0.125) # softmax(x * 0.125 + mask), one pass
    kernels.warp_softmax_masked_(x, mask, 0.125)      # the same written over x
    kernels.cpu_isa()                                 # its CPU kernels' level: avx512_bf16, avx512, avx2, baseline
    from kernels import warp_softmax_numpy            # the pybind11 module over ndarrays
    from kernels import tf_ops                        # the TensorFlow op (tf_ops.py)

Each binding loads only on first use, so `import kernels` pulls in no framework.
"""

import importlib
import pkgutil

# Outside Bazel the compiled modules sit in bazel-bin/kernels (tools/python puts
# bazel-bin on sys.path): let this package find them there too.
__path__ = pkgutil.extend_path(__path__, __name__)

_LAZY = {name: "kernels.ops" for name in
         ("warp_softmax", "warp_log_softmax", "warp_softmax_masked", "warp_softmax_masked_",
          "warp_softmax_backward", "warp_log_softmax_backward",
          "cpu_isa", "set_cpu_isa", "cpu_isas_supported")}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this hook (an import_module call: ~6 us)
        return value
    if name == "warp_softmax_numpy":  # `from kernels import` it found no built module: say how
        from kernels.library import find
        find(name + ".so")  # (raises ImportError naming the ./bazelw build command)
    raise AttributeError("module 'kernels' has no attribute %r" % name)


__all__ = sorted(_LAZY)
