"""tools/markdown_doctest.py: a guide passes only when every example prints what it shows."""

import pytest

from markdown_doctest import check_guide

GUIDE = """# A guide

Text, then an example:

    >>> numbers = [3, 1, 2]
    >>> sorted(numbers)
    [1, 2, 3]
    >>> print("took %.3f s" % 0.123)
    took ... s
"""


def test_a_guide_whose_output_matches_passes(tmp_path):
    path = tmp_path / "GUIDE.md"
    path.write_text(GUIDE)
    assert check_guide(str(path), minimum_examples=3) == 3


def test_drifted_output_fails_and_says_where(tmp_path):
    path = tmp_path / "GUIDE.md"
    path.write_text(GUIDE.replace("[1, 2, 3]", "[3, 2, 1]"))
    with pytest.raises(AssertionError, match=r"1 of 3 examples drifted(.|\n)*Got:\s+\[1, 2, 3\]"):
        check_guide(str(path), minimum_examples=3)


def test_a_guide_with_too_few_examples_fails(tmp_path):
    path = tmp_path / "GUIDE.md"
    path.write_text("# No examples here\n")
    with pytest.raises(AssertionError, match="only 0 examples"):
        check_guide(str(path))
