"""MNLI accuracy of a fine-tuned BERT cross-encoder: FP32, SavedModel and four TFLite conversions.

    bazel run //tf_inspector/models:nli_eval -- --data-dir /path/to/mnli
    bazel run //tf_inspector/models:nli_eval -- --data-dir DIR --limit 500   # a quick look

DIR holds <split>.jsonl or GLUE <split>.tsv files. With only MNLI's dev sets at
hand, the classifier (NliClassifier: MiniLM-L6 + a linear head) is fine-tuned on
dev_mismatched and scored on dev_matched (the defaults); the fine-tuned model is
cached (finetune.py) and trained first when missing (14 minutes on an idle
2-core machine). Variants: FP32 Keras, the SavedModel round trip, and TFLite float32,
float16, dynamic-range and int8 (calibrated on 100 dev_mismatched pairs). For each:
accuracy, the delta against FP32 with a 95% paired-bootstrap interval, size,
and latency per pair at 1 and 2 threads. Then tf_inspector.quant_debug on the
int8 model: the layer where its error starts, and the accuracy with that layer
kept in float. Logits are cached per variant in the work folder, so a rerun
only computes what is missing.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

CALIBRATION_LENGTH = 48  # tokens of the int8 calibration pairs (about a third are this long)
VARIANTS = ("fp32", "saved_model", "float32", "float16", "dynamic-range", "int8")


def _log(message):
    print(message, flush=True)


def paired_delta(correct_base, correct_other, resamples=2000, seed=0):
    """Accuracy delta (points) of other vs base on the same pairs, with a 95% paired-bootstrap
    interval."""
    d = np.asarray(correct_other, np.float64) - np.asarray(correct_base, np.float64)
    rng = np.random.default_rng(seed)
    means = np.concatenate([d[rng.integers(0, len(d), (100, len(d)))].mean(axis=1)
                            for _ in range(resamples // 100)])
    low, high = np.percentile(means, [2.5, 97.5])
    return 100 * d.mean(), 100 * low, 100 * high


def _as_dict(batch):
    from tf_inspector.models.export import INPUTS
    return dict(zip(INPUTS, batch))


def run(data_dir, eval_split="dev_matched", recipe=None, limit=None, work_dir=None,
        variants=VARIANTS, cache=None, encoder_dir=None, latency_pairs=50, debug_samples=16,
        batch_size=64, recover_limit=None):
    import tensorflow as tf

    import tf_inspector
    from tf_inspector.models import classifier, export, finetune, latency, nli

    recipe = recipe or finetune.Recipe()
    encoder_dir = encoder_dir or finetune.default_encoder_dir()
    began = time.time()
    model, info = finetune.trained_model(recipe, data_dir, encoder_dir,
                                         **({"cache": cache} if cache else {}), log=_log)
    work_dir = work_dir or os.path.join(info["folder"], "eval")
    os.makedirs(work_dir, exist_ok=True)
    test = nli.load_split(data_dir, eval_split)[:limit]
    calibration = nli.load_split(data_dir, recipe.train_split)[:1000]
    tokens = classifier.PairTokenizer(os.path.join(encoder_dir, "tokenizer.json"), recipe.max_length)
    rows, labels = tokens(test), np.array([p.label for p in test])
    _log("scoring %d %s pairs (fine-tuned on %s only); work folder %s"
         % (len(test), eval_split, recipe.train_split, work_dir))

    module = export.serving_module(model)
    saved_path = os.path.join(work_dir, "saved_model")
    probe = [classifier.pad(rows[i:i + 8]) for i in (0, 8)]
    saved = export.check_saved_model(module, saved_path, probe)
    _log(saved.to_text())
    restored = export.load_saved_model(saved_path)

    # TFLite's calibrator sizes its interpreter on the first sample only, so every sample has
    # one shape: pairs at least CALIBRATION_LENGTH tokens long (or the median length, if less),
    # truncated to it (no padding).
    length = min(CALIBRATION_LENGTH, int(np.median([len(ids) for ids, _ in tokens(calibration)])))
    calibration_rows = [r for r in classifier.PairTokenizer(
        os.path.join(encoder_dir, "tokenizer.json"), length)(calibration) if len(r[0]) == length][:100]

    def representative():
        return (_as_dict(classifier.pad([r])) for r in calibration_rows)

    runners = {"fp32": classifier.logits_fn(model), "saved_model": restored.serve}
    lite = {}
    for mode in export.MODES:
        if mode in variants or mode == "float32":
            start = time.time()
            lite[mode] = export.convert_tflite(saved_path, mode, representative
                                               if mode == "int8" else None)
            _log("TFLite %s: %.1f MB (converted in %.0f s)" % (mode, lite[mode].size_bytes / 1e6,
                                                               time.time() - start))
            runners[mode] = lite[mode].run
    sizes = {"fp32": saved.size_bytes, "saved_model": saved.size_bytes}
    sizes.update({k: v.size_bytes for k, v in lite.items()})

    # TFLite float32 against TF, logits of 100 pairs.
    check = rows[:100]
    float_diff = float(np.abs(classifier.predict(lite["float32"].run, check, batch_size)
                              - classifier.predict(runners["fp32"], check, batch_size)).max())
    _log("TFLite float32 vs TF, logits of %d pairs: max |diff| %.2e (%s 1e-4)"
         % (len(check), float_diff, "within" if float_diff <= 1e-4 else "NOT within"))

    def logits(name, run_fn):
        path = os.path.join(work_dir, "%s_%s_%d.npy" % (name, eval_split, len(rows)))
        if os.path.exists(path):
            return np.load(path)
        start = time.time()
        out = classifier.predict(run_fn, rows, batch_size, desc=name)
        np.save(path, out)
        _log("%s: %d pairs in %.0f s" % (name, len(rows), time.time() - start))
        return out

    results = {}
    for name in ["fp32"] + [v for v in variants if v != "fp32"]:
        predicted = logits(name, runners[name]).argmax(-1)
        results[name] = {"accuracy": float((predicted == labels).mean()), "correct": predicted == labels,
                         "size_bytes": sizes[name]}
    base = results["fp32"]["correct"]
    for name, r in results.items():
        r["delta"], r["ci_low"], r["ci_high"] = paired_delta(base, r["correct"])

    # Latency per pair (batch 1) at 1 and 2 threads: TFLite here, TF in a child process per
    # thread count (TF fixes its thread pools when it starts).
    sample = rows[:latency_pairs]
    tf_models = {"saved_model": saved_path if "saved_model" in results else None,
                 "weights": (encoder_dir, os.path.join(info["folder"], "model.weights.h5"))}
    for threads, key in ((1, "ms_1_thread"), (2, "ms_2_threads")):
        for name, ms in latency.tf_latency_ms(threads, sample, **tf_models).items():
            results[name][key] = ms
        for name in results.keys() & lite.keys():
            results[name][key] = latency.latency_ms(lite[name].with_threads(threads).run, sample)

    debug = None
    if "int8" in results:
        width = max(len(ids) for ids, _ in rows[:debug_samples])
        samples = []
        for r in rows[:debug_samples]:
            ids, mask, types = classifier.pad([r])
            grow = ((0, 0), (0, width - ids.shape[1]))
            samples.append(_as_dict([np.pad(a, grow) for a in (ids, mask, types)]))
        report = tf_inspector.quant_debug(
            runners["fp32"], export.tflite_converter(saved_path, "int8", representative), samples)
        _log(report.to_text())
        report.plot(os.path.join(work_dir, "int8_layers.png"))
        report.model_explorer_data(os.path.join(work_dir, "int8_node_data.json"))
        with open(os.path.join(work_dir, "int8_layers.json"), "w") as f:
            f.write(report.to_json())
        with open(os.path.join(work_dir, "int8.tflite"), "wb") as f:
            f.write(lite["int8"].content)
        debug = {"report": report}
        if report.first_jump:
            # Scored on the first recover_limit pairs, beside int8 and FP32 on the same pairs.
            kept = export.TFLiteModel(report.recover(), "int8")
            n = min(recover_limit or len(rows), len(rows))
            path = os.path.join(work_dir, "int8_first_jump_in_float_%s_%d.npy" % (eval_split, n))
            if not os.path.exists(path):
                np.save(path, classifier.predict(kept.run, rows[:n], batch_size, desc="int8 fixed"))
            correct = np.load(path).argmax(-1) == labels[:n]
            recovered = {"kept_in_float": report.first_jump.tensor, "pairs": n,
                         "accuracy": float(correct.mean()), "size_bytes": kept.size_bytes,
                         "int8_accuracy": float(results["int8"]["correct"][:n].mean()),
                         "fp32_accuracy": float(base[:n].mean())}
            recovered["delta"], recovered["ci_low"], recovered["ci_high"] = paired_delta(base[:n], correct)
            debug["recovered"] = recovered

    chance = 100 * np.bincount(labels).max() / len(labels)
    _log("\n%s, %d pairs (fine-tuned on %s only); most frequent class %.2f%%" % (
        eval_split, len(labels), recipe.train_split, chance))
    _log("%-14s %9s %26s %9s %10s %10s" % ("variant", "accuracy", "delta vs FP32 [95% CI]", "MB",
                                           "ms/pair 1t", "ms/pair 2t"))
    for name, r in results.items():
        _log("%-14s %8.2f%% %+8.2f [%+6.2f, %+6.2f] %9.1f %10.1f %10.1f" % (
            name, 100 * r["accuracy"], r["delta"], r["ci_low"], r["ci_high"], r["size_bytes"] / 1e6,
            r["ms_1_thread"], r["ms_2_threads"]))
    if debug and "recovered" in debug:
        r = debug["recovered"]
        _log("int8 with %s in float, first %d pairs: %.2f%% (%+.2f [%+.2f, %+.2f] vs FP32's %.2f%%; "
             "int8 %.2f%%)" % (r["kept_in_float"], r["pairs"], 100 * r["accuracy"], r["delta"],
                              r["ci_low"], r["ci_high"], 100 * r["fp32_accuracy"],
                              100 * r["int8_accuracy"]))
    _log("total %.1f minutes" % ((time.time() - began) / 60))
    summary = {"results": {k: {m: v for m, v in r.items() if m != "correct"} for k, r in results.items()},
               "float_max_diff": float_diff, "saved_model": saved, "training": info, "debug": debug,
               "pairs": len(labels), "chance": chance}
    with open(os.path.join(work_dir, "results.json"), "w") as f:
        json.dump({k: v for k, v in summary.items() if k not in ("saved_model", "debug")}, f,
                  indent=1, default=str)
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--data-dir", required=True, help="folder with <split>.jsonl or .tsv files")
    parser.add_argument("--eval-split", default="dev_matched", help="split to score")
    parser.add_argument("--limit", type=int, help="score only the first N pairs")
    parser.add_argument("--work-dir", help="where the SavedModel, TFLite models and logits go "
                        "(default: eval/ beside the cached fine-tuned model)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, of %s (default: all)" % ", ".join(VARIANTS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--recover-limit", type=int,
                        help="score the int8 model with its first jump in float on the first N pairs")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error("unknown variants: %s" % ", ".join(sorted(unknown)))
    if args.limit is not None and args.limit < 10:
        parser.error("--limit must be at least 10")
    base = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    try:
        run(os.path.join(base, args.data_dir), args.eval_split, limit=args.limit,
            work_dir=args.work_dir and os.path.join(base, args.work_dir), variants=variants,
            batch_size=args.batch_size, recover_limit=args.recover_limit)
    except (FileNotFoundError, ValueError) as e:
        sys.exit("nli_eval: %s" % e)


if __name__ == "__main__":
    main()
