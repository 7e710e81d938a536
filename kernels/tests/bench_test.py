"""`bazel run //kernels:bench` end to end at one tiny size: every pass and peer timed in each
round, the summary, the plot and its JSON (with glibc's malloc settings or the bench's); bad
arguments refused with a usage message."""

import json
import os
import subprocess
import sys

from kernels import bench

ARGS = ["--isa", "baseline", "--threads", "1", "--dtypes", "float32", "--sizes", "8x16",
        "--rounds", "3", "--round-seconds", "0.0005"]


def run(*args):
    return subprocess.run([sys.executable, bench.__file__, *args], capture_output=True, text=True,
                          timeout=600)


def test_one_size_times_every_pass_and_peer_and_writes_the_figures(tmp_path):
    out = run(*ARGS, "--plot", str(tmp_path / "b.png"))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = [line.split()[:4] for line in out.stdout.splitlines()]
    assert ["baseline", "1", "float32", "8x16"] in summary  # the size's line
    assert (tmp_path / "b.png").stat().st_size > 0
    records = json.loads((tmp_path / "b.json").read_text())["records"]
    timed = {(r["pass"], r["impl"]): r["rounds"] for r in records}
    # baseline has no torch.compile peer (inductor's C++ needs a vector level)
    assert set(timed) == {(p, i) for p in bench.PASSES for i in bench.IMPLS if i != "torch.compile"}
    assert all(len(rounds) == 3 and min(rounds) > 0 for rounds in timed.values())
    assert {r["isa"] for r in records} == {"baseline"} and {r["aten"] for r in records} == {"DEFAULT"}
    assert json.loads((tmp_path / "b.json").read_text())["malloc"].startswith("heap only")


def test_system_malloc_keeps_glibcs_defaults_and_says_so(tmp_path):
    # Even where the caller's environment had the bench's own settings (a shell that ran it).
    out = subprocess.run([sys.executable, bench.__file__, *ARGS, "--system-malloc", "--plot",
                          str(tmp_path / "b.png")], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **bench._MALLOC_ENV))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "glibc's default malloc" in out.stdout.splitlines()[0]
    figures = json.loads((tmp_path / "b.json").read_text())
    assert figures["malloc"] == "glibc's default"
    assert figures["thp"] in (None, "always", "madvise", "never")


def test_bad_sizes_and_threads_are_usage_errors():
    for bad, says in ((["--sizes", "8by16"], "--sizes"), (["--sizes", "0x16"], "--sizes"),
                      (["--threads", "0"], "--threads"),
                      (["--device", "cuda", "--system-malloc"], "--system-malloc is for")):
        out = run(*bad)
        assert out.returncode == 2 and "usage:" in out.stderr and says in out.stderr, bad
