"""Each package depends on the narrowest targets that serve it (the labels come from genquery)."""

import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The Python env's cc targets for each framework's headers and libraries.
FRAMEWORKS = {"torch": "@python_env//:torch", "tensorflow": "@python_env//:tensorflow"}


def labels(package):
    with open(os.path.join(HERE, package + "_deps")) as f:
        return {line.strip() for line in f if line.strip()}


def frameworks_in(package):
    deps = labels(package)
    assert len(deps) > 10, "genquery gave %d labels: the query did not run" % len(deps)
    return sorted(name for name, label in FRAMEWORKS.items()
                  if any(d == label or d.startswith(label + "/") for d in deps))


@pytest.mark.parametrize("package, allowed", [("minigrad", []), ("tf_inspector", ["tensorflow"])])
def test_package_pulls_in_only_its_frameworks(package, allowed):
    assert frameworks_in(package) == allowed
