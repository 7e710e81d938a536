"""`bazel run //minigrad:bench`: every implementation it times computes the same training step,
and the bench runs end to end at a tiny size; bad arguments are usage errors."""

import os
import subprocess
import sys

import numpy as np

from minigrad import bench


def test_every_implementation_trains_the_same_model_to_the_same_losses():
    """The ratios compare like with like: the same initial parameters, data and update, so
    each implementation's losses over a few steps agree to float32 rounding."""
    x, y, sizes = bench._batch(16, 32)
    losses = {}
    for name, make in bench.IMPLEMENTATIONS.items():
        step = make(x, y, sizes, 0.5, 3)
        losses[name] = [step().item() for _ in range(4)]
    reference = losses.pop("numpy by hand")
    assert reference[-1] < reference[0] - 0.1  # it trains
    for name, got in losses.items():
        np.testing.assert_allclose(got, reference, rtol=2e-5, err_msg=name)


def test_the_jacobian_rows_compare_the_same_jacobians():
    x, y, sizes = bench._batch(1, 32)
    steps = bench.jacobians(x, y, sizes, 3)
    for name in ("jacrev", "jacfwd", "hessian"):
        mine, theirs = steps["minigrad " + name](), steps["torch.func " + name]()
        assert mine.shape == tuple(theirs.shape) == ((10, 64) if name != "hessian" else (64, 64))
        np.testing.assert_allclose(mine.data, theirs.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def run(*args):
    return subprocess.run([sys.executable, bench.__file__, *args], capture_output=True, text=True,
                          timeout=600)


def test_one_batch_prints_every_implementation_and_ratio():
    out = run("--batches", "8", "--rounds", "2", "--round-seconds", "0.01",
              "--per-example-batch", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["batch"])
    for column in ("jit us", "jax.jit us", "numpy us", "minigrad/numpy", "jit/numpy", "jit/jax.jit"):
        assert column in header
    row = lines[lines.index(header) + 1].split()
    assert row[0] == "8" and all(float(v) > 0 for v in row[1:6])
    assert "per-example gradients of the MLP, batch 4" in out.stdout
    jac = lines.index("Jacobians with respect to one example's input (64 features)")
    assert [line.split()[0] for line in lines[jac + 2:jac + 5]] == ["jacrev", "jacfwd", "hessian"]


def test_bad_arguments_are_usage_errors():
    # (--per-example-batch -5 timed x_train[:-5], 1342 examples, as "batch -5"; --hidden 0
    # raised OverflowError deep in nn.Linear)
    for bad in (["--batches", "0"], ["--rounds", "0"], ["--threads", "0"],
                ["--per-example-batch", "-5"], ["--hidden", "0"], ["--round-seconds", "nan"]):
        out = run(*bad)
        assert out.returncode == 2 and "usage:" in out.stderr, bad


def test_threads_1_gives_xla_one_intra_op_thread():
    """--threads 1 holds every row to one core: XLA's CPU client would size its intra-op pool by
    the core count, and ran batch 1347's products on a second thread (1.8x the CPU time)."""
    script = ("import os; from minigrad import bench, hlo; bench._limit_threads(1); "
              "import numpy as np; a = np.ones((512, 512), np.float32); "
              "hlo.jit(lambda a, b: (a @ b).sum())(a, a); "
              "print(sum(open('/proc/self/task/%s/comm' % t).read().strip() == 'tf_XLAEigen' "
              "for t in os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600, env={k: v for k, v in os.environ.items() if k != "PJRT_NPROC"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "1"
