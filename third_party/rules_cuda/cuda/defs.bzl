"""Offline stand-in for rules_cuda: `cuda_library` (nvcc) and `requires_cuda`.

rules_cuda cannot be fetched here; MODULE.bazel uses the real one under
bzlmod. This implements the part of its public API the workspace uses, with
the toolkit from @local_cuda (the repository name rules_cuda uses too), which
//tools:local_cuda.bzl fills from NVIDIA's pinned wheels, never from the host:

    cuda_library(name, srcs, hdrs, deps, copts, ...)  # a cc_library of nvcc objects
    requires_cuda()  # target_compatible_with: skipped unless --@rules_cuda//cuda:enable
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_cuda//:cuda.bzl", "CUDA_ERROR", "CUDA_FOUND", "CUDA_ROOT", "NVCC")
load("//cuda:build_settings.bzl", "BuildSettingInfo")

def requires_cuda():
    """For target_compatible_with: the target builds only when CUDA is enabled."""
    return select({
        "@rules_cuda//cuda:is_enabled": [],
        "//conditions:default": ["@rules_cuda//cuda:incompatible"],
    })

def _gencode_flags(archs):
    versions = [a.strip()[len("sm_"):] for a in archs.split(";") if a.strip()]
    for v in versions:
        if not v.isdigit():
            fail("--@rules_cuda//cuda:archs takes a ';'-separated list like 'sm_80;sm_90' " +
                 "(the subset of rules_cuda's syntax this stand-in reads), got '%s'" % archs)
    flags = ["-gencode=arch=compute_%s,code=sm_%s" % (v, v) for v in versions]
    if versions:
        # PTX of the newest arch lets the driver JIT for GPUs newer than the list.
        flags.append("-gencode=arch=compute_%s,code=compute_%s" % (versions[-1], versions[-1]))
    return flags

def _cuda_objects_impl(ctx):
    if not CUDA_FOUND:
        fail("no CUDA toolkit for --config=cuda: " + CUDA_ERROR)
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation = cc_common.merge_cc_infos(
        cc_infos = [dep[CcInfo] for dep in ctx.attr.deps],
    ).compilation_context
    include_dirs = depset(transitive = [
        compilation.includes,
        compilation.quote_includes,
        compilation.system_includes,
    ]).to_list()
    gencode = _gencode_flags(ctx.attr._archs[BuildSettingInfo].value)
    objects = []
    for src in ctx.files.srcs:
        stem = src.basename.rsplit(".", 1)[0]
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add_all(["-x", "cu", "-c", src.path, "-o", obj.path])
        # Language standard, optimisation and -fPIC come with copts (the
        # workspace keeps every flag in tools/copts.bzl).
        args.add_all(["-ccbin", cc_toolchain.compiler_executable])
        args.add_all(gencode)
        # nvcc rejects -iquote; every include dir becomes -I.
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
        "_archs": attr.label(default = "//cuda:archs"),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library of position-independent objects that nvcc compiles from `srcs` (.cu).

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers the sources and dependants include.
      deps: cc targets the sources include or link.
      copts: extra nvcc flags.
      **kwargs: passed to the cc_library (visibility, tags, target_compatible_with...).
    """
    _cuda_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
        target_compatible_with = kwargs.get("target_compatible_with"),
        tags = kwargs.get("tags"),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        **kwargs
    )
