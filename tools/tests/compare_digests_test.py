"""tools/reproducible/compare_digests.sh: two builds count as reproducible only when they wrote the
same files, enough of them, with the same digests (before, comparing zero files passed)."""

import os
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "reproducible", "compare_digests.sh")
A, B, C = "a" * 64, "b" * 64, "c" * 64


def compare(tmp_path, first, second, minimum):
    paths = []
    for name, lines in (("first", first), ("second", second)):
        path = tmp_path / name
        if lines is not None:
            path.write_text("".join("%s  ./%s\n" % (digest, f) for f, digest in lines))
        paths.append(str(path))
    result = subprocess.run(["bash", SCRIPT] + paths + [str(minimum)], capture_output=True, text=True)
    return result.returncode, result.stdout


def test_identical_builds_pass(tmp_path):
    code, out = compare(tmp_path, [("x.so", A), ("y.a", B)], [("y.a", B), ("x.so", A)], 2)
    assert code == 0 and "2 outputs bit-identical" in out


@pytest.mark.parametrize("first, second, minimum, says", [
    ([], [], 1, "lists 0 files"),                                        # nothing compared
    ([("x.so", A)], [("x.so", A)], 2, "expected at least 2"),            # outputs went missing
    ([("x.so", A)], None, 1, "no listing"),                              # a listing never written
    ([("x.so", A)], [("x.so", C)], 1, "differ between the two builds:\n  ./x.so"),
    ([("x.so", A), ("y.a", B)], [("x.so", A), ("z.a", B)], 2, "different files"),
])
def test_every_way_of_not_being_reproducible_fails(tmp_path, first, second, minimum, says):
    code, out = compare(tmp_path, first, second, minimum)
    assert code == 1 and says in out
