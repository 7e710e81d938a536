"""Training on real digits: the loss falls at every full-batch step, test accuracy >= 95%."""

import numpy as np
import pytest

from minigrad.train import load_digits_split, main, train


def test_digits_split_is_fixed_and_standardised():
    x_train, y_train, x_test, y_test = load_digits_split(seed=0)
    assert x_train.shape == (1347, 64) and x_test.shape == (450, 64)
    np.testing.assert_allclose(x_train.mean(axis=0), 0, atol=1e-5)
    again = load_digits_split(seed=0)
    np.testing.assert_array_equal(again[1], y_train)


def test_mlp_learns_digits_with_monotone_loss():
    _, losses, accuracy = train(steps=100, seed=0)
    assert len(losses) == 100
    assert all(b < a for a, b in zip(losses, losses[1:])), "the loss rose at some step"
    assert accuracy >= 0.95


def test_cli_writes_a_loss_curve_png(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    main(["--steps", "5", "--plot", "curve.png"])
    png = (tmp_path / "curve.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert "test accuracy" in capsys.readouterr().out


def test_cli_refuses_bad_arguments_before_training(tmp_path, monkeypatch, capsys):
    """--lr nan trained 100 steps to a NaN loss; a --plot in a missing folder or of a format
    matplotlib does not write failed after training, with a traceback; --plot out wrote
    out.png and printed `out`."""
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    for bad in (["--lr", "nan"], ["--lr", "inf"], ["--seed", "-1"],
                ["--plot", "missing/curve.png"], ["--plot", "curve.txt"]):
        with pytest.raises(SystemExit) as exit_:
            main(["--steps", "1"] + bad)
        assert exit_.value.code == 2, bad
        assert "training" not in capsys.readouterr().err, bad  # (refused before the first step)
    main(["--steps", "1", "--plot", "curve"])
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.rstrip().endswith("curve.png")
