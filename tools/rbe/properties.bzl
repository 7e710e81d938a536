"""Execution properties: the one place that writes their names and values.

The scheduler runs an action only on a worker offering every property the
action asks for. Three readers take them from here:
  - Starlark: tools/rbe/defs.bzl loads this file (the rbe platform's and the
    GPU tests' exec_properties);
  - the bots: tools/rbe/properties.py parses it (what each bot offers);
  - BuildGrid's config: tools/rbe_local.sh writes properties.py's keys into
    buildgrid.yml.in's match-property-keys.
Bazel 4.2 cannot read a data file at load time and has no json module, so the
data is this .bzl file, which Python reads with ast.literal_eval: keep it to
assignments of literals (tools/rbe/properties_test.py checks it).
"""

# Every action, every worker: Linux, so the C++ toolchain is the worker's gcc, as here.
OS_FAMILY = {"OSFamily": "Linux"}

# Every action asks for the workspace's pinned Python environment by its folder's
# name (py311-<the lock's digest>), which py_test and the compilers' Python
# headers come from; a worker offers the name of each environment its image holds.
PYTHON_ENV_KEY = "python-env"

# GPU-only tests ask for it (defs.bzl's GPU_EXEC_PROPERTIES); only workers where
# nvidia-smi lists a GPU offer it.
GPU = {"gpu": "nvidia"}
