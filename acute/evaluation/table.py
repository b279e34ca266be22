"""Metric rows from already-computed confidences (pure: no fitting, no files): every metric of
:data:`acute.metrics.METRIC_SPECS` per estimator, paired bootstrap intervals on the same
resampled records, the difference to a reference (the best baseline by
:data:`acute.metrics.specs.RANKING`) with its bootstrap and corrected resampled t-intervals."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..estimators.baselines import BASELINES
from ..estimators.controls import CONTROLS, CONTROL_USES, within_group_auroc
from ..estimators.probe_names import QUESTION_ONLY_ESTIMATORS
from ..estimators.registry import estimator_pooling, is_estimator
from ..metrics import DEFAULT_N_BOOTSTRAP, METRIC_SPECS, resample_indices
from ..metrics.resampling import percentile_interval
from ..metrics.certify import DEFAULT_DELTA, cross_certified
from ..metrics.specs import best_of
from ..metrics.intervals import bias_shifted_interval, bootstrap_p_value, corrected_t_test, fold_differences
from ..validation import check_confidence, check_correct, check_count
from .crossval import cv_metric, cv_metric_draws

__all__ = ["CERTIFIED_MAX_ERROR", "CONFIDENCE_CONTROLS", "INTERVAL_KEYS", "PAIRED_KEYS", "STATES_ADD", "TABLE_COLUMNS",
           "VISIBLE_CONTROL",
           "VISIBLE_SIGNALS", "best_estimators", "evaluate_predictions", "estimator_uses"]


# (column key, table header, direction: +1 higher is better, -1 lower is better, 0 neither),
# from the one list of metric specs (acute.metrics.METRIC_SPECS)
TABLE_COLUMNS: tuple[tuple[str, str, int], ...] = tuple((m.name, m.header, m.direction) for m in METRIC_SPECS)


# the controls that calibrate the confidence with more knowledge: the strongest honest references
CONFIDENCE_CONTROLS: tuple[str, ...] = ("platt+meta", "tfidf+platt")


# the control that sees everything a deployment sees without hidden states: every row is also
# compared with it (diff_visible_auc_euro_all ...)
VISIBLE_CONTROL = "visible"


# every control that sees no hidden states (what a deployment sees: the reply, its token
# log-probs, the prompt's text and metadata, and, at K + 1 times the generation cost, sampled
# answers): every row is also compared with the best of those present
# (diff_best_visible_auc_euro_all ..., best_visible_reference names it)
VISIBLE_SIGNALS: tuple[str, ...] = (VISIBLE_CONTROL, "answer-surface", "answer-text", "platt+meta", "tfidf+platt",
                                    "consistency", "semantic-entropy")


# metrics with bootstrap intervals, and those with paired differences to the reference (the specs say)
INTERVAL_KEYS: tuple[str, ...] = tuple(m.name for m in METRIC_SPECS if m.interval)
PAIRED_KEYS: tuple[str, ...] = tuple(m.name for m in METRIC_SPECS if m.paired)


# the certified counterpart of "coverage at 10% error" (coverage_10): certificates at this error
# rate and acute export's default delta, each fitted without the fold it is applied to
CERTIFIED_MAX_ERROR = 0.10


def _certified_columns(c: np.ndarray, y: np.ndarray, folds) -> dict[str, float]:
    """``certified_coverage_10`` (mean over repeats of the share trusted by
    :func:`acute.metrics.certify.cross_certified` over that repeat's folds), ``certified_error_10``
    (the error among all the answers so trusted, NaN when none) and ``certified_folds_10`` (the
    share of fold x repeat certificates that certified a threshold)."""
    out = [cross_certified(row, y, [te for _, te in rep], CERTIFIED_MAX_ERROR, DEFAULT_DELTA)
           for row, rep in zip(c, folds)]
    n_trusted = sum(int(o.trusted.sum()) for o in out)
    wrong = sum(int((o.trusted & (y == 0)).sum()) for o in out)
    return {"certified_coverage_10": float(np.mean([o.trusted.mean() for o in out])),
            "certified_error_10": wrong / n_trusted if n_trusted else math.nan,
            "certified_folds_10": sum(o.certified for o in out) / max(1, sum(o.folds for o in out))}


def _metric_fns() -> dict:
    return {m.name: m.fn for m in METRIC_SPECS if m.fn is not None}


def _best_baseline(rows: Sequence[dict], extra: Sequence[str] = ()) -> str | None:
    """The best row among the baselines (and ``extra`` names): highest auc-euro all, then lowest
    smECE (the order of :data:`acute.metrics.METRIC_SPECS`' directions)."""
    cand = [r for r in rows if (r["estimator"] in BASELINES or r["estimator"] in extra)
            and math.isfinite(r.get("auc_euro_all", math.nan))]
    if not cand:
        return None
    return best_of([r["estimator"] for r in cand], {r["estimator"]: r for r in cand}.__getitem__)


def evaluate_predictions(confidences: Mapping[str, np.ndarray], correct, n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
                         seed: int = 0, reference: str | None = None,
                         folds: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]] | None = None,
                         groups: Sequence[Any] | None = None,
                         clusters: Sequence[Any] | None = None) -> list[dict]:
    """Metric rows for already-computed confidences on one labelled set (pure: no fitting, no files).

    Each value of ``confidences`` is ``[n]`` (one prediction per record) or ``[repeats, n]``
    (out-of-fold predictions of repeated cross-validation); a metric is then the mean over
    repeats of the metric on each repeat (:func:`acute.evaluation.crossval.cv_metric`).

    Returns one dict per entry of ``confidences`` (in its order) with ``estimator``, ``uses``
    (what the row may use), ``n``, ``repeats``, ``accuracy`` (of ``correct``; the same for
    every row) and every other metric of :data:`acute.metrics.METRIC_SPECS` (``smece``, the
    auc-euro bands, ``brier``, ``auroc``, and the selective columns ``aurc``, ``e_aurc``,
    ``coverage_05``, ``coverage_10``; with ``folds``, their certified counterpart
    ``certified_coverage_10``, ``certified_error_10`` and ``certified_folds_10``:
    :func:`_certified_columns`), and, when ``n_bootstrap > 0``, 95% bootstrap
    intervals ``<metric>_ci_low`` / ``<metric>_ci_high`` for the specs with ``interval``
    (:data:`INTERVAL_KEYS`; percentile intervals; smECE's shifted by the bootstrap's bias so it
    contains its estimate: :func:`acute.metrics.intervals.bias_shifted_interval`). Every estimator (and
    every repeat) sees the same resampled records (:func:`acute.metrics.resample_indices` with
    ``seed``): with ``clusters`` (one value per record: the groups the folds keep apart, e.g. a
    tool set) records sharing a value are resampled together (a cluster bootstrap), else records
    one by one. With a ``constant`` row, every row has ``skill`` = (auc-euro - constant's) /
    (1 - constant's). With ``groups`` (one value per record) every row has
    ``within_group_auroc`` (:func:`acute.estimators.controls.within_group_auroc`).

    Paired comparisons: ``reference`` (default: the best baseline among the rows, highest
    ``auc_euro_all``) is subtracted from every row, for each spec with ``paired``
    (:data:`PAIRED_KEYS`: ``diff_auc_euro_all``, ``diff_smece``, ``diff_aurc``,
    ``diff_coverage_05``, ``diff_coverage_10``) with paired intervals ``diff_<metric>_ci_low/_high`` from the same resamples, the bootstrap
    p-value ``diff_<metric>_boot_p``, and ``reference`` names it. With ``folds`` (the
    cross-validation's, one list per repeat) each difference also gets the corrected resampled
    t-interval over the fold x repeat differences (Nadeau and Bengio 2003):
    ``diff_<metric>_t_low/_high`` and ``diff_<metric>_t_p``, centred on ``diff_<metric>_t_mean``,
    the mean of the per-fold differences: another estimand than ``diff_<metric>`` (the
    difference of the metric on each repeat's pooled out-of-fold predictions, averaged over
    repeats), which the bootstrap interval belongs to; for nonlinear metrics the two can differ. When the rows include the
    metadata or text controls, the same columns compare every row with the best of the
    baselines and those controls (``meta_reference``; ``diff_meta_auc_euro_all`` ...), and with a
    :data:`VISIBLE_CONTROL` row every row is compared with it (``diff_visible_auc_euro_all`` ...) and,
    with any of :data:`VISIBLE_SIGNALS`, with the best of them (``best_visible_reference``;
    ``diff_best_visible_auc_euro_all`` ...). With both stacks, the ``acute-all`` row says what
    the hidden states add to every other signal: ``states_add_auc_euro_all`` (acute-all minus
    visible-all) with the same bootstrap and t columns (``states_add_ci_low/_high``,
    ``states_add_boot_p``, ``states_add_t_mean/_low/_high/_p``: :func:`_states_add`); the stacks
    are never the best baseline nor among :data:`VISIBLE_SIGNALS` (single signals). Without
    a baseline among the rows (and no ``reference``) there are no differences. Metrics
    undefined on the data (AUROC with one class) are NaN.
    """
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap", minimum=0)
    y, preds = _checked_inputs(confidences, correct, reference, folds)
    fns = _metric_fns()
    rows = [_point_row(name, c, y, fns, folds, groups) for name, c in preds.items()]
    by_name = {r["estimator"]: r for r in rows}
    if "constant" in by_name:
        base = by_name["constant"]["auc_euro_all"]
        for row in rows:
            row["skill"] = (row["auc_euro_all"] - base) / (1 - base) if base < 1 else math.nan
    ref = reference if reference is not None else _best_baseline(rows)
    meta_ref = _best_baseline(rows, CONFIDENCE_CONTROLS) if any(n in preds for n in CONFIDENCE_CONTROLS) else None
    if n_bootstrap == 0 and ref is None:
        return rows
    if clusters is not None and len(clusters) != y.size:
        raise InputError(f"clusters has {len(clusters)} values but correct has {y.size}")
    draws = _bootstrap_intervals(rows, preds, y, fns, n_bootstrap, seed, clusters, paired=ref is not None)
    ratio = None
    if folds is not None:
        n_te = np.mean([len(te) for rep in folds for _, te in rep])
        ratio = float(n_te / (y.size - n_te))
    visible_ref = VISIBLE_CONTROL if VISIBLE_CONTROL in preds else None
    best_visible = _best_baseline([r for r in rows if r["estimator"] in VISIBLE_SIGNALS], VISIBLE_SIGNALS)
    for prefix, r_name in (("diff", ref), ("diff_meta", meta_ref), ("diff_visible", visible_ref),
                           ("diff_best_visible", best_visible)):
        if r_name is not None:
            _add_differences(rows, prefix, r_name, by_name, draws, preds, y, fns, n_bootstrap, folds, ratio)
    _states_add(by_name, draws, preds, y, folds, ratio, fns["auc_euro_all"], n_bootstrap)
    return rows


def _checked_inputs(confidences: Mapping[str, np.ndarray], correct, reference: str | None,
                    folds) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``correct`` and every estimator's confidences as ``[repeats, n]``, checked against each
    other, ``reference`` and ``folds``."""
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
    return y, preds


def _point_row(name: str, c: np.ndarray, y: np.ndarray, fns: Mapping, folds, groups) -> dict[str, Any]:
    """One estimator's row without intervals: every metric as the mean over repeats, the
    certified columns with ``folds``, the within-group AUROC with ``groups``."""
    row: dict[str, Any] = {"estimator": name, "uses": estimator_uses(name), "n": int(y.size),
                           "repeats": int(c.shape[0]), "accuracy": float(y.mean())}
    for key, fn in fns.items():
        row[key] = cv_metric(fn, c, y)
    if folds is not None:
        row.update(_certified_columns(c, y, folds))
    if groups is not None:
        row["within_group_auroc"] = float(np.mean([within_group_auroc(r, y, groups)[0] for r in c]))
    return row


def _bootstrap_intervals(rows: list[dict], preds: Mapping[str, np.ndarray], y: np.ndarray, fns: Mapping,
                         n_bootstrap: int, seed: int, clusters, paired: bool) -> dict[str, dict[str, np.ndarray]]:
    """Each row's metrics on the same resamples (``{estimator: {metric: draws}}``: the
    :data:`INTERVAL_KEYS`, and the :data:`PAIRED_KEYS` when ``paired``; none without resamples),
    with the intervals of :data:`INTERVAL_KEYS` added to the rows."""
    index = resample_indices(y.size, int(n_bootstrap), seed, clusters) if n_bootstrap > 0 else None
    draws: dict[str, dict[str, np.ndarray]] = {}
    for row in rows:
        name = row["estimator"]
        keys = INTERVAL_KEYS if n_bootstrap > 0 else ()
        draws[name] = {}
        for key in set(keys) | (set(PAIRED_KEYS) if paired and n_bootstrap > 0 else set()):
            if not math.isfinite(row[key]):
                draws[name][key] = np.full(int(n_bootstrap), np.nan)
                continue
            draws[name][key] = cv_metric_draws(fns[key], preds[name], y, index)
        for key in keys:
            if key == "smece":
                row[f"{key}_ci_low"], row[f"{key}_ci_high"] = bias_shifted_interval(row[key], draws[name][key])
            else:
                row[f"{key}_ci_low"], row[f"{key}_ci_high"] = _percentiles(draws[name][key])
    return draws


#: the row naming the reference of each kind of difference
_REFERENCE_NAMES = {"diff": "reference", "diff_meta": "meta_reference", "diff_best_visible": "best_visible_reference"}


def _add_differences(rows: list[dict], prefix: str, r_name: str, by_name: Mapping[str, dict], draws, preds, y,
                     fns: Mapping, n_bootstrap: int, folds, ratio: float | None) -> None:
    """Every row minus the row ``r_name`` as ``<prefix>_<metric>`` (the :data:`PAIRED_KEYS` for
    ``"diff"``, else auc-euro all), with the paired bootstrap interval and p-value and, with
    folds, the corrected resampled t-interval."""
    for row in rows:
        if prefix in _REFERENCE_NAMES:
            row[_REFERENCE_NAMES[prefix]] = r_name
        for key in PAIRED_KEYS if prefix == "diff" else ("auc_euro_all",):
            col = f"{prefix}_{key}"
            row[col] = row[key] - by_name[r_name][key]
            if n_bootstrap > 0:
                d = draws[row["estimator"]][key] - draws[r_name][key]
                row[f"{col}_ci_low"], row[f"{col}_ci_high"] = _percentiles(d)
                row[f"{col}_boot_p"] = bootstrap_p_value(d) if row["estimator"] != r_name else math.nan
            if ratio is not None and row["estimator"] != r_name:
                t = corrected_t_test(fold_differences(fns[key], preds[row["estimator"]], preds[r_name], y, folds),
                                     ratio)
                row[f"{col}_t_mean"], row[f"{col}_t_low"], row[f"{col}_t_high"] = t.mean, t.low, t.high
                row[f"{col}_t_p"] = t.p_value


#: the stacks whose difference says what the hidden states add to everything else
STATES_ADD = ("acute-all", "visible-all")


def _states_add(by_name, draws, preds, y, folds, ratio, fn, n_bootstrap: int) -> None:
    """On the ``acute-all`` row, with a ``visible-all`` row: ``states_add_auc_euro_all`` (its
    auc-euro minus visible-all's), the paired bootstrap interval ``states_add_ci_low/_high`` and
    p-value ``states_add_boot_p`` from the same resamples as every interval (clusters resampled
    whole), and with folds the corrected resampled t-interval ``states_add_t_low/_high`` (centred
    on ``states_add_t_mean``, p ``states_add_t_p``) over the fold x repeat differences."""
    a, v = STATES_ADD
    if a not in by_name or v not in by_name:
        return
    row = by_name[a]
    row["states_add_auc_euro_all"] = row["auc_euro_all"] - by_name[v]["auc_euro_all"]
    if n_bootstrap > 0:
        d = draws[a]["auc_euro_all"] - draws[v]["auc_euro_all"]
        row["states_add_ci_low"], row["states_add_ci_high"] = _percentiles(d)
        row["states_add_boot_p"] = bootstrap_p_value(d)
    if ratio is not None:
        t = corrected_t_test(fold_differences(fn, preds[a], preds[v], y, folds), ratio)
        row["states_add_t_mean"], row["states_add_t_low"], row["states_add_t_high"] = t.mean, t.low, t.high
        row["states_add_t_p"] = t.p_value


def estimator_uses(name: str) -> str:
    """What an evaluation row may use, in words (the table's "uses" column)."""
    base = name.split("@", 1)[0]
    if base in CONTROL_USES:
        return CONTROL_USES[base]
    if base in QUESTION_ONLY_ESTIMATORS:  # the question-only probe of another view
        return CONTROL_USES["question-only"]
    if base == "raw":
        return "confidence"
    if base in BASELINES:
        return "confidence (fitted)"
    if not is_estimator(name):
        return "given"
    spec = estimator_pooling(name) or "mean"
    return f"answer states ({spec}) + confidence"


def _percentiles(stats: np.ndarray) -> tuple[float, float]:
    return percentile_interval(stats)[:2]


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
            out[group] = best_of([r["estimator"] for r in cand], {r["estimator"]: r for r in cand}.__getitem__)
    return out
