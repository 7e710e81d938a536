"""Execution properties for remote executors, as Bazel's exec_properties.

The names and values are written in tools/rbe/properties.bzl, which the bots
and BuildGrid's config read too; this file only puts them together.
"""

load("@python_env//:flags.bzl", "PYTHON_ENV_NAME")
load(":properties.bzl", "GPU", "OS_FAMILY", "PYTHON_ENV_KEY")

# Every action: a Linux worker whose image holds the workspace's Python environment.
RBE_EXEC_PROPERTIES = dict(OS_FAMILY.items() + [(PYTHON_ENV_KEY, PYTHON_ENV_NAME)])

# Added by GPU-only tests (exec_properties): only GPU workers take them.
GPU_EXEC_PROPERTIES = GPU
