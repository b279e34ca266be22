"""One place that turns user input into checked arrays, with one rule per input kind.

Every module that takes confidences, labels or pooled hidden states (features, probes,
baselines, estimators, metrics, evaluation) validates them here, so the same input is
accepted or refused the same way everywhere, with the same message:

* **confidence** (:func:`check_confidence`): a 1-D array (or an ``[n, 1]`` column) of real
  numbers in [0, 1]; NaN, +/-inf and values outside [0, 1] are refused, naming the first bad
  row. Returned as float64.
* **correct** (:func:`check_correct`): a 1-D array of booleans or 0/1 numbers; anything else
  (2, 0.5, NaN, strings) is refused, naming the first bad row. Returned as int64 0/1. With
  ``both_classes=True`` a single class is refused too (a calibrator or probe needs both).
* **states** (:func:`check_states`): a 3-D real array ``[n, L+1, d]`` with at least one
  record, two layer outputs and one hidden dimension, all finite (the first bad row named).
  Returned without copying where possible.
* **level** (:func:`check_level`): a probability-like setting (a risk level, ``max_error``,
  ``delta``, a precheck threshold, a test fraction): a real number, not a boolean or a string,
  in (0, 1) or, where the setting says so, [0, 1]; NaN and infinities are refused. Every
  refusal is one line: ``"{name} must be a number in (0, 1) ({meaning}), got {value!r}"``, the
  same from the Python API, the command line, a run config and the HTTP service.

Lengths are checked when ``n`` is given. Every error is an :class:`acute.errors.InputError`
(a ``ValueError``) whose message starts with the argument's name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InputError

__all__ = ["check_confidence", "check_correct", "check_count", "check_level", "check_states"]


def _numeric(x: Any, name: str, what: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise InputError(f"{name}: cannot be read as an array ({exc})") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_) \
            or np.iscomplexobj(arr):
        raise InputError(f"{name}: expected {what}, got dtype {arr.dtype}")
    return arr


def _check_length(arr: np.ndarray, n: int | None, name: str, allow_empty: bool) -> None:
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name}: expected length {n}, got {arr.shape[0]} entries")
    if arr.size == 0 and not allow_empty:
        raise InputError(f"{name}: is empty")


def check_count(value: Any, name: str, minimum: int = 1, default: int | None = None) -> int:
    """``value`` as an int >= ``minimum``; ``None`` gives ``default`` (when one is given). A
    zero or negative count is an error, never silently replaced by a default."""
    if value is None and default is not None:
        return int(default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_level(value: Any, name: str, meaning: str | None = None, *, closed: bool = False) -> float:
    """``value`` as a float in (0, 1), or in [0, 1] with ``closed``: the one rule of every
    probability-like setting. Booleans, strings, ``None``, NaN, infinities and values outside
    the range are an :class:`InputError` of one line naming ``name``, the range and, when given,
    what the setting means (module doc)."""
    number = (not isinstance(value, bool)) and isinstance(value, (int, float, np.integer, np.floating))
    try:
        v = float(value) if number else float("nan")
    except OverflowError:  # an int too large for a float (JSON allows one)
        v = float("nan")
    if not (0.0 <= v <= 1.0 if closed else 0.0 < v < 1.0):  # NaN fails both
        span = "[0, 1]" if closed else "(0, 1)"
        raise InputError(f"{name} must be a number in {span}{f' ({meaning})' if meaning else ''}, "
                         f"got {_shown(value)}")
    return v


def _shown(value: Any, width: int = 80) -> str:
    """``repr(value)`` for a message, cut to ``width`` characters (a client may send a huge one)."""
    if isinstance(value, int) and value.bit_length() > 4 * width:  # too long to print (or to repr)
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


def check_confidence(confidence: Any, n: int | None = None, name: str = "confidence", *,
                     allow_empty: bool = False) -> np.ndarray:
    """Validated confidences as a float64 1-D array (see the module doc for the rule)."""
    if confidence is None:
        raise InputError(f"{name} is required (the raw confidence of each record)")
    arr = _numeric(confidence, name, "numbers in [0, 1]")
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    _check_length(arr, n, name, allow_empty)
    arr = arr.astype(np.float64, copy=False)
    nan = np.isnan(arr)
    if nan.any():
        raise InputError(f"{name}: contains NaN (a non-finite value) in row {int(np.argmax(nan))}")
    bad = ~((arr >= 0.0) & (arr <= 1.0))
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{name}: values must lie in [0, 1]; row {i} is {float(arr[i])!r}")
    return arr


def check_correct(correct: Any, n: int | None = None, name: str = "correct", *,
                  both_classes: bool = False, allow_empty: bool = False) -> np.ndarray:
    """Validated labels as an int64 0/1 1-D array (see the module doc for the rule)."""
    arr = _numeric(correct, name, "booleans or 0/1 labels")
    _check_length(arr, n, name, allow_empty)
    if arr.dtype != np.bool_:
        if np.issubdtype(arr.dtype, np.floating) and np.isnan(arr).any():
            raise InputError(f"{name}: contains NaN in row {int(np.argmax(np.isnan(arr)))}")
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{name}: labels must be 0/1 or booleans; row {i} is {arr[i].item()!r}")
    y = arr.astype(np.int64)
    if both_classes and y.size and y.min() == y.max():
        which = "correct" if y[0] == 1 else "wrong"
        raise InputError(f"{name} holds a single class: all records are {which}; this needs both "
                         "correct and wrong records")
    return y


def first_nonfinite_row(arr: np.ndarray, chunk: int = 256) -> int | None:
    """Index of the first row of ``arr`` with a NaN/inf (checked in row chunks), else None."""
    for start in range(0, arr.shape[0], chunk):
        block = np.asarray(arr[start : start + chunk])
        ok = np.isfinite(block).reshape(block.shape[0], -1).all(axis=1)
        if not ok.all():
            return start + int(np.argmin(ok))
    return None


def check_states(states: Any, name: str = "states") -> np.ndarray:
    """Validated pooled hidden states ``[n, L+1, d]`` (dtype kept, no copy if possible)."""
    arr = np.asarray(states)
    if arr.ndim != 3:
        raise InputError(f"{name} must have shape [n, L+1, d]; got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InputError(f"{name} has no records (shape {arr.shape})")
    if arr.shape[1] < 2 or arr.shape[2] < 1:
        raise InputError(
            f"{name} must have at least 2 layer outputs and 1 hidden dimension; got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise InputError(f"{name} must be a real numeric array; got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad_row = first_nonfinite_row(arr)
        if bad_row is not None:
            raise InputError(f"{name} has a non-finite value (NaN or inf) in row {bad_row}")
    return arr
