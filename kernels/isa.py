"""Which instruction-set level the CPU kernels run, for each binding's library.

warp_softmax.so (torch), warp_softmax_numpy.so and warp_softmax_tf.so each hold
the CPU kernels built for every x86-64 level ("avx512_bf16", "avx512", "avx2",
"baseline") and their own choice among them: the best this CPU supports, or
the one the environment variable WARP_SOFTMAX_ISA names (read on first use). This reads
and switches that choice through the C functions each library exports
(softmax_cpu.cc), so one helper serves all three bindings.
"""

import ctypes

LEVELS = ("avx512_bf16", "avx512", "avx2", "baseline")  # best first


class CpuIsa:
    """The level choice of one loaded library, by its path."""

    def __init__(self, path):
        # The framework has loaded the library already: dlopen returns that same copy.
        lib = ctypes.CDLL(path)
        self._current = lib.warp_softmax_cpu_isa
        self._current.restype = ctypes.c_char_p
        self._current.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self._set = lib.warp_softmax_set_cpu_isa
        self._set.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self._supported = lib.warp_softmax_cpu_isas_supported
        self._supported.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def current(self):
        """The level in use; RuntimeError if WARP_SOFTMAX_ISA names one this CPU lacks."""
        error = ctypes.create_string_buffer(512)
        name = self._current(error, len(error))
        if name is None:
            raise RuntimeError(error.value.decode())
        return name.decode()

    def supported(self):
        """The levels this CPU supports, best first: a tuple drawn from LEVELS."""
        out = ctypes.create_string_buffer(128)
        self._supported(out, len(out))
        return tuple(out.value.decode().split(", "))

    def set(self, level):
        """Runs `level`'s kernels from now on; ValueError if unknown or unsupported here."""
        if not isinstance(level, str):
            raise TypeError("the level must be a str, one of %s, got %r" % (", ".join(LEVELS), level))
        error = ctypes.create_string_buffer(512)
        if self._set(level.encode(), error, len(error)):
            raise ValueError(error.value.decode())
