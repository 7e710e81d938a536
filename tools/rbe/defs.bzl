"""Execution properties for remote executors: the one place that names them.

The scheduler (tools/rbe/buildgrid.yml.in, or a hosted service's pool) runs an
action only on a worker offering every property the action asks for:

  OSFamily    Linux: the C++ toolchain is the worker's gcc, as here.
  python-env  the executor image must hold the workspace's pinned Python
              environment (its folder name carries the lock's digest), which
              py_test and the compilers' Python headers come from.
  gpu         nvidia: only GPU workers take these (GPU_EXEC_PROPERTIES, which
              GPU-only tests add with exec_properties).
"""

load("@python_env//:flags.bzl", "PYTHON_ENV_NAME")

RBE_EXEC_PROPERTIES = {
    "OSFamily": "Linux",
    "python-env": PYTHON_ENV_NAME,
}

GPU_EXEC_PROPERTIES = {"gpu": "nvidia"}
