"""The models tf_inspector is tried on: a Keras BERT encoder with real MiniLM weights (bert.py,
checkpoints.py), its SavedModel and TFLite conversions (export.py), and MNLI (nli.py,
nli_eval.py). It uses the inspector (export.py checks retraces with tf_inspector.watch); the
inspector never uses it."""
