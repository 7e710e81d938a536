"""tf_inspector's command line.

    bazel run //tf_inspector:cli -- graph path/to/model.py:fn --input 2,3:float32 [--json|--dot|--svg F]
    bazel run //tf_inspector:cli -- profile path/to/model.py:fn --input 8,128:int32 [--steps 10]
              [--json] [--plot F.png] [--model-explorer DIR]
    bazel run //tf_inspector:cli -- retrace path/to/script.py [script args...]
    bazel run //tf_inspector:cli -- xla path/to/model.py:fn --input 8,128:int32 [--runs 10] [--json|--hlo]
    bazel run //tf_inspector:cli -- mlir path/to/model.py:fn --input ?,128:int32 [--json|--tf|--lowered]

graph:   traces FUNCTION from a Python file with inputs of the given shapes
         (use ? for a dimension left unknown) and prints its GraphReport.
xla:     compiles FUNCTION with XLA (jit_compile=True) on inputs of those shapes and
         reports trace, compile and run time, HLO op counts before/after optimisation
         and the fusion count.
mlir:    converts FUNCTION to MLIR's TF dialect and lowers it to StableHLO; op counts per
         dialect beside the FuncGraph's node counts, and the ops that did not lower.
profile: runs FUNCTION under the TF Profiler and lists the ops by measured time with
         their FLOPs, bytes, GFLOP/s and GB/s; optionally a cost-vs-time plot and
         Model Explorer node data (graph.pbtxt, flops.json, bytes.json, time_us.json).
retrace: runs a Python script with every tf.function call monitored, then
         says which calls retraced, why, and how to fix it.
Relative paths are taken from the directory `bazel run` was called in. Files run as
`python FILE.py` would run them: with their own folder first on sys.path.
"""

import argparse
import contextlib
import json
import os
import runpy
import sys


def _path(p):
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), p)


@contextlib.contextmanager
def _script_path(path):
    """sys.path[0] is the script's folder while it runs, as under `python script.py`."""
    saved = list(sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        yield
    finally:
        sys.path[:] = saved


def _load_function(spec):
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit("FUNCTION is FILE.py:NAME, got %r" % spec)
    if not os.path.exists(_path(path)):
        raise SystemExit("no such file: %s" % path)
    if not os.path.isfile(_path(path)):
        raise SystemExit("not a Python file: %s" % path)
    try:
        with _script_path(_path(path)):
            namespace = runpy.run_path(_path(path))
    except SyntaxError as e:
        raise SystemExit("%s:%s: SyntaxError: %s" % (path, e.lineno, e.msg)) from None
    if name not in namespace:
        raise SystemExit("%s defines no %r (it defines: %s)" % (
            path, name, ", ".join(sorted(k for k in namespace if not k.startswith("_")))))
    if not callable(namespace[name]):
        raise SystemExit("%s: %s is not a function (it is of type %s)" % (
            path, name, type(namespace[name]).__name__))
    return namespace[name]


@contextlib.contextmanager
def _tracing_errors(command):
    """A function that cannot be traced is the user's error: one line, not a traceback."""
    from tf_inspector import TracingError
    try:
        yield
    except TracingError as e:
        where = " (at %s:%d)" % (e.file, e.line) if e.file else ""
        raise SystemExit("%s: %s%s" % (command, str(e).split("\n")[0], where)) from None


def _input_spec(text):
    import tensorflow as tf
    shape, _, dtype = text.partition(":")
    try:
        dims = [None if d.strip() == "?" else int(d) for d in shape.split(",") if d.strip()]
        return tf.TensorSpec(dims, tf.as_dtype(dtype or "float32"))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError("an input is SHAPE[:DTYPE] like 2,?,3:float32, got %r" % text)


def _function_command(commands, name, help, known_dims):
    """A subcommand over FILE.py:NAME traced at --input specs (every dimension known, or ? allowed)."""
    command = commands.add_parser(name, help=help)
    command.add_argument("function", help="FILE.py:NAME")
    command.add_argument("--input", action="append", default=[], type=_input_spec,
                         help="an input as SHAPE[:DTYPE]%s (repeat per argument)"
                         % (", every dimension known" if known_dims else ", e.g. 8,?:float32"))
    return command


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tf_inspector", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True)
    graph = _function_command(commands, "graph", "trace a function and show its graph node by node", False)
    graph.add_argument("--at", action="append", default=[], metavar="NAME=SIZE",
                       help="also print the costs at this size of an unknown dimension "
                            "(named batch, d1, d2... by axis), e.g. --at batch=8")
    out = graph.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--dot", action="store_true", help="print Graphviz DOT")
    out.add_argument("--svg", metavar="FILE", help="write an SVG drawing (needs Graphviz's dot)")
    xla = _function_command(commands, "xla", "XLA compile time, run time, HLO ops and fusions", True)
    xla.add_argument("--runs", type=int, default=10, help="timed runs after compiling (median)")
    xla_out = xla.add_mutually_exclusive_group()
    xla_out.add_argument("--json", action="store_true", help="print the figures as JSON")
    xla_out.add_argument("--hlo", action="store_true", help="also print the optimised HLO")
    mlir = _function_command(commands, "mlir", "TF dialect, StableHLO lowering, ops not lowered", False)
    mlir_out = mlir.add_mutually_exclusive_group()
    mlir_out.add_argument("--json", action="store_true", help="print the counts as JSON")
    mlir_out.add_argument("--tf", action="store_true", help="also print the TF dialect module")
    mlir_out.add_argument("--lowered", action="store_true", help="also print the lowered module")
    prof = _function_command(commands, "profile", "measured time per op beside FLOPs and bytes", True)
    prof.add_argument("--steps", type=int, default=10, help="profiled calls (after 2 warm-up)")
    prof.add_argument("--top", type=int, default=15, help="ops listed, slowest first")
    prof.add_argument("--json", action="store_true", help="print every measured node as JSON")
    prof.add_argument("--plot", metavar="FILE", help="write the cost-vs-time plot (PNG)")
    prof.add_argument("--model-explorer", metavar="DIR", help="write graph and node data there")
    retrace = commands.add_parser("retrace", help="run a script and explain every retrace")
    retrace.add_argument("script", help="the Python script to run")
    retrace.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = parser.parse_args(argv)

    import tf_inspector
    with _tracing_errors(args.command):
        if args.command == "graph":
            report = tf_inspector.trace_and_inspect(_load_function(args.function), *args.input)
            if args.json:
                print(report.to_json())
            elif args.dot:
                print(report.to_dot())
            elif args.svg:
                try:
                    print("wrote %s" % report.render_svg(_path(args.svg)))
                except (OSError, RuntimeError) as e:  # no such folder, no Graphviz
                    raise SystemExit("graph: cannot write %s: %s" % (
                        args.svg, getattr(e, "strerror", None) or e)) from None
            else:
                print(report.to_text())
            if args.at:
                sizes = {}
                for item in args.at:
                    name, _, size = item.partition("=")
                    if not size.isdigit():
                        raise SystemExit("graph: --at is NAME=SIZE like batch=8, got %r" % item)
                    sizes[name] = int(size)
                try:
                    costs = report.cost(**sizes)
                except ValueError as e:
                    raise SystemExit("graph: %s" % e)
                print("at %s: %d FLOPs, %d bytes moved" % (", ".join(
                    "%s=%d" % kv for kv in sizes.items()), costs["flops"], costs["bytes"]))
        elif args.command == "xla":
            try:
                cost = tf_inspector.xla_cost(_load_function(args.function), *args.input,
                                             runs=args.runs)
            except ValueError as e:
                raise SystemExit("xla: %s" % e)
            if args.json:
                print(json.dumps(cost.to_dict(), indent=2))
            else:
                print(cost.to_text())
                for label, ops in (("before:", cost.hlo_ops), ("after: ", cost.optimized_ops)):
                    print("HLO ops %s " % label + ", ".join("%s %d" % kv for kv in ops.items()))
                if args.hlo:
                    print(cost.optimized_hlo)
        elif args.command == "mlir":
            view = tf_inspector.mlir_view(_load_function(args.function), *args.input)
            if args.json:
                print(json.dumps(view.to_dict(), indent=2))
            else:
                print(view.to_text())
                if args.tf or args.lowered:
                    print(view.tf_dialect if args.tf else view.lowered)
        elif args.command == "profile":
            try:
                result = tf_inspector.profile(_load_function(args.function), *args.input,
                                              steps=args.steps)
            except ValueError as e:
                raise SystemExit("profile: %s" % e)
            print(json.dumps(result.to_dict(), indent=2) if args.json else result.to_text(args.top))
            if args.plot:
                print("wrote %s" % result.plot(_path(args.plot)))
            if args.model_explorer:
                paths = result.to_model_explorer(_path(args.model_explorer))
                print("wrote " + ", ".join(sorted(paths.values())))
        else:
            script = _path(args.script)
            if not os.path.exists(script):
                raise SystemExit("retrace: no such script: %s" % args.script)
            sys.argv = [script] + args.args
            with tf_inspector.monitor() as recorder, _script_path(script):
                try:
                    runpy.run_path(script, run_name="__main__")
                finally:
                    print(recorder.explain())


if __name__ == "__main__":
    main()
