"""Trains a 2-layer MLP on scikit-learn's digits with minigrad, full batch.

    ./bazelw run //minigrad:train -- --steps 100 --plot loss.png

The 8x8 digits (1,797 images, 10 classes) are standardised with the training
split's statistics; the split is fixed by --seed. Prints progress (tqdm) and
the test accuracy, and writes the loss curve as a PNG.
"""

import argparse
import os
import sys

import numpy as np

from minigrad import functional as F
from minigrad import nn, optim
from minigrad.grad_mode import no_grad
from minigrad.tensor import Tensor


def load_digits_split(seed=0, dtype=np.float32):
    """(x_train, y_train, x_test, y_test): standardised, stratified 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_train)
    return (scaler.transform(x_train).astype(dtype), y_train,
            scaler.transform(x_test).astype(dtype), y_test)


def accuracy(model, x, y):
    with no_grad():
        return float((model(Tensor(x)).data.argmax(axis=1) == y).mean())


def train(steps=100, hidden=128, lr=0.5, seed=0, progress=False):
    """Full-batch gradient descent; returns (model, per-step losses, test accuracy)."""
    x_train, y_train, x_test, y_test = load_digits_split(seed)
    model = nn.MLP([x_train.shape[1], hidden, 10], rng=np.random.default_rng(seed))
    opt = optim.SGD(model.parameters(), lr=lr)
    inputs = Tensor(x_train)
    losses = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, desc="training", unit="step", file=sys.stderr)
    for _ in range(steps):
        loss = F.cross_entropy(model(inputs), y_train)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if bar is not None:
            bar.set_postfix(loss="%.4f" % losses[-1])
            bar.update()
    if bar is not None:
        bar.close()
    return model, losses, accuracy(model, x_test, y_test)


def plot(losses, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (train, full batch)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_path(parser, plot):
    """Where --plot writes, relative to where bazel run was called from: a folder that exists
    and a format matplotlib writes (PNG, its default, where the name has no extension)."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), plot)
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if not ext:
        path += ".png"
    elif ext not in FigureCanvasBase.get_supported_filetypes():
        parser.error("--plot: matplotlib writes no .%s files; use .png, .svg or .pdf" % ext)
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        parser.error("--plot: the folder %s does not exist" % folder)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="full-batch steps (default 100)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    parser.add_argument("--seed", type=int, default=0, help="split and init seed (default 0)")
    parser.add_argument("--plot", default="minigrad_digits_loss.png",
                        help="where to write the loss curve PNG (default %(default)s, relative "
                             "to the directory bazel run was called from)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.hidden < 1 or not 0 < args.lr < np.inf or args.seed < 0:
        parser.error("--steps and --hidden must be positive integers, --lr a positive finite "
                     "number and --seed not negative")
    path = _plot_path(parser, args.plot)  # (checked before training, not after it)
    _, losses, acc = train(args.steps, args.hidden, args.lr, args.seed, progress=True)
    plot(losses, path, "minigrad MLP 64-%d-10 on digits: test accuracy %.1f%%"
         % (args.hidden, 100 * acc))
    print("loss %.4f -> %.4f over %d steps; test accuracy %.2f%%; loss curve: %s"
          % (losses[0], losses[-1], len(losses), 100 * acc, path))


if __name__ == "__main__":
    main()
