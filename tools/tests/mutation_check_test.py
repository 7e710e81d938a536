"""tools/mutation_check.py: which mutants it makes, and that a mutant is killed exactly when
the package's tests fail on it (run end to end on a small package)."""

import pytest

from mutation_check import Named, main, mutants, named_mutants

SOURCE = '''def f(a, b):
    """A docstring: 1 + 2 is not mutated."""
    if a > 0:
        raise ValueError("a" + "b")
    return a + b * 2
'''


def test_one_mutant_per_slip_and_none_in_messages(tmp_path):
    (tmp_path / "m.py").write_text(SOURCE)
    found = {(line, description) for _, line, description, _ in mutants(str(tmp_path), "m.py")}
    assert found == {(3, "Gt -> GtE"), (3, "0 -> 1"), (5, "Add -> Sub"), (5, "Mult -> Div"),
                     (5, "2 -> 3")}
    mutated = {d: src for _, _, d, src in mutants(str(tmp_path), "m.py")}
    assert "return a + (b / 2)" in mutated["Mult -> Div"]


def test_a_named_mutant_must_match_once(tmp_path):
    (tmp_path / "m.py").write_text(SOURCE)
    [(name, line, description, src)] = named_mutants(str(tmp_path), [
        Named("m.py", "a + b * 2", "a - b * 2", "sign")])
    assert (name, line, description) == ("m.py", 5, "sign") and "return a - b * 2" in src
    with pytest.raises(SystemExit, match="no longer matches"):
        named_mutants(str(tmp_path), [Named("m.py", "a", "b", "ambiguous")])


def test_killed_only_where_a_test_fails(tmp_path, capsys):
    package = tmp_path / "calc"
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\n"
                                     "def double(x):\n    return x * 2\n")
    (package / "tests" / "calc_test.py").write_text(
        "from calc.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    named = [Named("calc.py", "x * 2", "x * 3", "double triples")]
    outcomes = main(str(package), ["calc.py"], ["calc_test.py"], named, "doc",
                    argv=["--max", "0", "--jobs", "2", "--timeout", "120"])
    out = capsys.readouterr().out
    # add's mutant fails test_add; nothing tests double, so its two and the named survive.
    assert outcomes == ["survived", "killed", "survived", "survived"], out
    assert "total: 1 of 4 killed (25.0%)" in out
    assert "named: calc.py:6 double triples: survived" in out
    assert "survived: calc.py:2 Add -> Sub" not in out
