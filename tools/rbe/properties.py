"""The execution properties of tools/rbe/properties.bzl, for Python: what a
bot offers the scheduler, and the keys BuildGrid's scheduler matches on.

    python3 tools/rbe/properties.py keys     # OSFamily, python-env, gpu
"""

import ast
import os
import sys

BZL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "properties.bzl")


def load(path=BZL):
    """The file's assignments as {NAME: value}; anything but literals is an error."""
    with open(path) as f:
        module = ast.parse(f.read(), path)
    values = {}
    for node in module.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            raise ValueError("%s:%d: only NAME = <literal> assignments may appear here"
                             % (path, node.lineno))
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def match_keys(values=None):
    """Every property key, in the order the scheduler's config lists them."""
    values = values or load()
    return list(values["OS_FAMILY"]) + [values["PYTHON_ENV_KEY"]] + list(values["GPU"])


def offer(python_envs, has_gpu, values=None):
    """The (key, value) pairs a worker offers: its OS, the name of each Python
    environment folder its image holds, and the GPU when it has one."""
    values = values or load()
    pairs = list(values["OS_FAMILY"].items())
    pairs += [(values["PYTHON_ENV_KEY"], os.path.basename(p.rstrip("/"))) for p in python_envs]
    if has_gpu:
        pairs += list(values["GPU"].items())
    return pairs


if __name__ == "__main__":
    if sys.argv[1:] != ["keys"]:
        sys.exit("usage: %s keys   (prints the scheduler's match-property-keys)" % sys.argv[0])
    print(", ".join(match_keys()))
