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
    with pytest.raises(SystemExit, match="dimension named d1: the costs depend on batch"):
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


def test_user_errors_are_one_line_not_a_traceback(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("def dense(x, w):\n    return x @ w\n\n\n"
                     "def bad(x):\n    raise ValueError('user bug')\n\n\nnotfn = 3\n")
    (tmp_path / "syn.py").write_text("def (\n")
    cases = {
        ":dense": "graph: could not trace dense: TypeError: .*missing a required argument: 'w'",
        ":bad": r"graph: could not trace bad: ValueError: user bug \(at .*m.py:6\)",
        ":notfn": r"m.py: notfn is not a function \(it is of type int\)",
    }
    for name, message in cases.items():
        with pytest.raises(SystemExit, match=message) as exit_:
            cli.main(["graph", str(model) + name, "--input", "4,3"])
        assert "\n" not in str(exit_.value.code)
    with pytest.raises(SystemExit, match="not a Python file"):
        cli.main(["graph", str(tmp_path) + ":dense", "--input", "4,3"])
    with pytest.raises(SystemExit, match=r"syn.py:1: SyntaxError"):
        cli.main(["graph", str(tmp_path / "syn.py") + ":f"])
    with pytest.raises(SystemExit, match="graph: cannot write .*missing/g.svg"):
        cli.main(["graph", str(model) + ":dense", "--input", "4,3", "--input", "3,2",
                  "--svg", str(tmp_path / "missing" / "g.svg")])
