"""Mutation check of tf_inspector's tests: do they catch small bugs in retrace.py, calls.py
(the retrace reasons) and cost.py (the cost model)?

    bazel run //tf_inspector:mutation -- --max 40 --jobs 2

The engine is tools/mutation_check.py; this file names what it mutates and runs.
"""

from mutation_check import Named, main, package_dir

FILES = ["retrace.py", "calls.py", "cost.py"]
TESTS = ["retrace_test.py", "graph_test.py", "symbolic_test.py", "cli_test.py"]

# The mutants a mutation check of the earlier suite let through (issue 13).
NAMED = [
    Named("calls.py",
          '        return "python_value" if {old[0], new[0]} & {"python", "object"} else "structure"',
          '        return "structure"', "a tensor-to-Python-value retrace labelled structure"),
    Named("cost.py", "        k = a[-2] if adj else a[-1]", "        k = a[-1]",
          "MatMul FLOPs that ignore transpose_a"),
    Named("cost.py", '"Add": 1, "AddV2": 1,', '"Add": 1, "AddV2": 2,',
          "AddV2 FLOPs counted twice (what a lower-bound FLOPs check lets through)"),
]

if __name__ == "__main__":
    main(package_dir("tf_inspector", __file__), FILES, TESTS, NAMED, __doc__, default_max=40)
