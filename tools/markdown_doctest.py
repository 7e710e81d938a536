"""Runs the `>>>` examples of a Markdown guide as doctests and checks their printed output.

    from markdown_doctest import check_guide
    check_guide("kernels/GUIDE.md")        # in a pytest test: fails on any drifted output

Every example in the file runs, in order, in one namespace, so a guide reads as one session.
Output that varies between runs or machines (times, addresses, paths, the CPU's levels) is
written with `...` (doctest's ELLIPSIS) in the guide, never left unchecked; runs of spaces and
line breaks compare as one (NORMALIZE_WHITESPACE), so tables may be wrapped to fit the page.
"""

import doctest


def check_guide(path, minimum_examples=5):
    """Runs the guide's examples; raises AssertionError with doctest's report on any failure."""
    with open(path) as f:
        text = f.read()
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {"__name__": "guide"}, path, path, 0)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    report = []
    runner = doctest.DocTestRunner(optionflags=flags)
    runner.run(test, out=report.append)
    assert runner.tries >= minimum_examples, "%s: only %d examples found" % (path, runner.tries)
    assert runner.failures == 0, "%s: %d of %d examples drifted:\n%s" % (
        path, runner.failures, runner.tries, "".join(report))
    return runner.tries
