"""Mutation check: does minigrad's test suite catch small bugs in ops.py and functional.py?

    bazel run //minigrad:mutation -- --max 80 --jobs 2

Each mutant changes one thing in one of the two files (an arithmetic operator, a
comparison, a number, a sign, a boolean), the way a slip of the keyboard would;
the suite then runs on a copy of the package holding that mutant. A mutant is
killed when a test fails (or the run exceeds --timeout: a hang is caught too)
and survives when every test passes. Mutants inside `raise` statements (error
messages) are not made. Prints the kill rate per file and the survivors.
"""

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

# The working tree's package under `bazel run`, else the one beside this file.
PACKAGE = os.path.join(os.environ.get("BUILD_WORKSPACE_DIRECTORY", ""), "minigrad") if os.environ.get(
    "BUILD_WORKSPACE_DIRECTORY") else os.path.dirname(os.path.abspath(__file__))
FILES = ("ops.py", "functional.py")
TESTS = ("gradients_test.py", "semantics_test.py", "dtypes_test.py", "autograd_test.py",
         "properties_test.py", "func_test.py")

# The mutants a mutation check of the earlier suite let through (issue 12): always run.
NAMED = [
    ("ops.py", "    return out, mask / mask.sum(axis=dim, keepdims=True)",
     "    return out, mask * 1.0", "max() ties: gradient 1.0 to each tie"),
    ("functional.py", "        g_grad = ((probs - onehot) * g).sum() / n if _needs(grad) else None",
     "        g_grad = -((probs - onehot) * g).sum() / n if _needs(grad) else None",
     "cross_entropy double-backward: sign of d/dgrad"),
    ("functional.py", "        return grad - out.exp() * grad.sum(ctx.dim, keepdim=True), None",
     "        return grad, None", "log_softmax backward without its softmax term"),
]

SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
         ast.Pow: ast.Mult, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}


def _variants(node):
    """(description, mutated copy of node) for each mutation of this node itself."""
    if isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
        yield "%s -> %s" % (type(node.op).__name__, SWAPS[type(node.op)].__name__), ast.BinOp(
            node.left, SWAPS[type(node.op)](), node.right)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAPS:
        yield "%s -> %s" % (type(node.ops[0]).__name__, SWAPS[type(node.ops[0])].__name__), ast.Compare(
            node.left, [SWAPS[type(node.ops[0])]()], node.comparators)
    elif isinstance(node, ast.BoolOp) and type(node.op) in SWAPS:
        yield "%s -> %s" % (type(node.op).__name__, SWAPS[type(node.op)].__name__), ast.BoolOp(
            SWAPS[type(node.op)](), node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        yield "drop %s" % type(node.op).__name__, node.operand
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield "%s -> %s" % (node.value, not node.value), ast.Constant(not node.value)
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        for value in ({0: (1,), 1: (0, 2)}.get(node.value, (node.value + 1,))):
            yield "%r -> %r" % (node.value, value), ast.Constant(value)


def _skipped_lines(tree):
    """Lines of raise statements and docstrings: mutating messages tells nothing."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def mutants(name):
    """Every mutant of one file: (file, line, description, mutated source)."""
    source = open(os.path.join(PACKAGE, name)).read()
    tree = ast.parse(source)
    skip = _skipped_lines(tree)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    raw = source.encode()
    found = []
    for node in ast.walk(tree):
        if not hasattr(node, "lineno") or node.lineno in skip:
            continue
        for description, new in _variants(node):
            start = offsets[node.lineno - 1] + node.col_offset
            end = offsets[node.end_lineno - 1] + node.end_col_offset
            text = "(%s)" % ast.unparse(new)
            mutated = (raw[:start] + text.encode() + raw[end:]).decode()
            try:
                ast.parse(mutated)
            except SyntaxError:
                continue
            found.append((name, node.lineno, description, mutated))
    return found


def named_mutants():
    found = []
    for name, old, new, description in NAMED:
        source = open(os.path.join(PACKAGE, name)).read()
        if source.count(old) != 1:
            raise SystemExit("mutation.py: NAMED mutant %r no longer matches %s" % (description, name))
        found.append((name, source[:source.index(old)].count("\n") + 1, description,
                      source.replace(old, new)))
    return found


def run_suite(mutant, timeout, python_path, snapshot):
    """'killed', 'timeout' or 'survived' for one mutant, on a copy of the package snapshot."""
    name, _, _, mutated = mutant
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "minigrad")
        shutil.copytree(snapshot, copy)
        with open(os.path.join(copy, name), "w") as f:
            f.write(mutated)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp] + python_path),
                   PYTHONDONTWRITEBYTECODE="1")
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                   "-p", "no:warnings"] + [os.path.join(copy, "tests", t) for t in TESTS]
        try:
            result = subprocess.run(command, cwd=tmp, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout"
        if result.returncode not in (0, 1, 2):  # 1: a test failed; 2: a mutant broke the import
            raise SystemExit("mutation.py: pytest could not run (exit %d):\n%s"
                             % (result.returncode, result.stdout.decode()[-2000:]))
        return "survived" if result.returncode == 0 else "killed"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=80,
                        help="mutants to run, sampled at random (default 80; 0: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="suites run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds before a run counts as a hang (killed); default 300")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    everything = [m for name in FILES for m in mutants(name)]
    chosen = everything if args.max <= 0 or args.max >= len(everything) else sorted(
        random.Random(args.seed).sample(everything, args.max), key=lambda m: (m[0], m[1]))
    chosen = named_mutants() + chosen
    python_path = [p for p in sys.path if p]  # after the copy: the copy's minigrad comes first
    # Every run copies this snapshot, so edits to the tree while it runs do not mix in.
    snapshot = os.path.join(tempfile.mkdtemp(prefix="minigrad-mutation-"), "minigrad")
    shutil.copytree(PACKAGE, snapshot, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    unmutated = open(os.path.join(snapshot, FILES[0])).read()
    if run_suite((FILES[0], 0, "none", unmutated), args.timeout, python_path, snapshot) != "survived":
        raise SystemExit("mutation.py: the suite fails on the unmutated package; fix that first")
    print("%d mutants of %s; running %d at random (seed %d) and the %d named ones"
          % (len(everything), ", ".join(FILES), len(chosen) - len(NAMED), args.seed, len(NAMED)))
    with ThreadPoolExecutor(args.jobs) as pool, tqdm(total=len(chosen), desc="mutants",
                                                     file=sys.stderr) as bar:
        def one(m):
            outcome = run_suite(m, args.timeout, python_path, snapshot)
            bar.update()
            return outcome
        outcomes = list(pool.map(one, chosen))
    shutil.rmtree(os.path.dirname(snapshot))
    print("%-14s %8s %8s %8s %9s %10s" % ("file", "mutants", "killed", "timeout", "survived",
                                         "kill rate"))
    for name in FILES:
        mine = [o for m, o in zip(chosen, outcomes) if m[0] == name]
        killed = sum(o != "survived" for o in mine)
        print("%-14s %8d %8d %8d %9d %9.1f%%" % (name, len(mine), mine.count("killed"),
                                                 mine.count("timeout"), mine.count("survived"),
                                                 100.0 * killed / max(len(mine), 1)))
    killed = sum(o != "survived" for o in outcomes)
    print("total: %d of %d killed (%.1f%%)" % (killed, len(outcomes), 100.0 * killed / max(len(outcomes), 1)))
    for (name, line, description, _), outcome in zip(chosen[:len(NAMED)], outcomes):
        print("named: %s:%d %s: %s" % (name, line, description, outcome))
    for (name, line, description, _), outcome in zip(chosen, outcomes):
        if outcome == "survived":
            print("survived: %s:%d %s" % (name, line, description))


if __name__ == "__main__":
    main()
