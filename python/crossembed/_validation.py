"""Boundary checks shared by every public function.

Each helper raises ``TypeError`` for the wrong kind of object and ``ValueError``
for a wrong value, and always names the offending argument, so that a user
sees ``mu_q must be finite`` instead of a crash deep inside C++.
"""

from __future__ import annotations

import numbers
import os
from typing import Optional

import numpy as np

__all__ = [
    "INT64_MAX",
    "INT_MAX",
    "as_array",
    "as_matrix",
    "as_int_matrix",
    "check_choice",
    "check_fraction",
    "check_int",
    "check_k",
    "check_num_threads",
    "check_positive",
    "check_random_state",
    "check_split_fractions",
    "default_num_threads",
    "resolve_num_threads",
    "show_int",
]

_FLOAT_KINDS = "fiu"  # float, signed and unsigned int convert losslessly enough
#: The largest value of a C ``int`` (thread counts, bins) and of ``std::int64_t`` (ids, counts).
INT_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_THREADS = INT_MAX  # the C++ side takes an int


def show_int(value: int) -> str:
    """``value`` for an error message: its digits, or its size when it has more than 20 of them
    (printing a huge int costs quadratic time and fails past 4,300 digits)."""
    if abs(value) < 10**20:
        return str(value)
    return f"{'-' if value < 0 else ''}an integer of {abs(value).bit_length()} bits"


def as_array(x, name: str) -> np.ndarray:
    """``np.asarray(x)``, with ragged or nested sequences a ValueError naming ``name``.

    numpy refuses lists whose rows differ in length (or mix numbers with
    sequences) with a message about "an inhomogeneous shape"; this says
    which argument it was.
    """
    try:
        return np.asarray(x)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"{name} must be a rectangular array (rows of equal length, no nested sequences)") from None


def _numbers_only(arr: np.ndarray, name: str, kind: type, dtype) -> np.ndarray:
    """An object array holding only Python numbers of ``kind`` (never bools) as ``dtype``.

    numpy falls back to dtype object for Python ints beyond int64 (and for
    arrays built with ``dtype=object``): such entries are out of range, a
    ValueError naming ``name``; anything else is left to the dtype check.
    """
    if arr.dtype != object or not all(isinstance(v, kind) and not isinstance(v, bool) for v in arr.flat):
        return arr
    try:
        return arr.astype(dtype)
    except (OverflowError, ValueError, TypeError):
        big = max(arr.flat, key=abs)
        shown = show_int(int(big)) if isinstance(big, numbers.Integral) else repr(big)
        raise ValueError(f"{name} has an entry out of the {np.dtype(dtype).name} range ({shown})") from None


def _integer_dtype(arr: np.ndarray, name: str) -> np.ndarray:
    """An integer array that converts to int64 without wrapping, or the error saying why not."""
    arr = _numbers_only(arr, name, numbers.Integral, np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        raise ValueError(f"{name} has an entry out of the int64 range ({show_int(int(arr.max()))})")
    return arr


def as_matrix(
    x,
    name: str,
    *,
    dtype=np.float32,
    allow_float64: bool = False,
    ndim: int = 2,
    finite: bool = True,
    nonnegative: bool = False,
    allow_empty: bool = False,
) -> np.ndarray:
    """Return ``x`` as a C-contiguous float array of ``ndim`` dimensions.

    float64 input is kept when ``allow_float64`` (kernels with a float64
    path), otherwise converted to ``dtype``. Booleans, objects and strings are
    rejected with a TypeError.
    """
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor without importing torch
        x = x.detach().cpu().numpy()
    arr = _numbers_only(as_array(x, name), name, numbers.Real, np.float64)
    if arr.dtype.kind not in _FLOAT_KINDS or arr.dtype == np.bool_:
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    out_dtype = np.float64 if (allow_float64 and arr.dtype == np.float64) else dtype
    arr = np.ascontiguousarray(arr, dtype=out_dtype)
    if not allow_empty and arr.size == 0 and (ndim < 2 or arr.shape[-1] == 0 or arr.shape[0] == 0):
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    if finite and arr.size and not _all_finite(arr):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    if nonnegative and arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative (variances)")
    return arr


def _all_finite(arr: np.ndarray) -> bool:
    """Whether every entry is finite. A NaN or inf makes the sum NaN or inf, so a finite sum
    (one SIMD pass, a third of np.isfinite's time: no boolean temporary) settles the common case;
    a sum that overflows from finite values falls back to the full test."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is not the caller's warning
        # float16 sums in float32: a large float16 array's own sum overflows, and the fallback's
        # boolean temporary is as large as the array
        total = arr.sum(dtype=np.float32 if arr.dtype == np.float16 else None)
    return bool(np.isfinite(total)) or bool(np.isfinite(arr).all())


def as_int_matrix(
    x, name: str, *, ndim: int = 2, low: int = 0, high: Optional[int] = None, copy: bool = False
) -> np.ndarray:
    """Return ``x`` as C-contiguous int64 with every entry in ``[low, high)``.

    With ``copy=True`` the result never shares memory with ``x``: the checks
    run on (and the kernels later read) a private snapshot, so another thread
    rewriting ``x`` cannot invalidate them.
    """
    if x is None:
        raise TypeError(f"{name} must be an integer array, got None")
    arr = as_array(x, name)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    arr = _integer_dtype(arr, name)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    arr = np.array(arr, dtype=np.int64, order="C", copy=True) if copy else np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size:
        if arr.min() < low:
            raise ValueError(f"{name} has an entry {arr.min()} below {low}")
        if high is not None and arr.max() >= high:
            raise ValueError(f"{name} has an entry {arr.max()} out of range (must be < {high})")
    return arr


def check_k(k, n: int, name: str = "k") -> int:
    """``k`` must be an integer with ``1 <= k <= n``."""
    k = check_int(k, name, low=1)
    if k > n:
        raise ValueError(f"{name}={show_int(k)} is larger than the number of candidates ({n})")
    return k


def check_int(value, name: str, *, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """An integer (not a bool) with ``low <= value <= high`` where those are given.

    The one check every integer argument goes through before it reaches C++
    (``high`` is then the C type's limit, e.g. :data:`INT_MAX`), so a Python
    int too large for C is a ValueError naming the argument and its range,
    never pybind11's "incompatible function arguments".
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {show_int(value)}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {show_int(value)}")
    return value


def check_bool(value, name: str, *, optional: bool = False) -> Optional[bool]:
    """A Python or numpy bool (an int or a string is a TypeError, not truthiness); ``optional``: None
    passes too."""
    if value is None and optional:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool{' or None' if optional else ''}, got {type(value).__name__}")
    return bool(value)


def check_fraction(value, name: str, *, allow_zero: bool = False) -> float:
    """A real number in ``(0, 1]`` (``[0, 1]`` with ``allow_zero``)."""
    value = check_positive(value, name, allow_zero=allow_zero)
    if value > 1:
        raise ValueError(f"{name} must be in {'[0' if allow_zero else '(0'}, 1], got {value}")
    return value


def check_choice(value, name: str, choices) -> str:
    """One of the strings in ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def default_num_threads() -> int:
    """What ``num_threads=None`` means everywhere in crossembed.

    ``$CROSSEMBED_NUM_THREADS`` when set (e.g. several jobs sharing a
    machine), otherwise every core this process may run on.
    """
    env = os.environ.get("CROSSEMBED_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"CROSSEMBED_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"CROSSEMBED_NUM_THREADS must be >= 1, got {n}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_num_threads(num_threads) -> int:
    """``num_threads`` as a thread count: ``None`` is :func:`default_num_threads`, else an int >= 1."""
    if num_threads is None:
        return default_num_threads()
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral):
        raise TypeError(f"num_threads must be an integer or None, got {type(num_threads).__name__}")
    return check_int(num_threads, "num_threads", low=1, high=MAX_THREADS)


def check_num_threads(num_threads) -> int:
    """``num_threads`` for the C++ side: 0 (its own all-cores default) for ``None`` without
    ``$CROSSEMBED_NUM_THREADS``, otherwise :func:`resolve_num_threads`."""
    if num_threads is None and not os.environ.get("CROSSEMBED_NUM_THREADS"):
        return 0
    return resolve_num_threads(num_threads)


def check_positive(value, name: str, *, allow_zero: bool = False) -> float:
    """A finite real number > 0 (>= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    return value


def check_random_state(random_state) -> np.random.Generator:
    """Like scikit-learn: None, an int seed, or a Generator."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state < 0:
        raise ValueError(f"random_state must be a non-negative seed, got {show_int(int(random_state))}")
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    raise TypeError(f"random_state must be None, an int or a numpy Generator, got {type(random_state).__name__}")


def check_split_fractions(fit_fraction, dev_fraction) -> None:
    """Two shares in [0, 1] whose sum is at most 1 (the rest is the test part)."""
    for name, val in (("fit_fraction", fit_fraction), ("dev_fraction", dev_fraction)):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(val).__name__}")
        if not 0.0 <= val <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {val}")
    if fit_fraction + dev_fraction > 1.0 + 1e-12:
        raise ValueError(f"fit_fraction + dev_fraction must be <= 1, got {fit_fraction + dev_fraction}")
