"""draw_graph: the autograd graph behind a tensor, as Graphviz DOT (and SVG).

    dot = minigrad.draw_graph(loss)        # a graphviz.Digraph; dot.source is the DOT text
    minigrad.draw_graph(loss, "graph.svg")  # also renders it, where Graphviz's `dot` exists

Boxes are Functions (grad_fn nodes, named as in repr: MulBackward), ellipses
are the leaf tensors that require grad (parameters) with their shapes; tensors
that do not (inputs, constants) are left out, as the backward never reaches
them. Edges run from inputs to the operation that used them, ending at the
output.
"""

import os

import graphviz

from minigrad.tensor import Tensor


def _shape(t):
    return "(" + ", ".join(str(n) for n in t.shape) + ")"


def draw_graph(tensor, path=None):
    """Returns the graph as a graphviz.Digraph; with `path` (.svg, .png, .pdf, .dot) writes it."""
    if not isinstance(tensor, Tensor):
        raise TypeError("draw_graph takes a minigrad Tensor, got %s" % type(tensor).__name__)
    dot = graphviz.Digraph("autograd", graph_attr={"rankdir": "BT"},
                           node_attr={"fontname": "Helvetica", "fontsize": "11"})
    names = {}

    def name(obj, label, **attrs):
        key = id(obj)
        if key not in names:
            names[key] = "n%d" % len(names)
            dot.node(names[key], label, **attrs)
        return names[key]

    out = name(tensor, "output %s" % _shape(tensor), shape="doubleoctagon")
    if tensor.grad_fn is None:
        return _write(dot, path)
    stack = [tensor.grad_fn]
    dot.edge(name(tensor.grad_fn, repr(tensor.grad_fn)[1:-1], shape="box"), out)
    seen = {id(tensor.grad_fn)}
    while stack:
        node = stack.pop()
        target = names[id(node)]
        for value in node.inputs:
            if not isinstance(value, Tensor) or not value.requires_grad:
                continue
            if value.grad_fn is None:
                source = name(value, "leaf %s" % _shape(value), shape="ellipse",
                              style="filled", fillcolor="lightblue")
            else:
                source = name(value.grad_fn, repr(value.grad_fn)[1:-1], shape="box")
                if id(value.grad_fn) not in seen:
                    seen.add(id(value.grad_fn))
                    stack.append(value.grad_fn)
            dot.edge(source, target)
    return _write(dot, path)


def _write(dot, path):
    if path is None:
        return dot
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if fmt in ("dot", "gv"):
        with open(path, "w") as f:
            f.write(dot.source)
        return dot
    if fmt not in graphviz.FORMATS:
        raise ValueError("draw_graph: %r names no format Graphviz renders; end the path in .svg, "
                         ".png, .pdf or .dot" % path)
    # Piped and written here: render() wrote the DOT text to the path without its extension
    # and then deleted it (cleanup), a user's file of that name among them.
    try:
        image = dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError("rendering %s needs Graphviz's `dot` program (Debian: apt-get install "
                           "graphviz); write a .dot file instead" % path) from None
    with open(path, "wb") as f:
        f.write(image)
    return dot
