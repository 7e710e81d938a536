"""Mutation check: does a package's test suite catch small bugs in the files it names?

Each mutant changes one thing in one file (an arithmetic operator, a comparison, a
number, a sign, a boolean), the way a slip of the keyboard would; the package's tests
then run on a copy of the package holding that mutant. A mutant is killed when a test
fails (or the run exceeds --timeout: a hang is caught too) and survives when every test
passes. Mutants inside `raise` statements and docstrings (messages) are not made. The
mutants an issue named (bugs an earlier suite let through) always run. Prints the kill
rate per file and the survivors.

A package's mutation.py names its files, tests and named mutants and calls main(); see
minigrad/mutation.py and tf_inspector/mutation.py.
"""

import argparse
import ast
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
         ast.Pow: ast.Mult, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}


@dataclasses.dataclass
class Named:
    """A mutant an issue named: `old`, a unique piece of `file`, becomes `new`."""
    file: str
    old: str
    new: str
    description: str


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


def mutants(package, name):
    """Every mutant of one file: (file, line, description, mutated source)."""
    source = open(os.path.join(package, name)).read()
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


def named_mutants(package, named):
    found = []
    for m in named:
        source = open(os.path.join(package, m.file)).read()
        if source.count(m.old) != 1:
            raise SystemExit("mutation check: the named mutant %r no longer matches %s once"
                             % (m.description, m.file))
        found.append((m.file, source[:source.index(m.old)].count("\n") + 1, m.description,
                      source.replace(m.old, m.new)))
    return found


def run_suite(mutant, tests, timeout, python_path, snapshot):
    """'killed', 'timeout' or 'survived' for one mutant, on a copy of the package snapshot."""
    name, _, _, mutated = mutant
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(snapshot))
        shutil.copytree(snapshot, copy)
        with open(os.path.join(copy, name), "w") as f:
            f.write(mutated)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp] + python_path),
                   PYTHONDONTWRITEBYTECODE="1")
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                   "-p", "no:warnings"] + [os.path.join(copy, "tests", t) for t in tests]
        try:
            result = subprocess.run(command, cwd=tmp, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout"
        if result.returncode not in (0, 1, 2):  # 1: a test failed; 2: a mutant broke the import
            raise SystemExit("mutation check: pytest could not run (exit %d):\n%s"
                             % (result.returncode, result.stdout.decode()[-2000:]))
        return "survived" if result.returncode == 0 else "killed"


def package_dir(name, here):
    """The working tree's package under `bazel run`, else the folder of `here`."""
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    return os.path.join(workspace, name) if workspace else os.path.dirname(os.path.abspath(here))


def main(package, files, tests, named, doc, argv=None, default_max=80):
    """Runs the check on `package` (a folder) and prints the table; see the module docstring."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n")[1])
    parser.add_argument("--max", type=int, default=default_max,
                        help="mutants to run, sampled at random (default %d; 0: all)" % default_max)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="suites run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds before a run counts as a hang (killed); default 300")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    everything = [m for name in files for m in mutants(package, name)]
    chosen = everything if args.max <= 0 or args.max >= len(everything) else sorted(
        random.Random(args.seed).sample(everything, args.max), key=lambda m: (m[0], m[1]))
    chosen = named_mutants(package, named) + chosen
    python_path = [p for p in sys.path if p]  # after the copy: the copy's package comes first
    # Every run copies this snapshot, so edits to the tree while it runs do not mix in.
    snapshot = os.path.join(tempfile.mkdtemp(prefix="mutation-check-"), os.path.basename(package))
    shutil.copytree(package, snapshot, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    unmutated = open(os.path.join(snapshot, files[0])).read()
    if run_suite((files[0], 0, "none", unmutated), tests, args.timeout, python_path,
                 snapshot) != "survived":
        raise SystemExit("mutation check: the suite fails on the unmutated package; fix that first")
    print("%d mutants of %s; running %d at random (seed %d) and the %d named ones"
          % (len(everything), ", ".join(files), len(chosen) - len(named), args.seed, len(named)))
    with ThreadPoolExecutor(args.jobs) as pool, tqdm(total=len(chosen), desc="mutants",
                                                     file=sys.stderr) as bar:
        def one(m):
            outcome = run_suite(m, tests, args.timeout, python_path, snapshot)
            bar.update()
            return outcome
        outcomes = list(pool.map(one, chosen))
    shutil.rmtree(os.path.dirname(snapshot))
    print("%-14s %8s %8s %8s %9s %10s" % ("file", "mutants", "killed", "timeout", "survived",
                                         "kill rate"))
    for name in files + sorted({m.file for m in named} - set(files)):
        mine = [o for m, o in zip(chosen, outcomes) if m[0] == name]
        killed = sum(o != "survived" for o in mine)
        print("%-14s %8d %8d %8d %9d %9.1f%%" % (name, len(mine), mine.count("killed"),
                                                 mine.count("timeout"), mine.count("survived"),
                                                 100.0 * killed / max(len(mine), 1)))
    killed = sum(o != "survived" for o in outcomes)
    print("total: %d of %d killed (%.1f%%)" % (killed, len(outcomes), 100.0 * killed / max(len(outcomes), 1)))
    for (name, line, description, _), outcome in zip(chosen[:len(named)], outcomes):
        print("named: %s:%d %s: %s" % (name, line, description, outcome))
    for (name, line, description, _), outcome in zip(chosen, outcomes):
        if outcome == "survived":
            print("survived: %s:%d %s" % (name, line, description))
    return outcomes
