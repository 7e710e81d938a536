"""tools/rbe/properties.bzl is the one place that writes the execution
properties: Python reads it as Starlark does, what a bot offers matches what
the platform asks for, and no other file of the executor spells a name."""

import os
import re
import subprocess
import sys

import pytest

import properties

HERE = os.path.dirname(os.path.abspath(properties.__file__))


def test_reads_the_literals():
    values = properties.load()
    assert set(values) == {"OS_FAMILY", "PYTHON_ENV_KEY", "GPU"}
    assert properties.match_keys() == list(values["OS_FAMILY"]) + [values["PYTHON_ENV_KEY"]] \
        + list(values["GPU"])


def test_anything_but_literals_is_refused(tmp_path):
    bzl = tmp_path / "bad.bzl"
    bzl.write_text('load(":x.bzl", "Y")\nGPU = Y\n')
    with pytest.raises(ValueError, match="only NAME = <literal>"):
        properties.load(str(bzl))
    bzl.write_text("GPU = {'gpu': NAME}\n")
    with pytest.raises(ValueError):
        properties.load(str(bzl))


def test_a_worker_offers_what_the_platform_asks_for():
    values = properties.load()
    # defs.bzl's RBE_EXEC_PROPERTIES: OS_FAMILY plus PYTHON_ENV_KEY = the env's folder name.
    asked = dict(values["OS_FAMILY"], **{values["PYTHON_ENV_KEY"]: "py311-0123456789abcdef"})
    offered = dict(properties.offer(["/cache/python-env/py311-0123456789abcdef/"], has_gpu=False))
    assert offered == asked
    with_gpu = dict(properties.offer(["/cache/python-env/py311-0123456789abcdef"], has_gpu=True))
    assert with_gpu == dict(asked, **values["GPU"])


def test_keys_command_fills_buildgrid_config():
    keys = subprocess.run([sys.executable, properties.__file__, "keys"], check=True,
                          capture_output=True, text=True).stdout.strip()
    template = open(os.path.join(HERE, "buildgrid.yml.in")).read()
    rendered = template.replace("@PROPERTY_KEYS@", keys)
    listed = re.search(r"match-property-keys: \[(.*)\]", rendered).group(1)
    assert listed.split(", ") == properties.match_keys()


@pytest.mark.parametrize("name", ["defs.bzl", "BUILD.bazel", "buildgrid.yml.in", "worker.py",
                                  "bot.py", "action.py", "sandbox.py", "blob_cache.py",
                                  "../rbe_local.sh"])
def test_no_other_file_spells_a_property(name):
    text = open(os.path.join(HERE, name)).read()
    values = properties.load()
    words = list(values["OS_FAMILY"]) + list(values["GPU"]) + list(values["GPU"].values())
    spelled = [w for w in words if re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(w), text)]
    spelled += re.findall(r"[\"'\[]%s[\"',\]]" % re.escape(values["PYTHON_ENV_KEY"]), text)
    assert not spelled, "%s writes %s: take it from properties.bzl" % (name, spelled)
