"""draw_graph: the recorded graph as DOT, and as SVG where Graphviz is installed."""

import shutil

import numpy as np
import pytest

import minigrad
from minigrad import functional as F


def small_graph():
    x = minigrad.Tensor(np.ones((2, 3)), requires_grad=True)
    w = minigrad.Tensor(np.ones((3, 4)), requires_grad=True)
    h = x @ w
    return F.log_softmax(h * h + h).sum()  # h used twice: a diamond


def test_dot_has_one_node_per_operation_and_leaf_and_every_edge():
    source = minigrad.draw_graph(small_graph()).source
    for label in ("SumBackward", "LogSoftmaxBackward", "AddBackward", "MulBackward",
                  "MatMulBackward", "leaf (2, 3)", "leaf (3, 4)", "output ()"):
        assert label in source, label
    assert source.count("MatMulBackward") == 1  # shared node drawn once
    assert source.count("->") == 9  # x,w->matmul; matmul->mul (x2), ->add (x2); mul->add; add->lsm->sum->out


def test_writes_dot_and_svg(tmp_path):
    loss = small_graph()
    minigrad.draw_graph(loss, str(tmp_path / "g.dot"))
    assert (tmp_path / "g.dot").read_text().startswith("digraph autograd")
    if shutil.which("dot") is None:
        with pytest.raises(RuntimeError, match="apt-get install graphviz"):
            minigrad.draw_graph(loss, str(tmp_path / "g.svg"))
    else:
        minigrad.draw_graph(loss, str(tmp_path / "g.svg"))
        assert "<svg" in (tmp_path / "g.svg").read_text()


def test_rendering_leaves_a_file_named_as_the_path_without_its_extension_alone(tmp_path):
    """render() wrote the DOT text to `model` for `model.svg` and deleted it: a user's file of
    that name was lost. A path naming no format is a clear error."""
    (tmp_path / "model").write_text("the user's")
    try:
        minigrad.draw_graph(small_graph(), str(tmp_path / "model.svg"))
    except RuntimeError:  # (no Graphviz `dot` here: nothing rendered)
        pass
    assert (tmp_path / "model").read_text() == "the user's"
    for path in ("model.txt", "model"):
        with pytest.raises(ValueError, match="names no format"):
            minigrad.draw_graph(small_graph(), str(tmp_path / path))


def test_rejects_non_tensors():
    with pytest.raises(TypeError, match="minigrad Tensor"):
        minigrad.draw_graph(np.ones(3))
