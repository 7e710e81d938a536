"""Whether operations are recorded for backward: no_grad() and enable_grad().

One process-wide switch, like a single-threaded torch.is_grad_enabled(): the
engine reads it on every operation, so it is a plain attribute, not a
thread-local.
"""

import functools


class _State:
    enabled = True
    # The active minigrad.func transforms (forward-mode and vmap levels), innermost last;
    # Function.apply hands every operation to the innermost while there are any.
    transforms = []


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
