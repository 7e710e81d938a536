"""Times one training step of the digits MLP: minigrad vs PyTorch eager vs hand-written NumPy.

    bazel run //minigrad:bench
    bazel run //minigrad:bench -- --batches 64 1347 --rounds 9

A step is forward, cross-entropy, backward and an SGD update, on the CPU in
float32, at each batch size. The three are timed in interleaved rounds (the
machine's speed drifts; interleaving exposes all three to the same drift), and
the median round is reported with the ratios to PyTorch and to NumPy. The
NumPy step is the floor for any NumPy engine: the same arithmetic with no
graph at all.
"""

import argparse
import statistics
import sys
import time

import numpy as np

from minigrad import functional as F
from minigrad import nn, optim
from minigrad.tensor import Tensor
from minigrad.train import load_digits_split


def minigrad_step(x, y, sizes, lr, seed):
    model = nn.MLP(sizes, rng=np.random.default_rng(seed))
    opt = optim.SGD(model.parameters(), lr=lr)
    inputs = Tensor(x)

    def step():
        loss = F.cross_entropy(model(inputs), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def torch_step(x, y, sizes, lr, seed):
    import torch
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(),
                                torch.nn.Linear(sizes[1], sizes[2]))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    inputs, target = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = torch.nn.functional.cross_entropy(model(inputs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def numpy_step(x, y, sizes, lr, seed):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        bound = 1 / np.sqrt(fan_in)
        params += [rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                   rng.uniform(-bound, bound, fan_out).astype(np.float32)]
    w1, b1, w2, b2 = params
    n = len(y)
    rows = np.arange(n)

    def step():
        h = x @ w1.T + b1
        r = np.maximum(h, 0)
        z = r @ w2.T + b2
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, y]).mean()  # computed, as the other two compute it
        p[rows, y] -= 1
        dz = p / n
        dw2, db2 = dz.T @ r, dz.sum(axis=0)
        dh = (dz @ w2) * (h > 0)
        dw1, db1 = dh.T @ x, dh.sum(axis=0)
        for param, g in ((w1, dw1), (b1, db1), (w2, dw2), (b2, db2)):
            param -= lr * g
        return loss
    return step


IMPLEMENTATIONS = {"minigrad": minigrad_step, "torch eager": torch_step, "numpy by hand": numpy_step}


def time_steps(step, seconds):
    """Steps per round so that a round takes about `seconds`; returns (steps, seconds/step)."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count


def measure(batch, rounds, round_seconds, hidden, progress):
    x_train, y_train, _, _ = load_digits_split(seed=0)
    if batch > len(y_train):
        raise SystemExit("batch %d is larger than the training split (%d)" % (batch, len(y_train)))
    x, y = np.ascontiguousarray(x_train[:batch]), y_train[:batch]
    sizes = [x.shape[1], hidden, 10]
    steps = {name: make(x, y, sizes, 0.1, 0) for name, make in IMPLEMENTATIONS.items()}
    counts = {name: max(5, time_steps(step, round_seconds)) for name, step in steps.items()}  # warm-up
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            n = counts[name]
            start = time.perf_counter()
            for _ in range(n):
                step()
            times[name].append((time.perf_counter() - start) / n)
        progress.update()
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1347],
                        help="batch sizes (default: 64 and the full training split, 1347)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per batch size")
    parser.add_argument("--round-seconds", type=float, default=0.3,
                        help="approximate length of one implementation's round")
    args = parser.parse_args(argv)
    if min(args.batches) < 1 or args.rounds < 1 or args.round_seconds <= 0:
        parser.error("batch sizes and rounds must be positive")

    import torch
    from tqdm import tqdm

    print("digits MLP 64-%d-10, float32, one training step (forward, backward, SGD); "
          "torch %s with %d threads, numpy %s; median of %d interleaved rounds"
          % (args.hidden, torch.__version__, torch.get_num_threads(), np.__version__, args.rounds))
    results = {}
    with tqdm(total=args.rounds * len(args.batches), desc="timing", unit="round", file=sys.stderr) as bar:
        for batch in args.batches:
            results[batch] = measure(batch, args.rounds, args.round_seconds, args.hidden, bar)
    print("%8s %14s %14s %14s %18s %18s" % ("batch", "minigrad us", "torch us", "numpy us",
                                            "minigrad/torch", "minigrad/numpy"))
    for batch, t in results.items():
        mg, th, npy = t["minigrad"], t["torch eager"], t["numpy by hand"]
        print("%8d %14.1f %14.1f %14.1f %17.2fx %17.2fx"
              % (batch, mg * 1e6, th * 1e6, npy * 1e6, mg / th, mg / npy))


if __name__ == "__main__":
    main()
