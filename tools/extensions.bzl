"""Module extensions for bzlmod (MODULE.bazel): the repository rules WORKSPACE.bazel calls."""

load("//tools:local_cuda.bzl", _local_cuda_rule = "local_cuda")
load("//tools:python_env.bzl", _python_env_rule = "python_env")

def _python_env_impl(_module_ctx):
    _python_env_rule(name = "python_env")

python_env = module_extension(
    implementation = _python_env_impl,
    doc = "Creates @python_env from the environment ./bazelw made (PYTHON_ENV).",
)

def _local_cuda_impl(_module_ctx):
    _local_cuda_rule(name = "local_cuda")

local_cuda = module_extension(
    implementation = _local_cuda_impl,
    doc = "Creates @local_cuda, the CUDA toolkit of the pinned environment's NVIDIA wheels.",
)
