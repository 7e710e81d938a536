"""tf_inspector/GUIDE.md's examples run and print what the guide says they print."""

import os

from markdown_doctest import check_guide


def test_the_guide_runs_as_written():
    assert check_guide(os.path.join(os.path.dirname(__file__), "..", "GUIDE.md"), minimum_examples=80)
