"""`tf_op_library`: a shared library of TensorFlow custom ops.

    tf_op_library(
        name = "warp_softmax_tf",
        srcs = ["tf_op.cc"],
        deps = [":softmax_cpu"],
    )

(kernels/BUILD.bazel) builds `warp_softmax_tf.so`, which `tf.load_op_library(path)` loads. Compiled
with the flags `tf.sysconfig.get_compile_flags()` gives for the pinned
TensorFlow (C++17, its ABI and Eigen alignment defines) and linked against its
libtensorflow_framework.so.2.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary")
load("//tools:copts.bzl", "TF_COPTS")

def tf_op_library(name, srcs, deps = [], copts = [], **kwargs):
    """Builds `<name>.so` against the environment's TensorFlow.

    Args:
      name: the library's name, without `.so`.
      srcs: C++ sources with REGISTER_OP / REGISTER_KERNEL_BUILDER.
      deps: cc targets it links (kernel cores).
      copts: extra compiler flags.
      **kwargs: passed to cc_binary (visibility, tags, target_compatible_with).
    """
    cc_binary(
        name = name + ".so",
        srcs = srcs,
        copts = TF_COPTS + copts,
        linkshared = True,
        deps = deps + ["@python_env//:tensorflow"],
        **kwargs
    )
