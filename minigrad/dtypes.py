"""Type promotion of two operands, as torch does it (minigrad's default float is float64)."""

import numpy as np

from minigrad.tensor import Tensor

# torch's dtype categories: a higher category wins regardless of size.
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _promote_types(da, db):
    """Two dtypes of equal rank: the higher category's dtype wins (int64 + float32 is float32),
    within a category the wider one (float32 + float64 is float64)."""
    ca, cb = _CATEGORY[da.kind], _CATEGORY[db.kind]
    if ca == cb or min(ca, cb) >= 2:
        return np.result_type(da, db)
    return da if ca > cb else db


def _result_dtype(a, b):
    return result_dtype(a.dtype, a.ndim > 0, b.dtype, b.ndim > 0)


def result_dtype(da, a_has_dims, db, b_has_dims):
    """torch's type promotion (combine_categories) for two arrays of different dtypes: a
    tensor with dimensions outranks a 0-d one, whose dtype counts only where its category is
    higher (float32 [n] + float64 0-d is float32, int32 [n] + float64 0-d is float64, float32
    [n] + complex128 0-d is complex64). Python numbers already promote as in torch under
    NumPy 2's rules, float64 being minigrad's default float. (Dims are given apart from the
    dtypes: under vmap, an example's 0-d operand is a batched array.)"""
    if a_has_dims == b_has_dims:
        return _promote_types(da, db)
    high, low = (da, db) if a_has_dims else (db, da)
    if high.kind == "c":
        return high
    if low.kind == "c":
        return np.result_type(high, np.complex64) if high.kind == "f" else low
    if high.kind == "f":
        return high
    if high.kind == "b" or low.kind == "f":
        return _promote_types(high, low)
    return high


def _operands(a, b):
    """The two operands' arrays (or numbers), cast to their common dtype when both are arrays.
    A boolean one is left as it is: NumPy promotes it exactly as torch does (to the other's
    dtype), in the ufunc's loop, without a cast copy (a gradient times a mask is the common
    case)."""
    # torch takes a NumPy scalar operand as the Python number it holds (float32 [n] *
    # np.float64(2) stays float32); NumPy 2 would promote by its dtype.
    x = a.data if a.__class__ is Tensor else a.item() if isinstance(a, np.generic) else a
    y = b.data if b.__class__ is Tensor else b.item() if isinstance(b, np.generic) else b
    if (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype != y.dtype
            and x.dtype.kind != "b" and y.dtype.kind != "b"):
        dtype = _result_dtype(x, y)
        x, y = x.astype(dtype, copy=False), y.astype(dtype, copy=False)
    return x, y


def can_cast(src, dst):
    """torch's canCast, which in-place operations check their result with: any cast but a
    complex into a non-complex dtype, a float into an integer or bool one, and anything but
    bool into bool (NumPy's same_kind also refuses int32 into uint8; torch does not)."""
    src, dst = np.dtype(src).kind, np.dtype(dst).kind
    return not (src == "c" and dst != "c" or src == "f" and dst in "biu"
                or src != "b" and dst == "b")


def wrapped_ints(x, y):
    """x and y with a Python int operand of an integer array made that array's dtype modulo
    its range, as torch converts it (uint8 + 300 is uint8 + 44, int8 - 129 is int8 + 127);
    NumPy 2 raises OverflowError instead. Called once a ufunc has raised it, so that the
    operations in range pay nothing. An int beyond 64 bits still raises, as in torch."""
    def wrap(v, other):
        if v.__class__ is int and isinstance(other, np.ndarray) and other.dtype.kind in "iu":
            return np.array(v, np.uint64 if v >= 1 << 63 else np.int64).astype(other.dtype)
        return v
    return wrap(x, y), wrap(y, x)


_ARRAYS = (np.ndarray, np.generic)  # (a NumPy scalar operand, not a tensor's data)


def division_operands(a, b):
    """_operands for true division: two integer (or boolean) arrays are each made float64, as
    torch makes each its default float (minigrad's is float64), not first their common
    integer dtype (int64 -1 over a uint8 tensor was 255 / u)."""
    x = a.data if a.__class__ is Tensor else a
    y = b.data if b.__class__ is Tensor else b
    if (isinstance(x, _ARRAYS) and isinstance(y, _ARRAYS) and x.dtype.kind in "biu"
            and y.dtype.kind in "biu"):
        return x.astype(np.float64), y.astype(np.float64)
    return _operands(a, b)


def floating(array):
    """array, with integers and booleans as float64: what torch's float-valued operations
    (exp, log, softmax, ...) compute them in, its default float being minigrad's float64
    (NumPy's exp of an int8 is float16, and its sigmoid would negate a uint8 modulo 256)."""
    return array if array.dtype.kind in "fc" else array.astype(np.float64)
