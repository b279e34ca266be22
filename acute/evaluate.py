"""Evaluation of every confidence estimator: the paper-style results table, cross-validated.

``evaluate_store`` fits the six baselines (on raw confidence), the six ACUTE probes, their
stacked variants and ``auto`` (see :mod:`acute.estimators`) and scores held-out records. By
default every record is scored out of fold by repeated stratified k-fold cross-validation
(5 folds x 2 repeats, grouped by record id); a single split by id and a separate test store
are options. It writes:

* ``results.md``   Markdown table: rows = estimators; accuracy, smECE, auc-euro low/med/high/all,
                   Brier, AUROC; bootstrap 95% intervals shown as ``0.812 [0.790, 0.830]``; a last
                   column with each estimator's auc-euro (all) minus the best baseline's and its
                   paired bootstrap interval.
* ``results.csv``  the same numbers (and intervals, and paired differences) one row per estimator.
* ``results.json`` everything, with the folds or split (seed, sizes, id hashes) and
                   ``"complete": true``; it is moved into place last, so it never describes a run
                   that crashed.
* ``folds.json``   (cross-validation) each record's test fold in each repeat; ``split.json``
                   (single split / test store) the train and test ids.
* ``predictions.csv`` id, correct (0/1) and every estimator's confidence on the test records
  (cross-validation: every record, out of fold, repeat 0; ``predictions-repeat<r>.csv`` for the
  other repeats).
* ``euro_curves.png`` (every estimator) and ``reliability_<estimator>.png`` (every estimator, or
  only raw, the best baseline and the best activation-based estimator with ``reliability="best"``).

``evaluate_predictions`` computes the metric rows from confidences alone (no fitting, no files).
"""

from __future__ import annotations

import logging
import csv
import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ._util import fsync_dir, json_ready
from .baselines import BASELINES, check_confidence, check_correct
from .features import NAMED_LAYERS
from .metrics import METRIC_SPECS, METRICS
from .controls import CONTROLS, within_group_auroc
from .estimators import (ACUTE_VARIANTS, ESTIMATORS, estimator_input, estimator_pooling,
                         is_estimator, make_estimator)
from .errors import InputError
from .intervals import bias_shifted_interval, bootstrap_p_value, corrected_t_test, fold_differences

__all__ = [
    "ACUTE_VARIANTS",
    "ESTIMATORS",
    "EvaluationResult",
    "evaluate_predictions",
    "evaluate_store",
    "best_estimators",
    "make_estimator",
    "results_markdown",
    "split_ids",
]

logger = logging.getLogger(__name__)

# The default cross-validation of ``evaluate_store``: 5-fold stratified, repeated twice.
DEFAULT_FOLDS = 5
DEFAULT_REPEATS = 2

# (column key, table header, direction: +1 higher is better, -1 lower is better, 0 neither),
# from the one list of metric specs (acute.metrics.METRIC_SPECS)
TABLE_COLUMNS: tuple[tuple[str, str, int], ...] = tuple((m.name, m.header, m.direction) for m in METRIC_SPECS)
# the controls that calibrate the confidence with more knowledge: the strongest honest references
CONFIDENCE_CONTROLS: tuple[str, ...] = ("platt+meta", "tfidf+platt")
# metrics with bootstrap intervals
_INTERVAL_KEYS: tuple[str, ...] = ("smece", "auc_euro_all", "brier", "auroc")


# ----------------------------------------------------------------------------- split
def _unit_hash(seed: int, record_id: Any) -> float:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_ids(ids: Sequence[Any], test_fraction: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic train/test split by record id.

    A record is in the test split when ``sha256(f"{seed}:{id}")`` read as a number in [0, 1) is
    below ``test_fraction``. Its side therefore depends only on its own id and the seed: not on the
    order of ``ids``, nor on which other records exist (a store that grows keeps its old split). The
    test share is ``test_fraction`` in expectation (binomial spread around it).

    Returns ``(train_mask, test_mask)``, complementary boolean arrays aligned with ``ids``.
    ``test_fraction`` must be in [0, 1); ids must be unique (``ValueError`` otherwise).
    """
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= float(test_fraction) < 1.0):
        raise InputError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    ids = list(ids)
    if len(set(map(str, ids))) != len(ids):
        seen: set[str] = set()
        dup = next(str(i) for i in ids if str(i) in seen or seen.add(str(i)))
        raise InputError(f"ids must be unique to split by id; {dup!r} occurs more than once")
    u = np.array([_unit_hash(seed, i) for i in ids], dtype=np.float64)
    test = u < float(test_fraction)
    return ~test, test


def _ids_digest(ids: Iterable[Any]) -> str:
    """sha256 of the sorted ids (one per line): identifies a split's records regardless of order."""
    return hashlib.sha256("\n".join(sorted(map(str, ids))).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- metrics rows
def _metric_fns() -> dict:
    return {m.name: m.fn for m in METRIC_SPECS if m.fn is not None}


def _best_baseline(rows: Sequence[dict], extra: Sequence[str] = ()) -> str | None:
    """The best row among the baselines (and ``extra`` names): highest auc-euro all, then lowest
    smECE (the order of :data:`acute.metrics.METRIC_SPECS`' directions)."""
    cand = [r for r in rows if (r["estimator"] in BASELINES or r["estimator"] in extra)
            and math.isfinite(r.get("auc_euro_all", math.nan))]
    if not cand:
        return None
    return max(cand, key=lambda r: (r["auc_euro_all"], -r.get("smece", 0.0)))["estimator"]


def evaluate_predictions(confidences: Mapping[str, np.ndarray], correct, n_bootstrap: int = 1000,
                         seed: int = 0, reference: str | None = None,
                         folds: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]] | None = None,
                         groups: Sequence[Any] | None = None) -> list[dict]:
    """Metric rows for already-computed confidences on one labelled set (pure: no fitting, no files).

    Each value of ``confidences`` is ``[n]`` (one prediction per record) or ``[repeats, n]``
    (out-of-fold predictions of repeated cross-validation); a metric is then the mean over
    repeats of the metric on each repeat (:func:`acute.crossval.cv_metric`).

    Returns one dict per entry of ``confidences`` (in its order) with ``estimator``, ``uses``
    (what the row may use), ``n``, ``repeats``, ``accuracy`` (of ``correct``; the same for
    every row), ``smece``, ``auc_euro_low``, ``auc_euro_med``, ``auc_euro_high``,
    ``auc_euro_all``, ``brier``, ``auroc``, and, when ``n_bootstrap > 0``, 95% bootstrap
    intervals ``<metric>_ci_low`` / ``<metric>_ci_high`` for ``smece``, ``auc_euro_all``,
    ``brier`` and ``auroc`` (percentile intervals; smECE's shifted by the bootstrap's bias so it
    contains its estimate: :func:`acute.intervals.bias_shifted_interval`). Every estimator (and
    every repeat) sees the same resampled records (:func:`acute.metrics.bootstrap_indices` with
    ``seed``). With a ``constant`` row, every row has ``skill`` = (auc-euro - constant's) /
    (1 - constant's). With ``groups`` (one value per record) every row has
    ``within_group_auroc`` (:func:`acute.controls.within_group_auroc`).

    Paired comparisons: ``reference`` (default: the best baseline among the rows, highest
    ``auc_euro_all``) is subtracted from every row: ``diff_auc_euro_all`` and ``diff_smece``
    with paired intervals ``diff_<metric>_ci_low/_high`` from the same resamples, the bootstrap
    p-value ``diff_<metric>_boot_p``, and ``reference`` names it. With ``folds`` (the
    cross-validation's, one list per repeat) each difference also gets the corrected resampled
    t-interval over the fold x repeat differences (Nadeau and Bengio 2003):
    ``diff_<metric>_t_low/_high`` and ``diff_<metric>_t_p``. When the rows include the
    metadata or text controls, the same columns compare every row with the best of the
    baselines and those controls (``meta_reference``; ``diff_meta_auc_euro_all`` ...). Without
    a baseline among the rows (and no ``reference``) there are no differences. Metrics
    undefined on the data (AUROC with one class) are NaN.
    """
    from . import metrics
    from .crossval import cv_metric, cv_metric_draws

    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise InputError(f"n_bootstrap must be a non-negative int, got {n_bootstrap!r}")
    if not confidences:
        raise InputError("confidences is empty: nothing to evaluate")
    y = np.asarray(correct)
    if y.ndim != 1 or y.size == 0:
        raise InputError(f"correct must be a non-empty 1-d array, got shape {y.shape}")
    y = check_correct(y, y.size)
    preds: dict[str, np.ndarray] = {}
    for name, conf in confidences.items():
        c = np.atleast_2d(np.asarray(conf, dtype=np.float64))
        if c.ndim != 2:
            raise InputError(f"confidences[{name!r}] must be [n] or [repeats, n], got shape {np.shape(conf)}")
        if c.shape[1] != y.size:
            raise InputError(f"confidences[{name!r}] has {c.shape[1]} entries but correct has {y.size}")
        for row in c:
            check_confidence(row, name=f"confidences[{name!r}]")
        preds[str(name)] = c
    if reference is not None and reference not in preds:
        raise InputError(f"reference {reference!r} is not among the evaluated estimators {list(preds)}")
    if folds is not None and len(folds) != next(iter(preds.values())).shape[0]:
        raise InputError(f"folds has {len(folds)} repeats but the predictions have "
                         f"{next(iter(preds.values())).shape[0]}")
    fns = _metric_fns()
    rows = []
    for name, c in preds.items():
        row: dict[str, Any] = {"estimator": name, "uses": estimator_uses(name), "n": int(y.size),
                               "repeats": int(c.shape[0]), "accuracy": float(y.mean())}
        for key, fn in fns.items():
            row[key] = cv_metric(fn, c, y)
        if groups is not None:
            row["within_group_auroc"] = float(np.mean([within_group_auroc(r, y, groups)[0] for r in c]))
        rows.append(row)
    by_name = {r["estimator"]: r for r in rows}
    if "constant" in by_name:
        base = by_name["constant"]["auc_euro_all"]
        for row in rows:
            row["skill"] = (row["auc_euro_all"] - base) / (1 - base) if base < 1 else math.nan
    ref = reference if reference is not None else _best_baseline(rows)
    meta_ref = _best_baseline(rows, CONFIDENCE_CONTROLS) if any(n in preds for n in CONFIDENCE_CONTROLS) else None
    if n_bootstrap == 0 and ref is None:
        return rows
    index = metrics.bootstrap_indices(y.size, int(n_bootstrap), seed) if n_bootstrap > 0 else None
    draws: dict[str, dict[str, np.ndarray]] = {}
    for row in rows:
        name = row["estimator"]
        keys = _INTERVAL_KEYS if n_bootstrap > 0 else ()
        draws[name] = {}
        for key in set(keys) | ({"auc_euro_all", "smece"} if ref is not None and n_bootstrap > 0 else set()):
            if not math.isfinite(row[key]):
                draws[name][key] = np.full(int(n_bootstrap), np.nan)
                continue
            draws[name][key] = cv_metric_draws(fns[key], preds[name], y, index)
        for key in keys:
            if key == "smece":
                row[f"{key}_ci_low"], row[f"{key}_ci_high"] = bias_shifted_interval(row[key], draws[name][key])
            else:
                row[f"{key}_ci_low"], row[f"{key}_ci_high"] = _percentiles(draws[name][key])
    ratio = None
    if folds is not None:
        n_te = np.mean([len(te) for rep in folds for _, te in rep])
        ratio = float(n_te / (y.size - n_te))
    for prefix, r_name in (("diff", ref), ("diff_meta", meta_ref)):
        if r_name is None:
            continue
        for row in rows:
            row["reference" if prefix == "diff" else "meta_reference"] = r_name
            for key in ("auc_euro_all", "smece"):
                if prefix == "diff_meta" and key == "smece":
                    continue
                col = f"{prefix}_{key}"
                row[col] = row[key] - by_name[r_name][key]
                if n_bootstrap > 0:
                    d = draws[row["estimator"]][key] - draws[r_name][key]
                    row[f"{col}_ci_low"], row[f"{col}_ci_high"] = _percentiles(d)
                    row[f"{col}_boot_p"] = bootstrap_p_value(d) if row["estimator"] != r_name else math.nan
                if ratio is not None and row["estimator"] != r_name:
                    t = corrected_t_test(fold_differences(fns[key], preds[row["estimator"]], preds[r_name], y, folds),
                                         ratio)
                    row[f"{col}_t_low"], row[f"{col}_t_high"], row[f"{col}_t_p"] = t.low, t.high, t.p_value
    return rows


def estimator_uses(name: str) -> str:
    """What an evaluation row may use, in words (the table's "uses" column)."""
    from .controls import CONTROL_USES

    base = name.split("@", 1)[0]
    if base in CONTROL_USES:
        return CONTROL_USES[base]
    if base == "raw":
        return "confidence"
    if base in BASELINES:
        return "confidence (fitted)"
    if not is_estimator(name):
        return "given"
    spec = estimator_pooling(name) or "mean"
    return f"answer states ({spec}) + confidence"


def _percentiles(stats: np.ndarray) -> tuple[float, float]:
    from .metrics import percentile_interval

    return percentile_interval(stats)[:2]


# ----------------------------------------------------------------------------- result
@dataclass
class EvaluationResult:
    """What ``evaluate_store`` computed and wrote.

    ``rows``: one metrics dict per estimator (see :func:`evaluate_predictions`, plus ``layer``
    for searched layers and ``chosen`` for ``auto``); ``predictions``: confidence per estimator on
    ``test_ids`` (in cross-validation: every record, out of fold, repeat 0); ``cv_predictions``:
    ``[repeats, n]`` per estimator in cross-validation, else None; ``test_correct``; ``split``:
    mode, seed, folds or test fraction, sizes and id hashes; ``files``: name -> path.
    """

    rows: list[dict]
    predictions: dict[str, np.ndarray]
    test_ids: list
    test_correct: np.ndarray
    split: dict
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    cv_predictions: dict[str, np.ndarray] | None = None
    skipped: dict[str, str] = field(default_factory=dict)

    def row(self, estimator: str) -> dict:
        """The metrics row of one estimator (``KeyError`` if it was not evaluated)."""
        for r in self.rows:
            if r["estimator"] == estimator:
                return r
        raise KeyError(estimator)

    def to_markdown(self) -> str:
        return results_markdown(self.rows)


def _fmt(row: dict, key: str) -> str:
    spec = METRICS[key]
    v = row.get(key)
    if v is None or not math.isfinite(v):
        return "n/a"
    lo, hi = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return f"{spec.format(v)} [{spec.format(lo)}, {spec.format(hi)}]"
    return spec.format(v)


def _fmt_diff(row: dict, prefix: str = "diff", ref_key: str = "reference") -> str:
    v = row.get(f"{prefix}_auc_euro_all")
    if v is None or not math.isfinite(v):
        return "n/a"
    if row["estimator"] == row.get(ref_key):
        return "(reference)"

    def interval(kind: str) -> tuple[float, float] | None:
        lo, hi = row.get(f"{prefix}_auc_euro_all_{kind}low"), row.get(f"{prefix}_auc_euro_all_{kind}high")
        return (lo, hi) if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) else None

    boot, t = interval("ci_"), interval("t_")
    text = f"{v:+.3f}"
    for iv in (boot, t):
        if iv is not None:
            text += f" [{iv[0]:+.3f}, {iv[1]:+.3f}]"
    above = [iv for iv in (boot, t) if iv is not None]
    return f"**{text}**" if above and all(iv[0] > 0 for iv in above) else text


def results_markdown(rows: Sequence[dict]) -> str:
    """The paper-style Markdown table of metric rows (best value per column in bold; ties bold too).

    Intervals are 95% bootstrap intervals, shown as ``estimate [low, high]``. ACUTE rows with a
    chosen layer show it after the name, e.g. ``acute-late (layer 5)``, and ``auto`` its pick;
    the second column says what each row may use. With a ``constant`` row a skill column
    follows; with groups, the within-group AUROC. When the rows carry paired differences
    (:func:`evaluate_predictions`), a column gives each estimator's auc-euro (all) minus the
    reference's with its paired bootstrap interval and, after cross-validation, the corrected
    t-interval over folds x repeats; bold when every interval lies above zero. A last column
    does the same against the best of the baselines and the metadata / text controls."""
    ref = next((r.get("reference") for r in rows if r.get("reference")), None)
    meta_ref = next((r.get("meta_reference") for r in rows if r.get("meta_reference")), None)
    has_skill = any("skill" in r for r in rows)
    has_wg = any("within_group_auroc" in r for r in rows)
    extra = (["skill"] if has_skill else []) + (["within-group AUROC"] if has_wg else []) \
        + ([f"Δ auc-euro all vs {ref}"] if ref else []) + ([f"Δ vs {meta_ref} (best with metadata/text)"]
                                                        if meta_ref and meta_ref != ref else [])
    header = "| Estimator | uses | " + " | ".join([h for _, h, _ in TABLE_COLUMNS] + extra) + " |"
    sep = "|---|---|" + "|".join("---:" for _ in list(TABLE_COLUMNS) + extra) + "|"
    best: dict[str, float] = {}
    for key, _, direction in TABLE_COLUMNS:
        vals = [r[key] for r in rows if r.get(key) is not None and math.isfinite(r[key])]
        if direction and vals:
            best[key] = max(vals) if direction > 0 else min(vals)
    lines = [header, sep]
    for r in rows:
        name = r["estimator"] + (f" (layer {r['layer']})" if r.get("layer") is not None else "")
        if r.get("chosen"):
            name += f" ({r['chosen']})"
        cells = [r.get("uses", "")]
        for key, _, _ in TABLE_COLUMNS:
            s = _fmt(r, key)
            if key in best and r.get(key) is not None and round(r[key], 3) == round(best[key], 3):
                s = f"**{s}**"
            cells.append(s)
        if has_skill:
            v = r.get("skill")
            cells.append("n/a" if v is None or not math.isfinite(v) else f"{v:+.3f}")
        if has_wg:
            v = r.get("within_group_auroc")
            cells.append("n/a" if v is None or not math.isfinite(v) else f"{v:.3f}")
        if ref:
            cells.append(_fmt_diff(r))
        if meta_ref and meta_ref != ref:
            cells.append(_fmt_diff(r, "diff_meta", "meta_reference"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def best_estimators(rows: Sequence[dict]) -> dict[str, str]:
    """The best baseline and the best activation-based estimator (a plain or stacked probe, or
    ``auto``; never a control) among metric rows: highest ``auc_euro_all``, ties broken by lower ``smece``.
    Returns ``{"baseline": name, "acute": name}`` with only the groups that have rows with a
    finite ``auc_euro_all``."""
    out = {}
    for group in ("baseline", "acute"):
        cand = [r for r in rows if r["estimator"] not in CONTROLS
                and (r["estimator"] in BASELINES) == (group == "baseline")
                and math.isfinite(r.get("auc_euro_all", math.nan))]
        if cand:
            best = max(cand, key=lambda r: (r["auc_euro_all"], -r.get("smece", 0.0)))
            out[group] = best["estimator"]
    return out



# ----------------------------------------------------------------------------- inputs
def _store_arrays(store, label: str) -> tuple[list, np.ndarray, np.ndarray]:
    ids = list(store.ids)
    n = len(ids)
    if n == 0:
        raise InputError(f"{label} has no records")
    try:
        correct = check_correct(np.asarray(store.correct), n, name=f"{label}.correct")
        conf = check_confidence(store.raw_confidence, name=f"{label}.raw_confidence")
    except ValueError as e:
        raise InputError(f"{label}: {e}") from None
    if conf.size != n:
        raise InputError(f"{label}.raw_confidence has {conf.size} entries but {label}.ids has {n}")
    return ids, correct, conf


def _check_layer_means(store, n: int, label: str) -> tuple[int, ...]:
    shape = tuple(store.layer_means.shape)
    if len(shape) != 3 or shape[0] != n:
        raise InputError(f"{label}.layer_means must have shape [n={n}, L+1, d], got {shape}")
    if hasattr(store, "check_finite"):  # a Store names the record and shard of a NaN
        store.check_finite()
    return shape[1:]


def _inner_folds(name: str, probe_params: Mapping[str, Any] | None) -> int:
    """How many stratified folds a probe (or ``auto``) runs inside its own fit (0: none)."""
    est = make_estimator(name, probe_params=probe_params)
    params = est.get_params()
    if name == "auto" or params.get("calibration") is not None or params.get("layer") in ("early", "mid", "late") \
            or params.get("view") in ("early", "mid", "late"):
        return int(params.get("cv", 0))
    return 0


def _check_probe_inputs(names: Sequence[str], shape: tuple[int, ...], n_train: int, n_minority: int,
                        probe_params: Mapping[str, Any] | None, where: str) -> None:
    """Fail before any fitting when a probe cannot run on training sets of ``n_train`` records
    whose smaller class has ``n_minority``: too few records for the folds the probes run inside
    their own fit, or more PCA components than the hidden size or the records allow."""
    probes = [n for n in names if estimator_pooling(n) is not None]
    if not probes:
        return
    inner = {n: _inner_folds(n, probe_params) for n in probes}
    need = max(inner.values())
    if need and n_minority < need:
        which = ", ".join(n for n, k in inner.items() if k == need)
        raise InputError(f"{which} run stratified {need}-fold cross-validation inside their fit, which "
                         f"needs at least {need} correct and {need} wrong training records; {where} "
                         f"has only {n_minority} of one class: collect more records or leave them out")
    folds = max(int(make_estimator(n, probe_params=probe_params).get_params().get("cv", 0)) for n in probes)
    if n_train < folds:
        raise InputError(f"{where} has {n_train} records, fewer than the probes' {folds} "
                         "cross-validation folds; collect more records")
    hidden = shape[1]
    for n in probes:
        view = make_estimator(n, probe_params=probe_params).get_params().get("view", "")
        if str(view).startswith("pca") and int(view[3:]) > min(hidden, n_train):
            raise InputError(f"{n} needs {view[3:]} principal components but the hidden size is {hidden} "
                             f"and {where} has {n_train} records; leave {n} out of estimators")


def _check_names(estimators: Sequence[str] | None) -> list[str]:
    names = list(ESTIMATORS if estimators is None else estimators)
    if not names:
        raise InputError("estimators is empty: nothing to evaluate")
    unknown = [n for n in names if not is_estimator(n)]
    if unknown:
        raise InputError(f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)} "
                         "(a probe name may end in @POOLING, e.g. acute-cosine-stacked@last-answer)")
    if len(set(names)) != len(names):
        raise InputError(f"estimators contains duplicates: {names}")
    return names


class _FitLog:
    """What the fits chose (a searched layer, auto's pick) and how long they took, per estimator."""

    def __init__(self):
        self.layers: dict[str, list[int]] = {}
        self.chosen: dict[str, list[str]] = {}

    def __call__(self, name: str, est: Any) -> None:
        layer = getattr(est, "layer_", None)
        params = est.get_params()
        searched = params.get("layer") in NAMED_LAYERS or params.get("view") in NAMED_LAYERS
        if isinstance(layer, (int, np.integer)) and searched:
            self.layers.setdefault(name, []).append(int(layer))
        best = getattr(est, "best_", None)
        if isinstance(best, str):
            self.chosen.setdefault(name, []).append(best)

    def row_extra(self, name: str) -> dict:
        layers, chosen = self.layers.get(name), self.chosen.get(name)
        out: dict[str, Any] = {"layer": None}
        if layers:
            out["layer"] = max(set(layers), key=lambda v: (layers.count(v), -v))
            out["layers"] = layers
        if chosen:
            out["chosen"] = max(set(chosen), key=lambda v: (chosen.count(v), v))
            out["chosen_per_fit"] = chosen
        return out


# ----------------------------------------------------------------------------- main entry
def evaluate_store(store, test_store=None, out_dir: str | os.PathLike | None = None, *,
                   out: str | os.PathLike | None = None,
                   estimators: Sequence[str] | None = None, cv: int | None = DEFAULT_FOLDS,
                   repeats: int = DEFAULT_REPEATS, test_fraction: float | None = None, seed: int = 0,
                   n_bootstrap: int = 1000, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None, progress: bool = True,
                   reliability: str | Sequence[str] = "all", allow_overlap: bool = False,
                   controls: bool | Sequence[str] = True, group_by: str | None = None,
                   metadata_fields: Sequence[str] | None = None,
                   fold_cache: str | os.PathLike | None = None) -> EvaluationResult:
    """Fit every estimator on training records, predict held-out records, report and write.

    ``store`` (and ``test_store``) need ``.ids``, ``.correct``, ``.raw_confidence``,
    ``.layer_means`` [n, L+1, d] and optionally ``.manifest`` (as :class:`acute.store.Store`).
    Three modes:

    * cross-validation (default): ``repeats`` x stratified ``cv``-fold, grouped by record id
      (:func:`acute.crossval.cv_folds`, seed ``seed + repeat``); every record is predicted out
      of fold in every repeat and a metric is the mean over repeats;
    * single split (``test_fraction`` given, or ``cv=None``/``0``): records split by
      :func:`split_ids` (``test_fraction``, default 0.3, and ``seed``);
    * separate test store (``test_store`` given): all of ``store`` trains, ``test_store`` tests;
      record ids in both are an error unless ``allow_overlap``.

    ``estimators``: names from ``ESTIMATORS`` (default: all). ``probe_params`` go to every
    ``ActivationProbe`` (e.g. ``{"n_estimators": 20}``), ``n_jobs`` too; ``random_state=seed``.
    Every row carries its paired difference to the best baseline (``diff_auc_euro_all``,
    ``diff_smece``, with paired bootstrap intervals; see :func:`evaluate_predictions`).
    ``controls`` (default: all of :data:`acute.controls.CONTROLS`, or a list, or False) are
    added as rows; a control the store cannot feed (no metadata, no prompt texts, no
    last-prompt states) is left out and the reason recorded in ``results.json``'s
    ``skipped``, never filled in. ``metadata_fields`` (default: the store's task's
    ``metadata_fields``) are the record ``meta`` keys the ``platt+meta`` control one-hots and
    whose first field groups the within-group AUROC. ``group_by`` (a metadata field) makes the
    cross-validation folds keep each value of that field on one side of every split
    (leave-category-out); every record must have it. ``fold_cache`` (a folder) keeps each
    cross-validation fold's predictions as it finishes, so a killed evaluation resumes fold by
    fold (:func:`acute.crossval.cross_val_predictions`).
    ``out_dir`` (alias ``out``) receives the files listed in the module docstring;
    ``reliability`` says which estimators get a ``reliability_<name>.png``: ``"all"`` (default),
    ``"best"`` (raw, the best baseline and the best activation-based estimator) or a list.

    Raises ``ValueError`` when a class has fewer records than the folds need (the message says
    how many), the training split has a single class, the test split is empty, or inputs are
    malformed. Returns an :class:`EvaluationResult`.
    """
    if out_dir is None:
        out_dir = out
    elif out is not None and Path(out) != Path(out_dir):
        raise InputError(f"give out_dir or out, not two different paths ({out_dir!s}, {out!s})")
    if out_dir is None:
        raise InputError("out_dir is required: where results.md/.csv/.json and plots go")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise InputError(f"n_bootstrap must be a non-negative int, got {n_bootstrap!r}")
    out_dir = Path(out_dir)
    names = _check_names(estimators)
    reliability = _check_reliability(reliability, names)
    fields = _metadata_fields(store, metadata_fields)
    wanted = _check_controls(controls, names)
    usable, skipped = usable_controls(store, wanted, fields)
    if test_store is not None and usable:
        usable, more = usable_controls(test_store, usable, fields, "the test store")
        skipped.update(more)
    for name, why in skipped.items():
        logger.warning("control %s left out: %s", name, why)
    names = names + usable
    cv_mode = test_store is None and test_fraction is None and cv
    if group_by is not None and not cv_mode:
        raise InputError("group_by needs cross-validation (no test_fraction, no test store)")
    log = _FitLog()
    fit_kw = dict(random_state=seed, n_jobs=n_jobs, probe_params=probe_params, on_fit=log,
                  metadata_fields=fields)
    if cv_mode:
        pred = _cross_validated(store, names, cv, repeats, seed, progress, fit_kw, group_by, fold_cache)
    else:
        pred = _held_out(store, test_store, names, 0.3 if test_fraction is None else test_fraction,
                         seed, fit_kw, allow_overlap)
    group_field = group_by or (fields[0] if fields else None)
    groups, group_note = _groups_of(test_store if test_store is not None else store, group_field, pred.ids)
    rows = evaluate_predictions(pred.cv_predictions if pred.cv_predictions is not None else pred.predictions,
                                pred.correct, n_bootstrap=n_bootstrap, seed=seed, folds=pred.folds,
                                groups=groups)
    for r in rows:
        r.update(log.row_extra(r["estimator"]))
    result = EvaluationResult(rows=rows, predictions=pred.predictions, test_ids=list(pred.ids),
                              test_correct=pred.correct.astype(bool), split=pred.split, out_dir=out_dir,
                              cv_predictions=pred.cv_predictions, skipped=skipped)
    params = {"estimators": names, "n_bootstrap": int(n_bootstrap), "n_jobs": n_jobs,
              "probe_params": dict(probe_params or {}), "total_seconds": pred.seconds,
              "controls": usable, "skipped": skipped, "metadata_fields": list(fields),
              "group_by": group_by, "within_group": group_note,
              "interval": "95% percentile bootstrap over records (paired: the same resamples for every "
                          "estimator and repeat); smECE's interval is shifted by the bootstrap bias "
                          "(draws - (mean(draws) - estimate)) so it is centred on its estimate",
              "t_interval": "corrected resampled t (Nadeau and Bengio 2003) over the fold x repeat "
                            "differences, variance (1/J + n_test/n_train) s^2, t with J - 1 df"}
    manifest = getattr(store, "manifest", None)
    test_manifest = getattr(test_store, "manifest", None) if test_store is not None else None
    if reliability == "all":
        plot_names = names
    elif reliability == "best":
        plot_names = [n for n in names if n in best_estimators(rows).values() or n == "raw"]
    else:
        plot_names = reliability
    result.files = _write_outputs(result, list(pred.train_ids), params, manifest, test_manifest, plot_names,
                                  pred.fold_of)
    sp = result.split
    what = (f"{sp['n_splits']}-fold x {sp['n_repeats']} cross-validation on {sp['n_records']} records"
            if sp["mode"] == "cv" else f"{sp['n_train']} train / {sp['n_test']} test records")
    logger.info("evaluation of %d estimators (%s) written to %s", len(names), what, out_dir.resolve())
    return result


def _check_reliability(reliability, names: Sequence[str]):
    if isinstance(reliability, str):
        if reliability not in ("all", "best"):
            raise InputError(f"reliability must be 'all', 'best' or a list of estimator names, got {reliability!r}")
        return reliability
    reliability = list(reliability)
    missing = [n for n in reliability if n not in names]
    if missing:
        raise InputError(f"reliability names {missing} are not among the evaluated estimators {names}")
    return reliability


def _metadata_fields(store, given: Sequence[str] | None) -> tuple[str, ...]:
    """``given``, else the metadata fields the store's task declares (none when unknown)."""
    if given is not None:
        if isinstance(given, str):
            raise InputError(f"metadata_fields must be a list of field names, got the string {given!r}")
        return tuple(given)
    from .tasks import TASKS

    task = (getattr(store, "manifest", None) or {}).get("task")
    cls = TASKS.get(task) if isinstance(task, str) else None
    return tuple(getattr(cls, "metadata_fields", ())) if cls is not None else ()


def _check_controls(controls, names: Sequence[str]) -> list[str]:
    if controls is True:
        wanted = list(CONTROLS)
    elif controls is False or controls is None:
        wanted = []
    else:
        wanted = list(controls)
        unknown = [c for c in wanted if c not in CONTROLS]
        if unknown:
            raise InputError(f"unknown control(s) {unknown}; choose from {', '.join(CONTROLS)}")
    return [c for c in wanted if c not in names]


def usable_controls(store, wanted: Sequence[str], fields: Sequence[str],
                    label: str = "the store") -> tuple[list[str], dict[str, str]]:
    """The controls of ``wanted`` that ``store`` can feed, and ``{control: reason}`` for the
    others: ``platt+meta`` needs the metadata ``fields`` on every record, ``tfidf+platt`` the
    records' prompts, ``question-only`` the last-prompt states."""
    from .controls import metadata_matrix

    usable, skipped = [], {}
    records = getattr(store, "records", None)
    for name in wanted:
        why = None
        if name == "platt+meta":
            if not fields:
                why = (f"{label}'s task declares no metadata fields (name them with metadata_fields / "
                       "--meta-fields)")
            elif records is None:
                why = f"{label} has no records to read metadata from"
            else:
                try:
                    metadata_matrix(records, fields, where=label)
                except InputError as e:
                    why = str(e)
        elif name == "tfidf+platt":
            if records is None:
                why = f"{label} has no records to read prompts from"
            else:
                bad = next((r.get("id") for r in records if not isinstance(r.get("prompt"), str)), None)
                if bad is not None or not records:
                    why = f"{label}: record {bad!r} has no prompt text"
        elif name == "question-only":
            if "last-prompt" not in tuple(getattr(store, "poolings", ("mean",))):
                why = (f"{label} has no last-prompt states (collected before acute kept them): "
                       "`acute rerecord STORE --out NEW_STORE` adds them")
        if why is None:
            usable.append(name)
        else:
            skipped[name] = why
    return usable, skipped


def _record_field(store, field: str, ids: Sequence[Any], label: str = "the store") -> list[str]:
    """``meta[field]`` of the records ``ids`` (in that order); an error names the first record
    without it."""
    records = getattr(store, "records", None)
    if records is None:
        raise InputError(f"{label} has no records: cannot read the metadata field {field!r}")
    by_id = {str(r.get("id")): r for r in records}
    out = []
    for rid in ids:
        meta = (by_id.get(str(rid)) or {}).get("meta") or {}
        if meta.get(field) is None:
            raise InputError(f"{label}: record {rid!r} has no metadata field {field!r}")
        out.append(str(meta[field]))
    return out


def _groups_of(store, field: str | None, ids: Sequence[Any]) -> tuple[list[str] | None, dict | None]:
    """The groups of the within-group AUROC (``field`` of every evaluated record) and a note of
    them (field, number of groups, the groups with one class, which have no AUROC); ``(None,
    note)`` with the reason when some record lacks the field."""
    if field is None:
        return None, None
    try:
        groups = _record_field(store, field, ids)
    except InputError as e:
        return None, {"field": field, "left_out": str(e)}
    return groups, {"field": field, "n_groups": len(set(groups))}


@dataclass
class _Predictions:
    """What a mode of :func:`evaluate_store` predicted: confidences on ``ids`` (``correct``),
    per repeat in cross-validation, plus the split's description."""

    ids: list
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    split: dict
    train_ids: list
    seconds: float
    cv_predictions: dict[str, np.ndarray] | None = None
    fold_of: list | None = None
    folds: list | None = None


def _cross_validated(store, names, cv, repeats, seed, progress, fit_kw, group_by=None,
                     fold_cache=None) -> _Predictions:
    """Every record scored out of fold by repeated stratified k-fold grouped by id (or by the
    metadata field ``group_by``)."""
    from tqdm.auto import tqdm

    from .crossval import check_folds, cross_val_predictions, cv_folds, states_for

    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    ids, correct, conf = _store_arrays(store, "store")
    check_folds(correct, cv, "the store")
    groups = None if group_by is None else _record_field(store, group_by, ids)
    folds = cv_folds(ids, correct, n_splits=cv, n_repeats=repeats, seed=seed, groups=groups,
                     group_name="record ids" if group_by is None else f"values of {group_by!r}")
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        n_min = min(int(min(correct[tr].sum(), tr.size - correct[tr].sum())) for rep in folds for tr, _ in rep)
        n_tr = min(tr.size for rep in folds for tr, _ in rep)
        _check_probe_inputs(names, shape, n_tr, n_min, fit_kw["probe_params"], "a training fold")
    lm = states_for(store, names, fields) if any(estimator_input(n) is not None for n in names) else None

    def bar(it):
        return tqdm(it, desc=f"{cv}-fold x {repeats}", disable=not progress, file=sys.stderr)

    t0 = time.perf_counter()
    manifest = getattr(store, "manifest", None) or {}
    key = json.dumps({"ids": _ids_digest(ids), "fields": list(fields),
                      **{k: manifest.get(k) for k in ("model", "model_weights", "task", "task_settings",
                                                       "generation", "dtype", "poolings")}},
                     sort_keys=True, default=str)
    cv_preds = cross_val_predictions(names, lm, correct, conf, folds, progress=bar, cache_dir=fold_cache,
                                     cache_key=key, **fit_kw)
    split = {"mode": "cv", "seed": int(seed), "n_splits": int(cv), "n_repeats": int(repeats),
             "n_records": len(ids), "accuracy": float(correct.mean()), "group_by": group_by,
             "ids_sha256": _ids_digest(ids), "folds_file": "folds.json"}
    return _Predictions(ids, correct, {n: p[0] for n, p in cv_preds.items()}, split, ids,
                        time.perf_counter() - t0, cv_preds, [_fold_index(rep, len(ids)) for rep in folds], folds)


def _held_out(store, test_store, names, test_fraction, seed, fit_kw, allow_overlap=False) -> _Predictions:
    """Fit on the training records (a split by id, or all of ``store``), score the test ones."""
    from .crossval import fit_predict, states_for, take_rows

    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    ids, correct, conf = _store_arrays(store, "store")
    if test_store is not None:
        mode = "test_store"
        t_ids, t_correct, t_conf = _store_arrays(test_store, "test_store")
        i_tr, i_te, te_store = np.arange(len(ids)), np.arange(len(t_ids)), test_store
        train_ids, y_tr, c_tr = ids, correct, conf
        eval_ids, y_te, c_te = t_ids, t_correct, t_conf
    else:
        mode = "split"
        train_mask, test_mask = split_ids(ids, test_fraction=test_fraction, seed=seed)
        i_tr, i_te, te_store = np.flatnonzero(train_mask), np.flatnonzero(test_mask), store
        train_ids, y_tr, c_tr = [ids[i] for i in i_tr], correct[i_tr], conf[i_tr]
        eval_ids, y_te, c_te = [ids[i] for i in i_te], correct[i_te], conf[i_te]
    if not eval_ids:
        raise InputError(f"the test split is empty (n={len(ids)}, test_fraction={test_fraction}, "
                         f"seed={seed}); use more records or a larger test_fraction")
    if not train_ids:
        raise InputError("the training split is empty")
    if y_tr.min() == y_tr.max():
        raise InputError(f"the training split has a single class (all {len(train_ids)} records "
                         f"{'correct' if y_tr[0] else 'incorrect'}); calibrators need both")
    lm_tr = lm_te = None
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        if test_store is not None:
            t_shape = _check_layer_means(test_store, len(eval_ids), "test_store")
            if t_shape != shape:
                raise InputError(f"store.layer_means is [n, {shape[0]}, {shape[1]}] but test_store's is "
                                 f"[n, {t_shape[0]}, {t_shape[1]}]: different models or layers")
        _check_probe_inputs(names, shape, len(train_ids), int(min(y_tr.sum(), y_tr.size - y_tr.sum())),
                            fit_kw["probe_params"], "the training split")
    if any(estimator_input(n) is not None for n in names):
        lm_tr = take_rows(states_for(store, names, fields), i_tr)
        lm_te = take_rows(states_for(te_store, names, fields), i_te)
    overlap = len(set(map(str, train_ids)) & set(map(str, eval_ids)))
    if overlap and test_store is not None and not allow_overlap:
        raise InputError(f"{overlap} of the test store's {len(eval_ids)} record ids also occur in the training "
                         "store: the test would score records the estimators were fitted on; use a disjoint "
                         "test store, or allow_overlap=True (--allow-overlap) if the same ids are other records")
    if overlap:
        logger.warning("%d id(s) occur in both the training and the test records", overlap)
    t0 = time.perf_counter()
    predictions = fit_predict(names, lm_tr, y_tr, c_tr, lm_te, c_te, **fit_kw)
    split = {"mode": mode, "seed": int(seed), "test_fraction": float(test_fraction) if mode == "split" else None,
             "n_train": len(train_ids), "n_test": len(eval_ids), "n_overlap_ids": overlap,
             "accuracy_train": float(y_tr.mean()), "accuracy_test": float(y_te.mean()),
             "train_ids_sha256": _ids_digest(train_ids), "test_ids_sha256": _ids_digest(eval_ids),
             "ids_file": "split.json"}
    return _Predictions(list(eval_ids), y_te, predictions, split, list(train_ids), time.perf_counter() - t0)


def _fold_index(folds: list[tuple[np.ndarray, np.ndarray]], n: int) -> list[int]:
    out = np.empty(n, dtype=np.int64)
    for k, (_, te) in enumerate(folds):
        out[te] = k
    return out.tolist()


# ----------------------------------------------------------------------------- writing
def _intro(res: EvaluationResult) -> str:
    sp = res.split
    ref = next((r.get("reference") for r in res.rows if r.get("reference")), None)
    paired = (f" The last column is each estimator's auc-euro (all) minus the best baseline's ({ref}) "
              "with a paired bootstrap interval (the same resampled records for both), bold where it "
              "lies above zero." if ref else "")
    if sp["mode"] == "cv":
        head = (f"Cross-validated evaluation: {sp['n_splits']}-fold stratified x {sp['n_repeats']} repeats "
                f"(grouped by record id) on {sp['n_records']} records (accuracy {sp['accuracy']:.3f}); "
                "every record is scored out of fold and each metric is the mean over repeats.")
    else:
        head = (f"Held-out evaluation: {sp['n_train']} training / {sp['n_test']} test records "
                f"(test accuracy {sp['accuracy_test']:.3f}).")
    skipped = res.skipped or {}
    left = "".join(f"\n- `{n}` left out: {why}" for n, why in skipped.items())
    return (f"{head} 95% percentile-bootstrap intervals in brackets (smECE's shifted by the bootstrap "
            f"bias, so it is centred on its estimate); differences also show the corrected resampled "
            f"t-interval over folds x repeats (Nadeau and Bengio 2003).{paired}"
            f"{' Controls left out:' if left else ''}{left}\n\n")


def _write_predictions(path: Path, ids: Sequence, y: np.ndarray, preds: Mapping[str, np.ndarray]) -> None:
    names = list(preds)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "correct", *names])
        for i, rid in enumerate(ids):
            w.writerow([rid, int(y[i]), *(repr(float(preds[n][i])) for n in names)])


def _write_outputs(res: EvaluationResult, train_ids: list, params: dict, manifest, test_manifest,
                   plot_names: Sequence[str], fold_of: list | None) -> dict[str, Path]:
    """Write every output into a staging folder inside ``out_dir``, fsync them, then move the files
    into place with ``results.json`` last (an older results.json is removed first), so a crash
    never leaves a results.json that describes files of another run (a multi-file commit, like a
    store shard or a probe folder; single files go through :func:`acute._util.atomic_path`)."""
    from .plots import euro_curves, reliability_diagram

    out_dir = res.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = out_dir / f".partial-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    try:
        y = res.test_correct.astype(int)
        (stage / "results.md").write_text(_intro(res) + res.to_markdown(), encoding="utf-8")
        _write_csv(stage / "results.csv", res.rows)
        _write_predictions(stage / "predictions.csv", res.test_ids, y, res.predictions)
        if res.cv_predictions is not None:
            for r in range(1, next(iter(res.cv_predictions.values())).shape[0]):
                _write_predictions(stage / f"predictions-repeat{r}.csv", res.test_ids, y,
                                   {n: p[r] for n, p in res.cv_predictions.items()})
            (stage / "folds.json").write_text(json.dumps(json_ready(
                {k: res.split[k] for k in ("mode", "seed", "n_splits", "n_repeats")}
                | {"ids": res.test_ids, "fold": fold_of})), encoding="utf-8")
        else:
            (stage / "split.json").write_text(json.dumps(json_ready(
                {**{k: res.split[k] for k in ("mode", "seed", "test_fraction")},
                 "train": train_ids, "test": res.test_ids})), encoding="utf-8")
        n_eval = res.split.get("n_test", res.split.get("n_records"))
        label = "out-of-fold, repeat 0" if res.cv_predictions is not None else "test"
        euro_curves(res.predictions, y, stage / "euro_curves.png",
                    title=f"euro curves ({n_eval} {label} records)")
        for n in plot_names:
            reliability_diagram(res.predictions[n], y, stage / f"reliability_{n}.png", title=n)
        files = sorted(p.name for p in stage.iterdir())
        payload = {
            "complete": True,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "split": res.split,
            "params": params,
            "store_manifest": manifest,
            "test_store_manifest": test_manifest,
            "best": best_estimators(res.rows),
            "reference": next((r.get("reference") for r in res.rows if r.get("reference")), None),
            "results": res.rows,
            "skipped": res.skipped,
            "files": files + ["results.json"],
        }
        (stage / "results.json").write_text(json.dumps(json_ready(payload), indent=2), encoding="utf-8")

        for name in files + ["results.json"]:
            with open(stage / name, "rb+") as fh:
                os.fsync(fh.fileno())
        final = out_dir / "results.json"
        if final.exists():
            final.unlink()
        for name in files:
            os.replace(stage / name, out_dir / name)
        os.replace(stage / "results.json", final)
        fsync_dir(out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {name: out_dir / name for name in files + ["results.json"]}


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else (repr(r[k]) if isinstance(r[k], float) else r[k]))
                        for k in keys})
