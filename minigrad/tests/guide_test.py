"""minigrad/GUIDE.md's examples run and print what the guide says they print."""

import os

import torch
from markdown_doctest import check_guide


def test_the_guide_runs_as_written():
    # The guide reads as a fresh session: torch's own default dtype, not the float64 that other
    # test modules set for the whole process when they are collected.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        assert check_guide(os.path.join(os.path.dirname(__file__), "..", "GUIDE.md"),
                           minimum_examples=60)
    finally:
        torch.set_default_dtype(previous)
