"""Times one training step of the digits MLP (minigrad eager, minigrad jit through XLA, jax.jit,
PyTorch eager, hand-written NumPy), per-example gradients (minigrad vmap(grad), torch.func
vmap(grad), a Python loop of minigrad grad calls), and Jacobians with respect to one example's
input (minigrad.func's jacrev, jacfwd, hessian against torch.func's).

    ./bazelw run //minigrad:bench
    ./bazelw run //minigrad:bench -- --batches 64 1347 --rounds 9 --threads 1 --clock cpu

A step is forward, cross-entropy, backward and an SGD update, on the CPU in
float32, at each batch size. The jit step is the same step traced into
StableHLO and compiled by XLA (minigrad.hlo); jax.jit compiles the same step
written in jax.numpy through the same XLA: the peer that shows what XLA's CPU
runtime costs at each size. Every implementation starts from the same
parameters and computes the same step (a test checks that their losses agree).
Implementations are timed in interleaved rounds (the machine's speed drifts;
interleaving exposes all of them to the same drift): the times are the median
round's, each ratio the median of the rounds' ratios with its 95% bootstrap
interval (kernels/paired.py), so that drift between rounds cancels and a run
says when it cannot tell two implementations apart. The NumPy step is the floor
for any NumPy engine: the same arithmetic with no graph at all. --threads caps
the BLAS, torch and XLA thread pools (default 1: on a shared 2-core machine,
spinning thread pools measure the load, not the code). --clock cpu times the
process's CPU time instead of the wall clock: on a machine that other jobs
share, it leaves out the time the process waited for a core (it counts every
thread of the process, so XLA's worker threads are in the jit steps' time).
"""

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

from kernels.paired import paired_ratio
from minigrad import functional as F
from minigrad import func, hlo, nn, optim
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
        return loss
    return step


def _mlp_logits(params, x):
    """The digits MLP's logits as a function of its parameters [w1, b1, w2, b2]."""
    w1, b1, w2, b2 = params
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def _mlp_loss(params, x, y):
    return F.cross_entropy(_mlp_logits(params, x), y)


def _initial_params(sizes, seed):
    model = nn.MLP(sizes, rng=np.random.default_rng(seed))  # the eager step's initialisation
    return [p.data.copy() for layer in model.layers for p in (layer.weight, layer.bias)]


def jit_step(x, y, sizes, lr, seed):
    def train(params, x, y):
        grads, loss = func.grad(lambda ps: (lambda l: (l, l))(_mlp_loss(ps, x, y)), has_aux=True)(params)
        return loss, [p - lr * g for p, g in zip(params, grads)]
    compiled = hlo.jit(train, donate_argnums=0)  # (as the jax.jit step donates them)
    state = [_initial_params(sizes, seed)]

    def step():
        # The parameters go back as the tensors jit returned, as a training loop passes them:
        # their device buffers, never read on the host, XLA's to reuse (hlo.jit).
        loss, state[0] = compiled(state[0], x, y)
        return loss
    return step


def jax_step(x, y, sizes, lr, seed):
    import jax
    import jax.numpy as jnp

    def loss_of(params, x, y):
        w1, b1, w2, b2 = params
        logits = jnp.maximum(x @ w1.T + b1, 0) @ w2.T + b2
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1).mean()

    # Parameters donated, as a jax training loop does: XLA updates them in place.
    @functools.partial(jax.jit, donate_argnums=0)
    def train(params, x, y):
        loss, grads = jax.value_and_grad(loss_of)(params, x, y)
        return loss, [p - lr * g for p, g in zip(params, grads)]
    state = [[jnp.array(p) for p in _initial_params(sizes, seed)]]

    def step():
        loss, state[0] = train(state[0], x, y)
        return loss.block_until_ready()  # (a no-op under main's synchronous dispatch)
    return step


def torch_step(x, y, sizes, lr, seed):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1], dtype=torch.float32),
                                torch.nn.ReLU(),
                                torch.nn.Linear(sizes[1], sizes[2], dtype=torch.float32))
    with torch.no_grad():
        for p, value in zip(model.parameters(), _initial_params(sizes, seed)):
            p.copy_(torch.from_numpy(value))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    inputs, target = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = torch.nn.functional.cross_entropy(model(inputs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def numpy_step(x, y, sizes, lr, seed):
    w1, b1, w2, b2 = _initial_params(sizes, seed)
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


IMPLEMENTATIONS = {"minigrad": minigrad_step, "minigrad jit": jit_step, "jax.jit": jax_step,
                   "torch eager": torch_step, "numpy by hand": numpy_step}


def per_example_grads(x, y, sizes, seed):
    """Three ways to the gradient of each example's loss, for the same MLP and batch."""
    import torch
    import torch.func as tf
    params = _initial_params(sizes, seed)
    one = lambda ps, xi, yi: _mlp_loss(ps, xi[None], yi[None])
    mg_params, mx, my = [Tensor(p) for p in params], Tensor(x), Tensor(y)
    batched = func.vmap(func.grad(one), in_dims=(None, 0, 0))
    single = func.grad(one)

    def torch_one(ps, xi, yi):
        w1, b1, w2, b2 = ps
        h = torch.relu(torch.nn.functional.linear(xi[None], w1, b1))
        return torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, w2, b2), yi[None])
    t_params, tx, ty = [torch.from_numpy(p) for p in params], torch.from_numpy(x), torch.from_numpy(y)
    t_batched = tf.vmap(tf.grad(torch_one), in_dims=(None, 0, 0))
    return {"minigrad vmap(grad)": lambda: batched(mg_params, mx, my),
            "torch.func vmap(grad)": lambda: t_batched(t_params, tx, ty),
            "minigrad loop of grad": lambda: [single(mg_params, mx[i], my[i]) for i in range(len(y))]}


def jacobians(x, y, sizes, seed):
    """The Jacobian of the MLP's logits and the Hessian of its loss with respect to one
    example's input (a saliency map and its curvature), by minigrad.func and torch.func."""
    import torch
    import torch.func as tf
    import torch.nn.functional as tF
    params = _initial_params(sizes, seed)
    mg, th = [Tensor(p) for p in params], [torch.from_numpy(p) for p in params]

    def th_logits(xi):
        w1, b1, w2, b2 = th
        return tF.linear(torch.relu(tF.linear(xi, w1, b1)), w2, b2)
    target = torch.from_numpy(y[:1])
    pairs = {"jacrev": (func.jacrev(lambda xi: _mlp_logits(mg, xi)), tf.jacrev(th_logits)),
             "jacfwd": (func.jacfwd(lambda xi: _mlp_logits(mg, xi)), tf.jacfwd(th_logits)),
             "hessian": (func.hessian(lambda xi: _mlp_loss(mg, xi[None], y[:1])),
                         tf.hessian(lambda xi: tF.cross_entropy(th_logits(xi[None]), target)))}
    mx, tx = Tensor(x[0]), torch.from_numpy(x[0])
    steps = {}
    for name, (mine, theirs) in pairs.items():
        steps["minigrad " + name] = functools.partial(mine, mx)
        steps["torch.func " + name] = functools.partial(theirs, tx)
    return steps


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_steps(step, seconds):
    """How many steps fill about `seconds` of wall time."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count


def _batch(batch, hidden):
    x_train, y_train, _, _ = load_digits_split(seed=0)
    if batch > len(y_train):
        raise SystemExit("batch %d is larger than the training split (%d)" % (batch, len(y_train)))
    return np.ascontiguousarray(x_train[:batch]), y_train[:batch], [x_train.shape[1], hidden, 10]


def measure(steps, rounds, round_seconds, progress, clock=time.perf_counter):
    """Seconds (by `clock`) per call of each function in `steps`, one figure per interleaved round."""
    for step in steps.values():
        step()  # the first call compiles the jit step: counted below, it would size that round to 5 steps
    counts = {name: max(5, time_steps(step, round_seconds)) for name, step in steps.items()}  # warm-up
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            n = counts[name]
            start = clock()
            for _ in range(n):
                step()
            times[name].append((clock() - start) / n)
        progress.update()
    return times


def _ratio(numerators, denominators):
    median, low, high = paired_ratio(numerators, denominators)
    return "%.2fx (%.2f-%.2f)" % (median, low, high)


def _limit_threads(threads):
    """Caps the BLAS, torch and XLA thread pools (XLA's before jax is imported), and runs jax.jit's
    calls on the calling thread."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               + ("false" if threads == 1 else "true")).strip()
    # XLA's CPU clients size their intra-op pool by PJRT_NPROC, else the core count, and run a
    # large step's products on it whatever the flag above says: at batch 1347, one thread,
    # both jit rows took 1.8x the CPU time of a one-thread pool (1552 against 842 us a step)
    # for a wall time no shorter (961 against 936 us; Intel Xeon family 6 model 167).
    os.environ["PJRT_NPROC"] = str(threads)
    import jax
    # jax.jit runs each call on the calling thread, as minigrad's jit does (hlo._cpu_client): its
    # default hands each call to a worker thread, a second core the other steps do not get.
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    import torch
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(threads)
    threadpool_limits(threads)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1347],
                        help="batch sizes (default: 64 and the full training split, 1347)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per batch size")
    parser.add_argument("--round-seconds", type=float, default=0.3,
                        help="approximate length of one implementation's round")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for BLAS, torch and XLA (default 1)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time (default) or the process's CPU time")
    parser.add_argument("--per-example-batch", type=int, default=64,
                        help="batch of the per-example-gradient row (default 64; 0 skips it)")
    parser.add_argument("--jacobians", action=argparse.BooleanOptionalAction, default=True,
                        help="time jacrev, jacfwd and hessian against torch.func (default on)")
    args = parser.parse_args(argv)
    if (min(args.batches) < 1 or args.rounds < 1 or not 0 < args.round_seconds < np.inf
            or args.threads < 1 or args.hidden < 1 or args.per_example_batch < 0):
        parser.error("batch sizes, rounds, threads, --hidden and --round-seconds must be "
                     "positive, --per-example-batch not negative")
    _limit_threads(args.threads)

    import torch
    from tqdm import tqdm

    print("digits MLP 64-%d-10, float32; torch %s, numpy %s, %d thread(s) each; median of %d "
          "interleaved rounds, %s time" % (args.hidden, torch.__version__, np.__version__,
                                           args.threads, args.rounds, args.clock))
    clock = CLOCKS[args.clock]
    results = {}
    total = args.rounds * (len(args.batches) + (args.per_example_batch > 0) + args.jacobians)
    with tqdm(total=total, desc="timing", unit="round", file=sys.stderr) as bar:
        for batch in args.batches:
            x, y, sizes = _batch(batch, args.hidden)
            steps = {name: make(x, y, sizes, 0.1, 0) for name, make in IMPLEMENTATIONS.items()}
            results[batch] = measure(steps, args.rounds, args.round_seconds, bar, clock)
        if args.per_example_batch:
            x, y, sizes = _batch(args.per_example_batch, args.hidden)
            per_example = measure(per_example_grads(x, y, sizes, 0), args.rounds, args.round_seconds,
                                  bar, clock)
        if args.jacobians:
            x, y, sizes = _batch(1, args.hidden)
            jacs = measure(jacobians(x, y, sizes, 0), args.rounds, args.round_seconds, bar, clock)
    med = statistics.median
    print("\none training step (forward, backward, SGD); ratios: median of the rounds' and its 95% interval")
    print("%6s %11s %8s %10s %9s %9s %21s %21s %21s %21s" % (
        "batch", "minigrad us", "jit us", "jax.jit us", "torch us", "numpy us", "minigrad/torch",
        "minigrad/numpy", "jit/numpy", "jit/jax.jit"))
    for batch, t in results.items():
        mg, jit, jx, th, npy = (t[k] for k in ("minigrad", "minigrad jit", "jax.jit", "torch eager",
                                               "numpy by hand"))
        print("%6d %11.1f %8.1f %10.1f %9.1f %9.1f %21s %21s %21s %21s"
              % (batch, med(mg) * 1e6, med(jit) * 1e6, med(jx) * 1e6, med(th) * 1e6, med(npy) * 1e6,
                 _ratio(mg, th), _ratio(mg, npy), _ratio(jit, npy), _ratio(jit, jx)))
    if args.per_example_batch:
        t = per_example
        vm, tv, loop = (t[k] for k in ("minigrad vmap(grad)", "torch.func vmap(grad)",
                                       "minigrad loop of grad"))
        print("\nper-example gradients of the MLP, batch %d" % args.per_example_batch)
        print("%13s %13s %9s %21s %21s" % ("vmap(grad) us", "torch.func us", "loop us",
                                           "loop/vmap(grad)", "vmap(grad)/torch.func"))
        print("%13.1f %13.1f %9.1f %21s %21s" % (med(vm) * 1e6, med(tv) * 1e6, med(loop) * 1e6,
                                                _ratio(loop, vm), _ratio(vm, tv)))

    if args.jacobians:
        print("\nJacobians with respect to one example's input (%d features)" % sizes[0])
        print("%9s %12s %14s %21s" % ("transform", "minigrad us", "torch.func us",
                                      "minigrad/torch.func"))
        for name in ("jacrev", "jacfwd", "hessian"):
            mine, theirs = jacs["minigrad " + name], jacs["torch.func " + name]
            print("%9s %12.1f %14.1f %21s" % (name, med(mine) * 1e6, med(theirs) * 1e6,
                                              _ratio(mine, theirs)))


if __name__ == "__main__":
    main()
