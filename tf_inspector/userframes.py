"""Which code is the user's: for naming the user's call behind a library's traces, and the
user's line behind a tracing error.

Library code is TensorFlow, Keras, absl, the standard library and tf_inspector's own
modules (not its tests); everything else is the user's.
"""

import dataclasses
import importlib.util
import linecache
import os
import re
import sys
import sysconfig

# Decorators a library wraps its entry points in: the entry point is the frame they call.
_WRAPPER_FILES = {"traceback_utils.py", "dispatch.py", "deprecation.py", "tf_decorator.py"}
_HERE = os.path.dirname(os.path.abspath(__file__))


def _package_dir(name):
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


_LIBRARY_DIRS = tuple(d + os.sep for d in filter(None, [
    _package_dir(n) for n in ("tensorflow", "keras", "tf_keras", "absl", "tensorflow_datasets")
] + [sysconfig.get_paths()["stdlib"]]))


def is_library(filename):
    if filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen"):
        return True
    return os.path.dirname(os.path.abspath(filename)) == _HERE


def call_site():
    """'Entry.point at file.py:LINE': the library function the innermost user frame called,
    or None when no user code is on the stack."""
    frame, entry = sys._getframe(1), None  # noqa: SLF001 - cheap, and only run while tracing
    while frame is not None:
        code = frame.f_code
        if not is_library(code.co_filename):
            if entry is None:
                return None
            return "%s at %s:%d" % (entry, os.path.basename(code.co_filename), frame.f_lineno)
        if os.path.basename(code.co_filename) not in _WRAPPER_FILES and "wrapper" not in code.co_name \
                and code.co_name != "error_handler":
            entry = code.co_qualname
        frame = frame.f_back
    return None


@dataclasses.dataclass
class UserError:
    message: str   # the exception's own message, as the user wrote it
    file: str
    line: int
    function: str
    source: str    # the line's text


# TF's autograph errors: "in user code:\n\n    File "F", line N, in fn  *\n        source\n ...
# \n\n    ValueError: message".
_FRAME = re.compile(r'^    File "(?P<file>.+)", line (?P<line>\d+), in (?P<function>\S+)')


def user_error(exc):
    """The user's message and innermost user line of an error raised while tracing, or None."""
    text = str(exc)
    if text.startswith("in user code:"):
        lines = text.split("\n")
        frames = [(i, m) for i, m in enumerate(_FRAME.match(l) for l in lines) if m]
        if frames:
            i, m = frames[-1]
            rest = "\n".join(l[4:] if l.startswith("    ") else l for l in lines[i + 2:]).strip()
            return UserError(rest, m["file"], int(m["line"]), m["function"],
                             lines[i + 1].strip() if i + 1 < len(lines) else "")
    tb, found = exc.__traceback__, None
    while tb is not None:
        if not is_library(tb.tb_frame.f_code.co_filename):
            found = tb
        tb = tb.tb_next
    if found is None:
        return None
    code = found.tb_frame.f_code
    return UserError("%s: %s" % (type(exc).__name__, exc), code.co_filename, found.tb_lineno,
                     code.co_name, linecache.getline(code.co_filename, found.tb_lineno).strip())
