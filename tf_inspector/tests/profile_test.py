"""Measured op time from the TF Profiler joined to graph nodes; plot; Model Explorer node data."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_inspector
from tf_inspector import cli

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_model.py")


def mlp(x, w):
    return tf.nn.relu(tf.matmul(x, w) + 1.0) * 2.0


@pytest.fixture(scope="module")
def prof():
    return tf_inspector.profile(mlp, tf.ones([128, 256]), tf.ones([256, 256]), steps=3)


def test_measured_time_joins_the_nodes_with_their_costs(prof):
    ops = {n.op: n for n in prof.nodes}
    assert {"MatMul", "AddV2", "Relu", "Mul"} <= set(ops), prof.to_text()
    matmul = ops["MatMul"]
    assert matmul.flops == 2 * 128 * 256 * 256 and matmul.bytes == 4 * (128 * 256 + 256 * 256 + 128 * 256)
    assert matmul.time_s > 0 and matmul.gflops_per_s == pytest.approx(matmul.flops / matmul.time_s / 1e9)
    assert [n.time_s for n in prof.nodes] == sorted((n.time_s for n in prof.nodes), reverse=True)
    # The union of the ops' intervals is at most their sum; with no overlap the two are equal
    # but summed in another order, so they may differ in the last bit (seen in CI).
    assert 0 < prof.busy_s <= prof.op_time_s * (1 + 1e-12) and prof.busy_s <= prof.wall_s
    assert prof.nodes[0].name in prof.to_text(top=1)
    data = prof.to_dict()
    assert data["steps"] == 3 and data["nodes"][0]["time_s"] == prof.nodes[0].time_s


def test_busy_time_is_the_union_of_op_intervals():
    from tf_inspector.profile import _busy_ps
    assert _busy_ps([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert _busy_ps([]) == 0


def test_formula_costs_are_evaluated_at_the_profiled_call():
    generic = tf.function(mlp, input_signature=[tf.TensorSpec([None, 256]), tf.TensorSpec([256, 256])])
    result = tf_inspector.profile(generic, tf.ones([64, 256]), tf.ones([256, 256]), steps=2)
    matmul = next(n for n in result.nodes if n.op == "MatMul")
    assert matmul.flops == 2 * 64 * 256 * 256  # the graph has [?, 256]: the formula at 64


def test_plot_of_cost_against_time(prof, tmp_path):
    path = prof.plot(str(tmp_path / "cost.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert prof.by_op_type()["MatMul"][1] == 2 * 128 * 256 * 256


def test_model_explorer_node_data_names_the_nodes_of_its_graph(prof, tmp_path):
    from model_explorer.builtin_graphdef_adapter import BuiltinGraphdefAdapter

    paths = prof.to_model_explorer(str(tmp_path / "me"))
    graphs = BuiltinGraphdefAdapter().convert(paths["graph"], {})["graphCollections"]
    nodes = {node["id"]: node for collection in graphs for graph in collection.graphs
             for node in graph["nodes"]}
    names = {i: n["namespace"] for i, n in nodes.items()}  # the adapter's full node name
    for measure in ("flops", "bytes", "time_us"):
        with open(paths[measure]) as f:
            data = json.load(f)
        assert data["name"] == measure and data["results"], measure
        assert set(data["results"]) <= set(nodes), (measure, set(data["results"]) - set(nodes))
        assert [g["stop"] for g in data["gradient"]] == [0, 1]
    with open(paths["flops"]) as f:
        flops = {names[i]: r["value"] for i, r in json.load(f)["results"].items()}
    with open(paths["time_us"]) as f:
        times = {names[i]: r["value"] for i, r in json.load(f)["results"].items()}
    assert flops["MatMul"] == 2 * 128 * 256 * 256 and flops["add"] == 128 * 256
    assert times == {n.name: pytest.approx(1e6 * n.time_s) for n in prof.nodes}
    assert all(nodes[i]["label"] == next(n.op for n in prof.report.nodes if n.name == name)
               for i, name in names.items() if name in flops)
    # TensorBoard's graph view reads the same GraphDef.
    graph_def = tf.compat.v1.GraphDef()
    from google.protobuf import text_format
    with open(paths["graph"]) as f:
        text_format.Parse(f.read(), graph_def)
    assert any(n.op == "MatMul" for n in graph_def.node)


def test_cli_and_bad_input(tmp_path, capsys):
    cli.main(["profile", EXAMPLE + ":mlp", "--input", "4,8", "--steps", "2", "--json",
              "--plot", str(tmp_path / "p.png")])
    out = capsys.readouterr().out
    data = json.loads(out[:out.rindex("}") + 1])
    assert any(n["op"] == "MatMul" and n["flops"] == 2 * 4 * 4 * 8 for n in data["nodes"])
    assert os.path.exists(tmp_path / "p.png")
    with pytest.raises(SystemExit, match="give every dimension"):
        cli.main(["profile", EXAMPLE + ":mlp", "--input", "?,8"])
    with pytest.raises(ValueError, match="steps must be at least 1"):
        tf_inspector.profile(mlp, np.ones([2, 2], np.float32), np.ones([2, 2], np.float32), steps=0)
