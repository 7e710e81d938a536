"""Latency per NLI pair (batch 1) of a model's runner, and of TF models held to N threads.

    ms = latency_ms(lite.with_threads(1).run, rows)       # a TFLite interpreter: threads per model
    ms = tf_latency_ms(1, rows, saved_model=path, weights=(encoder_dir, weights_h5))
        # {"fp32": ms, "saved_model": ms}, measured in a child process

TF sizes its thread pools once, when its runtime starts in a process, so one process cannot
time a model at 1 and then at 2 threads: each thread count gets a child Python that sets
both pools to N before any op runs, then times the Keras model and the SavedModel.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def latency_ms(run, rows, repeats=1):
    """Mean milliseconds per pair, one pair per call, after one warm-up call."""
    from tf_inspector.models.classifier import pad
    batches = [pad([r]) for r in rows]
    run(*batches[0])
    began = time.perf_counter()
    for _ in range(repeats):
        for b in batches:
            run(*b)
    return 1000 * (time.perf_counter() - began) / (repeats * len(batches))


def tf_latency_ms(threads, rows, saved_model=None, weights=None, timeout=600):
    """{"fp32": ms, "saved_model": ms} per pair with TF's intra- and inter-op pools at `threads`:
    the Keras NliClassifier from weights=(encoder_dir, weights .h5) and the SavedModel's
    serve, each when given."""
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = os.path.join(tmp, "rows.npz")
        np.savez(rows_file, ids=np.concatenate([ids for ids, _ in rows]),
                 types=np.concatenate([types for _, types in rows]),
                 lengths=[len(ids) for ids, _ in rows])
        command = [sys.executable, "-m", "tf_inspector.models.latency", "--threads", str(threads),
                   "--rows", rows_file]
        if saved_model:
            command += ["--saved-model", saved_model]
        if weights:
            command += ["--encoder-dir", weights[0], "--weights", weights[1]]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode:
        raise RuntimeError("timing TF at %d threads failed:\n%s" % (threads, done.stderr[-2000:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description="Time TF models at a fixed thread count "
                                     "(tf_latency_ms's child process); prints JSON.")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--rows", required=True, help=".npz of ids, types, lengths")
    parser.add_argument("--saved-model")
    parser.add_argument("--encoder-dir")
    parser.add_argument("--weights")
    args = parser.parse_args(argv)

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from tf_inspector.models import classifier, export

    data = np.load(args.rows)
    ends = np.cumsum(data["lengths"])
    rows = list(zip(np.split(data["ids"], ends[:-1]), np.split(data["types"], ends[:-1])))
    out = {}
    if args.weights:
        model = classifier.NliClassifier.from_pretrained(args.encoder_dir)
        model.load_weights(args.weights)
        out["fp32"] = latency_ms(classifier.logits_fn(model), rows)
    if args.saved_model:
        restored = export.load_saved_model(args.saved_model)  # serve needs it alive
        out["saved_model"] = latency_ms(restored.serve, rows)
    print(json.dumps(out))


if __name__ == "__main__":
    _child()
