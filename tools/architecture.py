"""Draws which target uses which: the README's "How it fits together" picture, from `bazel query`.

    tools/python tools/architecture.py                  # writes docs/architecture.svg (and .dot)
    tools/python tools/architecture.py --out /tmp/arch  # elsewhere

Nodes are the libraries and binaries of the packages (tests left out), one box per package;
edges are direct dependencies among them, so the picture is the build graph itself, never a
drawing that can drift from it: rerun after changing a BUILD file.
"""

import argparse
import os
import re
import subprocess
import sys

import graphviz

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["kernels", "minigrad", "tf_inspector", "tf_inspector/models"]
KINDS = "py_library|py_binary|cc_library|cc_binary"
# Per-level kernel objects are one idea: drawn as the library that holds them.
HIDDEN = re.compile(r"//kernels:softmax_cpu_(avx|baseline)")
STYLE = {"py_library": ("box", "#dbe9f6"), "py_binary": ("box", "#c9e6c9"),
         "cc_library": ("ellipse", "#f6e3c6"), "cc_binary": ("ellipse", "#f3c9c9")}


def bazel_query(expression, output):
    cmd = [os.path.join(ROOT, "bazelw"), "query", expression, "--output=" + output, "--noshow_progress"]
    return subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def build_graph():
    universe = " + ".join("//%s:all" % p for p in PACKAGES)
    targets = 'kind("%s", %s) except attr(testonly, 1, %s)' % (KINDS, universe, universe)
    kinds = {}
    for line in bazel_query(targets, "label_kind").splitlines():
        kind, _, label = line.split()
        if not HIDDEN.match(label):
            kinds[label] = kind
    edges = set()
    for line in bazel_query("deps(%s, 1)" % targets, "graph").splitlines():
        m = re.match(r'\s*"(.+?)"\s*->\s*"(.+?)"', line)
        if not m:
            continue
        # --output=graph joins labels with equal edges into one node: "a\nb".
        for src in m.group(1).split("\\n"):
            for dst in m.group(2).split("\\n"):
                if src in kinds and dst in kinds and src != dst:
                    edges.add((src, dst))
    return kinds, sorted(edges)


def node_id(label):
    return re.sub(r"\W", "_", label)  # graphviz reads "a:b" in an edge as node a, port b


def draw(kinds, edges):
    dot = graphviz.Digraph("workspace", graph_attr={"rankdir": "LR", "fontname": "Helvetica",
                                                    "label": "which target uses which (bazel query)\nboxes: Python libraries (blue), binaries "
                                                             "(green); ovals: C++ libraries (tan), shared objects (red)",
                                                    "labelloc": "t"},
                           node_attr={"fontname": "Helvetica", "fontsize": "11", "style": "filled"})
    for package in PACKAGES:
        with dot.subgraph(name="cluster_" + package, graph_attr={"label": "//" + package}) as box:
            for label, kind in sorted(kinds.items()):
                if label.split(":")[0] == "//" + package:
                    shape, color = STYLE[kind]
                    box.node(node_id(label), label.split(":", 1)[1], shape=shape, fillcolor=color)
    for src, dst in edges:
        dot.edge(node_id(src), node_id(dst))
    return dot


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "architecture"),
                        help="output path without extension: writes OUT.dot and OUT.svg")
    args = parser.parse_args(argv)
    kinds, edges = build_graph()
    if not kinds:
        sys.exit("architecture: bazel query found no targets in %s" % ", ".join(PACKAGES))
    dot = draw(kinds, edges)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".dot", "w") as f:
        f.write(dot.source)
    dot.render(args.out, format="svg", cleanup=True)
    print("architecture: %d targets, %d edges -> %s.svg" % (len(kinds), len(edges), args.out))


if __name__ == "__main__":
    main()
