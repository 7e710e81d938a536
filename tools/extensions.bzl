"""Module extensions for bzlmod (MODULE.bazel): the repository rules WORKSPACE.bazel calls."""

load("//tools:python_env.bzl", _python_env_rule = "python_env")

def _python_env_impl(_module_ctx):
    _python_env_rule(name = "python_env")

python_env = module_extension(
    implementation = _python_env_impl,
    doc = "Creates @python_env from the environment ./bazelw made (PYTHON_ENV).",
)
