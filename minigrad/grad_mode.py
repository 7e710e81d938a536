"""Whether operations are recorded for backward: no_grad() and enable_grad().

One process-wide switch, like a single-threaded torch.is_grad_enabled(): the
engine reads it on every operation, so it is a plain attribute, not a
thread-local.
"""

import functools


class _GradState:
    """The switch, and the active minigrad.func transforms (forward-mode and vmap levels),
    innermost last: Function.apply hands every operation to the innermost while there are any.

    One instance with slots, not class attributes: CPython 3.11 specializes an instance's
    slot reads, and every write of a class attribute (each backward and each operation
    writes `enabled`) invalidates the class's lookup cache, so the next read walks its dict
    (0.8% of the digits MLP step's instructions, counted by callgrind)."""

    __slots__ = ("enabled", "transforms")

    def __init__(self):
        self.enabled = True
        self.transforms = []


_State = _GradState()


def tracing():
    """Whether hlo.jit is tracing: what runs now is compiled, once, for every later call."""
    transforms = _State.transforms  # (empty outside transforms: no generator made, as the
    # engine and SGD ask on every step)
    return bool(transforms) and any(getattr(level, "traces", False) for level in transforms)


def is_grad_enabled():
    return _State.enabled


class _GradMode:
    """A context manager that is also a decorator (`@no_grad()` or `@no_grad`)."""

    mode = True

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if fn is not None:  # used bare as @no_grad
            return self(fn)
        return self

    def __enter__(self):
        self.prev = _State.enabled
        _State.enabled = self.mode

    def __exit__(self, *exc):
        _State.enabled = self.prev
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = _State.enabled
            _State.enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                _State.enabled = prev

        return wrapper


class no_grad(_GradMode):
    """Operations inside record nothing: results have requires_grad=False."""

    mode = False


class enable_grad(_GradMode):
    """Turns recording back on inside a no_grad region."""

    mode = True
