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
    assert len(deps) > 5, "genquery gave %d labels: the query did not run" % len(deps)
    return sorted(name for name, label in FRAMEWORKS.items()
                  if any(d == label or d.startswith(label + "/") for d in deps))


# The inspector uses TensorFlow as a pip package only; the models load the TF op (C++, TF's headers).
@pytest.mark.parametrize("package, allowed", [("minigrad", []), ("tf_inspector", []),
                                              ("tf_inspector_models", ["tensorflow"])])
def test_package_pulls_in_only_its_frameworks(package, allowed):
    assert frameworks_in(package) == allowed


def test_the_inspector_is_usable_without_the_models_and_kernels():
    deps = labels("tf_inspector")
    assert not [d for d in deps if d.startswith(("//tf_inspector/models", "//kernels"))]
    assert "//tf_inspector:tf_inspector" in deps
