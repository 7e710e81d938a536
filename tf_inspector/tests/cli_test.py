"""The tf_inspector CLI: graph (text, JSON, DOT), retrace, help and errors."""

import json
import os
import sys

import pytest

from tf_inspector import cli

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_model.py")


def test_graph_json(capsys):
    cli.main(["graph", EXAMPLE + ":mlp", "--input", "4,8:float32", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["op_counts"]["MatMul"] == 1
    # x[4,8] @ w[8,4]: 2*4*4*8; + SHIFT and relu: one FLOP per output each.
    assert data["total_flops"] == 2 * 4 * 4 * 8 + 4 * 4 + 4 * 4
    assert data["unknown_cost_ops"] == []


def test_graph_text_and_dot_with_unknown_dims(capsys):
    cli.main(["graph", EXAMPLE + ":mlp", "--input", "?,8", "--at", "batch=4"])
    out = capsys.readouterr().out
    assert "MatMul" in out and "72*batch FLOPs" in out  # 2*4*8 + 4 + 4 per row
    assert "at batch=4: 288 FLOPs" in out
    with pytest.raises(SystemExit, match="cost needs a size for batch"):
        cli.main(["graph", EXAMPLE + ":mlp", "--input", "?,8", "--at", "d1=4"])
    capsys.readouterr()
    cli.main(["graph", EXAMPLE + ":mlp", "--input", "2,8", "--dot"])
    assert capsys.readouterr().out.startswith("digraph")


def test_retrace_runs_a_script_and_explains(capsys):
    path = list(sys.path)
    cli.main(["retrace", EXAMPLE])
    out = capsys.readouterr().out
    assert "scale: traced 3 times in 3 calls" in out
    assert "call 3 traced (python_value): args[1] python_value: " in out
    assert sys.path == path  # the script's folder was on it only while the script ran


def test_help_and_bad_input(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0 and "retrace" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="defines no 'nope'"):
        cli.main(["graph", EXAMPLE + ":nope"])
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["graph", "missing.py:f"])
    with pytest.raises(SystemExit):
        cli.main(["graph", EXAMPLE + ":mlp", "--input", "a,b"])
