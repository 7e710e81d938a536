"""The models tf_inspector is tried on: a Keras BERT encoder with real MiniLM weights (bert.py,
checkpoints.py), an NLI cross-encoder on it and its fine-tuning (classifier.py, finetune.py),
SavedModel and TFLite conversions (export.py), and MNLI (nli.py, nli_eval.py). It uses the
inspector (retrace monitoring, quant_debug); the inspector never uses it."""
