"""CUDA: the local toolkit as a repository (`local_cuda`) and `cuda_library` (nvcc).

rules_cuda cannot be fetched here, so this is the small part of it the
workspace needs. CUDA targets build only under `--config=cuda` (which sets
//tools/config:cuda); in the default CPU configuration they are incompatible
and `bazel build //...` skips them, so no toolkit is needed there.

    cuda_library(
        name = "saxpy",
        srcs = ["saxpy.cu"],
        hdrs = ["saxpy.h"],
    )

A cuda_library is a cc_library: cc_binary, cc_test, pybind_extension,
torch_op_library and tf_op_library targets depend on it as on any other.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_cuda//:cuda.bzl", "CUDA_FOUND", "CUDA_ROOT", "NVCC")
load("//tools:build_settings.bzl", "BuildSettingInfo")

# Targets using this are skipped unless --config=cuda.
CUDA_ONLY = select({
    "//tools/config:cuda_enabled": [],
    "//conditions:default": ["//tools/config:incompatible"],
})

def _gencode_flags(archs):
    versions = [a.strip() for a in archs.split(",") if a.strip()]
    flags = ["-gencode=arch=compute_%s,code=sm_%s" % (v, v) for v in versions]
    if versions:
        # PTX of the newest arch lets the driver JIT for GPUs newer than the list.
        flags.append("-gencode=arch=compute_%s,code=compute_%s" % (versions[-1], versions[-1]))
    return flags

def _cuda_objects_impl(ctx):
    if not CUDA_FOUND:
        fail("no CUDA toolkit was found (looked at $CUDA_PATH and /usr/local/cuda): install " +
             "it or set CUDA_PATH, or build without --config=cuda")
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation = cc_common.merge_cc_infos(
        cc_infos = [dep[CcInfo] for dep in ctx.attr.deps],
    ).compilation_context
    include_dirs = depset(transitive = [
        compilation.includes,
        compilation.quote_includes,
        compilation.system_includes,
    ]).to_list()
    archs = ctx.attr._archs[BuildSettingInfo].value
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, src.basename.rsplit(".", 1)[0]))
        args = ctx.actions.args()
        args.add_all(["-x", "cu", "-c", src.path, "-o", obj.path])
        args.add_all(["-O3", "-std=c++17", "-ccbin", cc_toolchain.compiler_executable])
        args.add_all(["-Xcompiler", "-fPIC", "--expt-relaxed-constexpr"])
        args.add_all(_gencode_flags(archs))
        # nvcc rejects -iquote and -isystem lists; every include dir becomes -I.
        args.add_all(["."] + include_dirs, format_each = "-I%s")
        args.add_all(compilation.defines, format_each = "-D%s")
        args.add_all(ctx.attr.copts)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src] + ctx.files.hdrs, transitive = [compilation.headers]),
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc" % src.short_path,
            env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": CUDA_ROOT},
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "_archs": attr.label(default = "//tools/config:cuda_archs"),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources nvcc compiles (position-independent, for .so use).

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers the sources and dependants include.
      deps: cc targets the .cu files include or link against.
      copts: extra nvcc flags.
      **kwargs: passed to the cc_library (visibility, tags, alwayslink...).
    """
    _cuda_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
        target_compatible_with = CUDA_ONLY,
        visibility = ["//visibility:private"],
        tags = kwargs.get("tags", []),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = CUDA_ONLY,
        **kwargs
    )
