"""`cuda_library`: CUDA sources compiled by nvcc, built only under --config=cuda.

    cuda_library(
        name = "saxpy",
        srcs = ["saxpy.cu"],
        hdrs = ["saxpy.h"],
    )

(tools/tests/BUILD.bazel; kernels' softmax_cuda is another).

The workspace's policy on top of rules_cuda's cuda_library (an offline
stand-in under third_party/ for Bazel 4.2.3, the real ruleset under bzlmod):
optimised device code, and the target is incompatible, so `bazel build //...`
skips it, unless `--config=cuda` enables CUDA. The CPU build then needs no
toolkit; the CUDA build needs nvcc but no GPU. A cuda_library is a cc_library:
cc_test, pybind_extension, torch_op_library and tf_op_library depend on it
like on any other. GPU architectures: --@rules_cuda//cuda:archs='sm_80;sm_90'
(default sm_90, the H100/H200).
"""

load("@rules_cuda//cuda:defs.bzl", _cuda_library = "cuda_library", "requires_cuda")
load("//tools:copts.bzl", "CUDA_COPTS")

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """nvcc-compiled `srcs` (.cu) as a cc_library named `name`, skipped without CUDA.

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers the sources and dependants include.
      deps: cc targets the sources include or link.
      copts: extra nvcc flags.
      **kwargs: passed on (visibility, tags...).
    """
    _cuda_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = CUDA_COPTS + copts,
        target_compatible_with = requires_cuda(),
        **kwargs
    )
