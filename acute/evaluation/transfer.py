"""Does a probe trained on one task still work on another? Transfer tables and MMLU
leave-subjects-out.

* :func:`transfer_table`: for every pair of tasks (A, B) of one model, fit each estimator on all
  of A's records and score B's; the diagonal (A, A) is A's own out-of-fold score (stratified
  k-fold grouped by id). Every cell is evaluated by :func:`acute.evaluation.table.evaluate_predictions`
  with Platt scaling fitted on the *same* training records as the reference, so a cell's
  difference answers "is the transferred probe better than transferring a calibration of the
  raw confidence?"; raw confidence (no fitting at all) is in every cell too.
* :func:`leave_subjects_out`: MMLU records grouped by subject; each fold holds out whole
  subjects (:func:`subject_folds`), so every record is scored by estimators that never saw its
  subject. Random folds of the same size are scored next to it: the gap between the two is what
  unseen subjects cost.

Inputs are stores (anything with ``ids``, ``correct``, ``raw_confidence``, ``layer_means`` and,
for subjects, ``records``); outputs are JSON-ready dicts. :func:`transfer_markdown` and
:func:`subjects_markdown` render them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP
from ..estimators.inputs import Inputs
from ..estimators.registry import DEFAULT_ESTIMATOR, ESTIMATORS
from .predictions import store_arrays
from .table import evaluate_predictions
from .crossval import check_folds, cross_val_predictions, cv_folds, fit_predict

__all__ = ["REFERENCE", "leave_subjects_out", "subject_folds", "subjects_markdown", "transfer_markdown",
           "transfer_table"]

#: what every transferred estimator is compared with (fitted on the same training records)
REFERENCE = "platt"


def _arrays(store, label: str) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    ids, y, conf = store_arrays(store, label)  # checks labels, confidences and their lengths
    lm = np.asarray(store.layer_means, dtype=np.float32)
    if lm.shape[0] != len(ids):
        raise InputError(f"{label}: {lm.shape[0]} layer_means rows but {len(ids)} records")
    if y.min() == y.max():
        raise InputError(f"{label}: every record is {'correct' if y[0] else 'wrong'}; a probe needs both classes")
    return ids, y, conf, lm


def _names(estimators: Sequence[str]) -> list[str]:
    for name in estimators:
        if name not in ESTIMATORS:
            hint = (" (transfer reads the mean states only: no @POOLING)" if "@" in str(name) else "")
            raise InputError(f"unknown estimator {name!r}{hint}; choose from {', '.join(ESTIMATORS)}")
    return list(dict.fromkeys([*estimators, REFERENCE]))


def _rows(preds: Mapping[str, np.ndarray], conf: np.ndarray, y: np.ndarray, n_bootstrap: int,
          seed: int) -> list[dict]:
    return evaluate_predictions({**preds, "raw": conf}, y, n_bootstrap=n_bootstrap, seed=seed,
                                reference=REFERENCE)


def transfer_table(stores: Mapping[str, Any], estimators: Sequence[str] = (DEFAULT_ESTIMATOR,), *,
                   cv: int = 5, seed: int = 0, n_bootstrap: int = DEFAULT_N_BOOTSTRAP, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None,
                   progress: Callable[[Iterable], Iterable] | None = None) -> dict[str, Any]:
    """Train on each task, test on every task (see the module docstring).

    ``stores``: task name -> store of one model (same layers and hidden size). Returns
    ``{"tasks", "estimators", "reference", "cells"}``; a cell is ``{"train", "test", "mode"
    ("cv" on the diagonal, else "transfer"), "n_train", "n_test", "rows"}`` with the metric rows
    of :func:`acute.evaluation.table.evaluate_predictions` (``raw`` included; differences to
    :data:`REFERENCE`). Raises ``ValueError`` for fewer than two tasks, a task with one class,
    stores of different shapes or an unknown estimator.
    """
    if len(stores) < 2:
        raise InputError(f"transfer needs at least two tasks, got {list(stores)}")
    names = _names(estimators)
    data = {t: _arrays(s, f"task {t!r}") for t, s in stores.items()}
    shapes = {t: d[3].shape[1:] for t, d in data.items()}
    if len(set(shapes.values())) > 1:
        raise InputError(f"the stores hold different layer shapes (not one model?): {shapes}")
    fit_kw = dict(random_state=seed, n_jobs=n_jobs, probe_params=probe_params)
    cells = []
    tasks = list(stores)
    it: Iterable = tasks if progress is None else progress(tasks)
    for a in it:
        ids, y, conf, lm = data[a]
        check_folds(y, cv, f"task {a!r}")
        X = Inputs.of(lm, conf)
        oof = cross_val_predictions(names, X, y, cv_folds(ids, y, n_splits=cv, seed=seed), **fit_kw)
        cells.append({"train": a, "test": a, "mode": "cv", "n_train": y.size, "n_test": y.size,
                      "rows": _rows({n: p[0] for n, p in oof.items()}, conf, y, n_bootstrap, seed)})
        others = [b for b in tasks if b != a]
        tested = Inputs.of(np.concatenate([data[b][3] for b in others]), np.concatenate([data[b][2] for b in others]))
        preds = fit_predict(names, X, y, tested, **fit_kw)
        start = 0
        for b in others:
            _, yb, cb, _ = data[b]
            part = slice(start, start + yb.size)
            start += yb.size
            cells.append({"train": a, "test": b, "mode": "transfer", "n_train": y.size, "n_test": yb.size,
                          "rows": _rows({n: p[part] for n, p in preds.items()}, cb, yb, n_bootstrap, seed)})
    return {"tasks": tasks, "estimators": names, "reference": REFERENCE, "cells": cells}


def subject_folds(subjects: Sequence[str], n_splits: int = 5, repeats: int = 2,
                  seed: int = 0) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """``repeats`` lists of ``n_splits`` (train, test) index pairs in which every test fold is a
    set of whole subjects: the subjects are shuffled (seed ``seed + repeat``) and dealt into
    ``n_splits`` groups of (nearly) equal count. Raises ``ValueError`` with fewer subjects than
    folds."""
    subjects = np.asarray([str(s) for s in subjects])
    unique = np.unique(subjects)
    if n_splits < 2 or unique.size < n_splits:
        raise InputError(f"leave-subjects-out needs at least {max(n_splits, 2)} subjects and 2 folds; "
                         f"got {unique.size} subject(s) and n_splits={n_splits}")
    out = []
    for r in range(repeats):
        order = np.random.default_rng(seed + r).permutation(unique)
        rep = []
        for group in np.array_split(order, n_splits):
            held = np.isin(subjects, group)
            rep.append((np.flatnonzero(~held), np.flatnonzero(held)))
        out.append(rep)
    return out


def leave_subjects_out(store, estimators: Sequence[str] = (DEFAULT_ESTIMATOR,), *, n_splits: int = 5,
                       repeats: int = 2, seed: int = 0, n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
                       n_jobs: int | None = None, probe_params: Mapping[str, Any] | None = None,
                       subject_key: str = "subject") -> dict[str, Any]:
    """Score every record with estimators trained on other subjects, and with random folds of the
    same count (see the module docstring). Subjects come from ``record["meta"][subject_key]``.

    Returns ``{"n_subjects", "n_splits", "repeats", "modes": {"subjects held out": rows,
    "random folds": rows}}`` (rows of :func:`acute.evaluation.table.evaluate_predictions`, differences to
    :data:`REFERENCE`). Raises ``ValueError`` when a record has no subject.
    """
    names = _names(estimators)
    ids, y, conf, lm = _arrays(store, "store")
    subjects = []
    for rec in store.records:
        subject = (rec.get("meta") or {}).get(subject_key)
        if subject is None:
            raise InputError(f"record {rec.get('id')!r} has no meta[{subject_key!r}] (not an MMLU store?)")
        subjects.append(subject)
    fit_kw = dict(random_state=seed, n_jobs=n_jobs, probe_params=probe_params)
    modes = {}
    for mode, folds in (("subjects held out", subject_folds(subjects, n_splits, repeats, seed)),
                        ("random folds", cv_folds(ids, y, n_splits=n_splits, n_repeats=repeats, seed=seed))):
        modes[mode] = _rows(cross_val_predictions(names, Inputs.of(lm, conf), y, folds, **fit_kw), conf, y,
                            n_bootstrap, seed)
    return {"n_records": int(y.size), "n_subjects": len(set(subjects)), "n_splits": n_splits,
            "repeats": repeats, "estimators": names, "reference": REFERENCE, "modes": modes}


# ----------------------------------------------------------------------------- markdown
def _value(row: Mapping[str, Any] | None, key: str) -> str:
    if row is None or not math.isfinite(row.get(key, math.nan)):
        return "n/a"
    return f"{row[key]:.3f}"


def _diff(row: Mapping[str, Any] | None, key: str = "auc_euro_all") -> str:
    if row is None or f"diff_{key}" not in row:
        return "n/a"
    d = f"{row[f'diff_{key}']:+.3f}"
    lo, hi = row.get(f"diff_{key}_ci_low"), row.get(f"diff_{key}_ci_high")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return d
    mark = "**" if lo > 0 or hi < 0 else ""
    return f"{mark}{d} [{lo:+.3f}, {hi:+.3f}]{mark}"


def _row_of(cell: Mapping[str, Any], estimator: str) -> Mapping[str, Any] | None:
    return next((r for r in cell["rows"] if r["estimator"] == estimator), None)


def transfer_markdown(table: Mapping[str, Any], estimator: str = DEFAULT_ESTIMATOR) -> str:
    """Two tables (rows = training task, columns = test task): ``estimator``'s auc-euro (all) with
    raw confidence's in parentheses, and its difference to :data:`REFERENCE` fitted on the same
    training task (95% paired bootstrap interval; bold when it excludes 0). The diagonal is the
    task's own cross-validated score."""
    tasks = list(table["tasks"])
    cell = {(c["train"], c["test"]): c for c in table["cells"]}
    head = "| train \\ test | " + " | ".join(tasks) + " |"
    rule = "|---|" + "---|" * len(tasks)
    auc = [head, rule]
    diff = [head, rule]
    for a in tasks:
        vals, diffs = [], []
        for b in tasks:
            c = cell.get((a, b))
            row = None if c is None else _row_of(c, estimator)
            raw = None if c is None else _row_of(c, "raw")
            text = f"{_value(row, 'auc_euro_all')} ({_value(raw, 'auc_euro_all')})"
            vals.append(f"*{text}*" if a == b else text)
            diffs.append(_diff(row))
        auc.append(f"| {a} | " + " | ".join(vals) + " |")
        diff.append(f"| {a} | " + " | ".join(diffs) + " |")
    return "\n".join([
        f"auc-euro (all) of `{estimator}` trained on the row's task, scored on the column's "
        "(raw confidence in parentheses; diagonal, in italics: the task's own out-of-fold score):", "",
        *auc, "",
        f"`{estimator}` minus {REFERENCE} fitted on the same training records (auc-euro all, 95% "
        "paired bootstrap interval; bold: the interval excludes 0):", "", *diff, ""])


def subjects_markdown(result: Mapping[str, Any], estimator: str = DEFAULT_ESTIMATOR) -> str:
    """One row per fold scheme: auc-euro (all) and smECE of ``estimator``, of :data:`REFERENCE`
    and of raw confidence, and ``estimator`` minus the reference."""
    lines = ["| folds | " + f"{estimator} auc-euro | {REFERENCE} auc-euro | raw auc-euro | "
             f"{estimator} smECE | {REFERENCE} smECE | {estimator} - {REFERENCE} (auc-euro) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for mode, rows in result["modes"].items():
        by = {r["estimator"]: r for r in rows}
        lines.append(f"| {mode} | {_value(by.get(estimator), 'auc_euro_all')} | "
                     f"{_value(by.get(REFERENCE), 'auc_euro_all')} | {_value(by.get('raw'), 'auc_euro_all')} | "
                     f"{_value(by.get(estimator), 'smece')} | {_value(by.get(REFERENCE), 'smece')} | "
                     f"{_diff(by.get(estimator))} |")
    return "\n".join(lines) + "\n"
