"""How many labelled answers does a probe need? auc-euro and smECE against training-set size.

``learning_curve`` runs stratified k-fold cross-validation (grouped by record id, repeated with
seeds ``seed + repeat``, :data:`DEFAULT_REPEATS` repeats unless told); inside each training fold
it fits every estimator on nested random subsets of ``sizes`` records (the first m of one seeded
permutation of the fold, so a larger subset contains the smaller ones) and predicts the whole
test fold. For each size and repeat the out-of-fold predictions of all folds give one auc-euro
(all) and one smECE; the table reports their mean over repeats (and the standard deviation)
with a 95% interval (:data:`INTERVAL_METHOD`):

* a two-level bootstrap of that mean: each of ``n_bootstrap`` draws resamples the records with
  replacement (:func:`acute.metrics.bootstrap_indices`, the same resamples for every estimator
  and size) and the repeats with replacement, and takes the mean over the drawn repeats of the
  metric of their out-of-fold predictions on the resampled records; so the interval holds both
  the variation between fold assignments and training subsets and that of a finite test set;
* the 2.5th and 97.5th percentiles of the draws (:func:`acute.metrics.resampling.percentile_interval`)
  shifted by the bootstrap's bias estimate ``mean(draws) - estimate``:
  ``[p2.5 - bias, p97.5 - bias]``. A metric on resampled records is biased (smECE rises on a
  resample with duplicated records: for calibrated predictions on 1,000 to 5,000 records the
  plain percentile interval can lie wholly above the estimate), and the shift removes that
  offset while keeping the interval's width and skew;
* clipped to the metric's range, [0, 1] for both (and, should a very skewed bootstrap put the
  estimate outside, widened to it), so the interval holds the estimate and never leaves the
  range (the t-interval over 2 repeats it replaces had a multiplier of 12.7 and smECE bands
  below 0).

The six baselines are always fitted (they are cheap); the table and plot show the one with the
highest auc-euro at the largest size ("best baseline") next to the requested probes.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..estimators.baselines import BASELINES
from ..estimators.inputs import Inputs
from ..estimators.registry import ESTIMATORS, estimator_group, is_estimator
from ..errors import InputError
from ..metrics.specs import best_of
from .. import metrics
from ..estimators.folds import out_of_fold
from .crossval import cv_folds, fit_predict
from ..validation import check_count
from ..fileio import json_ready, write_text_atomic
from ..metrics.resampling import percentile_interval

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_BOOTSTRAP", "DEFAULT_REPEATS", "DEFAULT_SIZES", "INTERVAL_METHOD", "LearningCurve",
           "learning_curve", "resolve_sizes", "write_learning_curve"]

DEFAULT_SIZES: tuple[int, ...] = (50, 100, 200, 400, 800, 1600, 3200, 6400)
#: repeats of the cross-validation (fold assignments and training subsets) unless told
DEFAULT_REPEATS = 5
#: bootstrap draws of each interval unless told
DEFAULT_BOOTSTRAP = 200
#: the interval of every learning-curve row (see the module doc); written as the JSON's ``interval``
INTERVAL_METHOD = ("95% two-level bootstrap percentile interval of the mean over repeats (records and "
                   "repeats resampled with replacement), shifted by the bootstrap bias (mean of the draws "
                   "minus the estimate) and clipped to the metric's range [0, 1]")
#: the range of each metric, to which its interval is clipped
METRIC_RANGES: dict[str, tuple[float, float]] = {"auc_euro_all": (0.0, 1.0), "smece": (0.0, 1.0)}
# records of each class a training subset needs: the stacked probes and auto run 5-fold CV inside
_MIN_PER_CLASS = 5


def resolve_sizes(sizes: Sequence[int] | None, pool: int) -> list[int]:
    """Training-set sizes to run: the given ones (each must be in ``[10, pool]``), or the default
    sizes at least 10% below ``pool`` followed by ``pool`` itself (all training records of a fold;
    a default size closer to it, such as 1,600 of 1,632, would cost a full set of fits for a point
    indistinguishable from the last)."""
    if sizes is None:
        return [s for s in DEFAULT_SIZES if 11 * s <= 10 * pool] + [pool]
    out = []
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 10:
            raise InputError(f"learning-curve sizes must be ints >= 10, got {s!r}")
        if s > pool:
            raise InputError(f"learning-curve size {s} is larger than the {pool} training records that "
                             f"each cross-validation fold of this store leaves; use sizes up to {pool} "
                             "or collect more records")
        out.append(int(s))
    if len(set(out)) != len(out):
        raise InputError(f"learning-curve sizes contain duplicates: {list(sizes)}")
    return sorted(out)


def _subset(pool: np.ndarray, y: np.ndarray, size: int, rng_seed: int) -> np.ndarray:
    """The first ``size`` records of a seeded permutation of ``pool``, stratified: both classes
    keep (about) their share of the pool, with at least ``_MIN_PER_CLASS`` each."""
    rng = np.random.default_rng(rng_seed)
    pos = rng.permutation(pool[y[pool] == 1])
    neg = rng.permutation(pool[y[pool] == 0])
    k_pos = int(round(size * pos.size / pool.size))
    k_pos = min(max(k_pos, _MIN_PER_CLASS), pos.size)
    k_neg = size - k_pos
    if k_neg < _MIN_PER_CLASS or k_neg > neg.size or k_pos < _MIN_PER_CLASS:
        raise InputError(f"a training subset of {size} records cannot hold {_MIN_PER_CLASS} records of each "
                         f"class (the fold has {pos.size} correct and {neg.size} wrong); use larger sizes")
    return np.sort(np.concatenate([pos[:k_pos], neg[:k_neg]]))


class LearningCurve:
    """Result of :func:`learning_curve`.

    ``sizes``; ``estimators`` (every fitted name); ``shown`` (best baseline + requested probes);
    ``best_baseline``; ``values[name][metric]``: float ``[len(sizes), repeats]`` (metric per
    size and repeat, metric in ``auc_euro_all``, ``smece``); ``boot[name][metric]``: float
    ``[len(sizes), n_bootstrap]``, the bootstrap draws of the mean over repeats behind each
    interval, for the shown estimators (None, or an estimator not in it: its intervals are the
    2.5th to 97.5th percentiles of its repeats); ``interval``: how the intervals are
    computed (``method``, ``level``, ``n_bootstrap``, ``seed``); ``n_records``, ``accuracy``,
    ``n_splits``, ``repeats``; ``fit_seconds`` (per size: fitting and predicting, all folds) and
    ``n_reused`` (estimator fits read from the evaluation the curve extends instead of refitted).
    """

    def __init__(self, sizes, values, best_baseline, shown, n_records, accuracy, n_splits, repeats,
                 boot=None, n_bootstrap: int = 0, seed: int = 0):
        self.sizes = list(sizes)
        self.values = values
        self.best_baseline = best_baseline
        self.shown = list(shown)
        self.estimators = list(values)
        self.n_records = n_records
        self.accuracy = accuracy
        self.n_splits = n_splits
        self.repeats = repeats
        self.boot = boot
        self.fit_seconds: list[float] = []  # per size, set by learning_curve
        self.n_reused = 0
        self.interval = ({"method": INTERVAL_METHOD, "level": 0.95, "n_bootstrap": int(n_bootstrap),
                          "seed": int(seed)} if boot is not None else
                         {"method": "2.5th and 97.5th percentiles of the repeats", "level": 0.95,
                          "n_bootstrap": 0, "seed": int(seed)})

    def summary(self, name: str, metric: str) -> list[dict[str, float]]:
        """Per size: ``size``, ``mean`` (over repeats), ``sd`` (of the repeats; NaN with one) and
        the 95% interval ``ci_low``/``ci_high`` of :data:`INTERVAL_METHOD` (module doc): it
        holds ``mean`` and lies in the metric's range."""
        lo_range, hi_range = METRIC_RANGES.get(metric, (-math.inf, math.inf))
        out = []
        for i, (size, row) in enumerate(zip(self.sizes, self.values[name][metric])):
            mean = float(row.mean())
            sd = float(row.std(ddof=1)) if row.size > 1 else math.nan
            if self.boot is not None and name in self.boot:
                draws = self.boot[name][metric][i]
                low, high, _ = percentile_interval(draws)
                bias = float(np.nanmean(draws)) - mean
                low, high = low - bias, high - bias
            else:
                low, high, _ = percentile_interval(row)
            # clipped to the range; min/max with the mean only matter for a pathologically skewed bootstrap
            out.append({"size": size, "mean": mean, "sd": sd,
                        "ci_low": min(max(low, lo_range), mean), "ci_high": max(min(high, hi_range), mean)})
        return out

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per shown estimator and size, both metrics (for CSV/JSON)."""
        rows = []
        for name in self.shown:
            for a, s in zip(self.summary(name, "auc_euro_all"), self.summary(name, "smece")):
                rows.append({"estimator": name, "size": a["size"],
                             **{f"auc_euro_all_{k}": v for k, v in a.items() if k != "size"},
                             **{f"smece_{k}": v for k, v in s.items() if k != "size"}})
        return rows

    def to_markdown(self) -> str:
        """Two tables (auc-euro all, smECE): rows = sizes, columns = shown estimators."""
        parts = [f"Learning curve: {self.n_splits}-fold cross-validation x {self.repeats} repeats on "
                 f"{self.n_records} records (accuracy {self.accuracy:.3f}); each training fold is "
                 "subsampled to the size in the first column and the whole test fold is scored. "
                 f"Mean over repeats; in brackets the {self.interval['method']}"
                 + (f", {self.interval['n_bootstrap']} draws" if self.interval["n_bootstrap"] else "")
                 + f". Best baseline: {self.best_baseline}.\n"]
        for metric, title in (("auc_euro_all", "auc-euro (all) ↑"), ("smece", "smECE ↓")):
            parts.append(f"\n{title}\n\n| training records | " + " | ".join(self.shown) + " |")
            parts.append("|---:|" + "|".join("---:" for _ in self.shown) + "|")
            sums = {n: self.summary(n, metric) for n in self.shown}
            for i, size in enumerate(self.sizes):
                cells = []
                for n in self.shown:
                    s = sums[n][i]
                    cells.append(f"{s['mean']:.3f}" if not math.isfinite(s["ci_low"])
                                 else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]")
                parts.append(f"| {size} | " + " | ".join(cells) + " |")
        return "\n".join(parts) + "\n"


def learning_curve(X: Inputs, correct: Any, ids: Sequence[Any], *,
                   estimators: Sequence[str] = ("acute-pca10", "acute-pca10-stacked"),
                   sizes: Sequence[int] | None = None, n_splits: int = 5, repeats: int = DEFAULT_REPEATS,
                   seed: int = 0, n_jobs: int | None = None, n_bootstrap: int = DEFAULT_BOOTSTRAP,
                   probe_params: Mapping[str, Any] | None = None,
                   progress: Callable[[Iterable], Iterable] | None = None,
                   evaluation: Any = None, groups: Sequence[Any] | None = None,
                   group_by: str | None = None) -> LearningCurve:
    """auc-euro (all) and smECE against the number of training records (see module doc).

    ``estimators``: probe names (or ``auto``) of :data:`acute.estimators.registry.ESTIMATORS`; the six
    baselines are added. ``X``: the inputs of every record holding the sources the estimators
    read (:func:`acute.evaluation.crossval.inputs_for`). ``sizes`` default to
    50, 100, 200, ... below the training-fold size, then the full fold. ``repeats`` (default
    :data:`DEFAULT_REPEATS`) fold assignments; ``n_bootstrap`` draws for each interval (see the
    module doc; the record resamples are drawn from ``seed``). ``groups`` (one value per record,
    the values of the metadata field ``group_by``, e.g. a tool set): folds keep each value on one
    side and the resamples draw values whole (:func:`acute.metrics.resample_indices`), as the
    evaluation does. Raises ``ValueError`` for an
    unknown estimator (listing the known names), a size larger than a training fold, too few
    records of a class for the folds, or ``n_bootstrap < 1``.

    ``evaluation``: the :class:`acute.evaluation.result.EvaluationResult` of these same records
    (and states) that this curve extends. Its folds are this curve's first repeats' (both are
    :func:`acute.evaluation.crossval.cv_folds` of the same ids, labels and seed), so where a
    training subset is a whole training fold of the evaluation (the largest size, on the folds
    whose training part has exactly that many records) the evaluated estimators' out-of-fold
    predictions are read from it instead of refitted: the same fits, the same numbers. An
    evaluation of other records, folds, seed or ``probe_params`` is not used (logged).
    ``fit_seconds`` (per size) and ``n_reused`` (fits read from ``evaluation``) of the result
    say where the time went.
    """
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap")
    for name in estimators:
        if not is_estimator(name):
            raise InputError(f"unknown estimator {name!r}; choose from {', '.join(ESTIMATORS)} "
                             "(a probe name may end in @POOLING)")
    probes = [n for n in dict.fromkeys(estimators) if estimator_group(n) != "baseline"]
    names = list(BASELINES) + probes
    y = np.asarray(correct).astype(np.int64)
    folds = cv_folds(ids, y, n_splits=n_splits, n_repeats=repeats, seed=seed, groups=groups,
                     group_name="record ids" if groups is None else f"values of {group_by or 'the groups'!r}")
    pool = min(tr.size for rep in folds for tr, _ in rep)
    sizes = resolve_sizes(sizes, pool)
    oof = {n: np.full((len(sizes), repeats, y.size), np.nan) for n in names}
    evaluated = _evaluated_repeats(evaluation, folds, ids, y, seed, probe_params, names,
                                   group_by if groups is not None else None)
    seconds, reused = [0.0] * len(sizes), []
    jobs = [(r, k, tr, te) for r, rep in enumerate(folds) for k, (tr, te) in enumerate(rep)]
    walk = iter(jobs if progress is None else progress(jobs))

    def by_size(tr: np.ndarray, te: np.ndarray, r: int, k: int) -> np.ndarray:
        """``[len(te), sizes, names]``: each estimator fitted on each nested subset of ``tr``."""
        out = np.empty((te.size, len(sizes), len(names)))
        for i, size in enumerate(sizes):
            t0 = time.perf_counter()
            sub = _subset(tr, y, min(size, tr.size), seed * 1_000_003 + r * 1009 + k)
            have = evaluated.get(r, {}) if sub.size == tr.size else {}
            todo = [n for n in names if n not in have]
            preds = fit_predict(todo, X.take(sub), y[sub], X.take(te), random_state=seed,
                                n_jobs=n_jobs, probe_params=probe_params) if todo else {}
            preds.update({n: p[te] for n, p in have.items()})
            reused.append(len(have))
            for j, n in enumerate(names):
                out[:, i, j] = preds[n]
            seconds[i] += time.perf_counter() - t0
        return out

    for r, rep in enumerate(folds):
        repeat = ((tr, te, r, k) for _, k, tr, te in islice(walk, len(rep)))
        got = out_of_fold(by_size, repeat, y.size)
        for j, n in enumerate(names):
            oof[n][:, r, :] = got[:, :, j].T
    next(walk, None)  # the end of the jobs: a progress bar closes
    n_reused = sum(reused)
    values = {n: {"auc_euro_all": np.array([[metrics.auc_euro(o[i, r], y) for r in range(repeats)]
                                            for i in range(len(sizes))]),
                  "smece": np.array([[metrics.smece(o[i, r], y) for r in range(repeats)]
                                     for i in range(len(sizes))])}
              for n, o in oof.items()}
    best = best_of(BASELINES, lambda n: {k: v[-1].mean() for k, v in values[n].items()})
    boot = _bootstrap_means({n: oof[n] for n in [best] + probes}, y, n_bootstrap, seed, groups)
    lc = LearningCurve(sizes, values, best, [best] + probes, int(y.size), float(y.mean()), n_splits, repeats,
                       boot=boot, n_bootstrap=n_bootstrap, seed=seed)
    lc.fit_seconds, lc.n_reused = seconds, n_reused
    return lc


def _evaluated_repeats(evaluation: Any, folds, ids: Sequence[Any], y: np.ndarray, seed: int,
                       probe_params: Mapping[str, Any] | None, names: Sequence[str],
                       group_by: str | None = None) -> dict[int, dict[str, np.ndarray]]:
    """``{repeat: {name: out-of-fold predictions [n]}}`` of ``evaluation`` for the repeats whose
    folds are ``folds``' and the ``names`` it evaluated; empty when it cannot stand in for this
    curve's fits (another mode, seed, records, labels or probe settings: the reason is logged)."""
    if evaluation is None:
        return {}
    split = getattr(evaluation, "split", None) or {}
    preds = getattr(evaluation, "cv_predictions", None)
    params = getattr(evaluation, "params", None) or {}

    def settings(p):
        return {k: v for k, v in (p or {}).items() if v is not None}

    why = None
    if split.get("mode") != "cv" or preds is None or split.get("group_by") != group_by:
        why = f"it is not a cross-validation grouped by {group_by or 'record id'}"
    elif split.get("seed") != seed or split.get("n_splits") != len(folds[0]):
        why = f"its seed and folds ({split.get('seed')}, {split.get('n_splits')}) are not {seed}, {len(folds[0])}"
    elif [str(i) for i in evaluation.test_ids] != [str(i) for i in ids] \
            or not np.array_equal(np.asarray(evaluation.test_correct, dtype=np.int64), y):
        why = "it scored other records or labels"
    elif settings(params.get("probe_params")) != settings(probe_params):
        why = f"its probe_params {params.get('probe_params')} are not {dict(probe_params or {})}"
    if why is not None:
        logger.warning("learning curve: the evaluation given is not used: %s", why)
        return {}
    out: dict[int, dict[str, np.ndarray]] = {}
    for r, rep in enumerate(folds[: len(evaluation.fold_of or [])]):
        fold_of = np.asarray(evaluation.fold_of[r])
        if all(np.array_equal(np.flatnonzero(fold_of == k), np.sort(te)) for k, (_, te) in enumerate(rep)):
            out[r] = {n: np.asarray(preds[n][r], dtype=np.float64) for n in names if n in preds}
    return out


def _bootstrap_means(oof: Mapping[str, np.ndarray], y: np.ndarray, n_bootstrap: int,
                     seed: int, groups: Sequence[Any] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """The two-level bootstrap of the module doc: ``{name: {metric: [sizes, n_bootstrap]}}``,
    draw b the mean over ``repeats`` repeats drawn with replacement of the metric of their
    out-of-fold predictions ``oof[name][size, repeat]`` on record resample b. The record
    resamples (:func:`acute.metrics.resample_indices` for ``seed`` and ``groups``) and the repeat draws are the
    same for every estimator and size, so the intervals of two estimators are paired."""
    fns = {"auc_euro_all": metrics.METRICS["auc_euro_all"].fn, "smece": metrics.smece}
    n_sizes, repeats, n = next(iter(oof.values())).shape
    idx = metrics.resample_indices(n, n_bootstrap, seed, groups)
    picks = np.random.default_rng([seed, 1]).integers(0, repeats, size=(n_bootstrap, repeats))
    cols = np.arange(n_bootstrap)[:, None]
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, o in oof.items():
        out[name] = {}
        for metric, fn in fns.items():
            draws = np.empty((n_sizes, n_bootstrap))
            for i in range(n_sizes):
                per_repeat = np.stack([metrics.metric_over_resamples(fn, o[i, r], y, idx)
                                       for r in range(repeats)])  # [repeats, n_bootstrap]
                draws[i] = per_repeat[picks, cols].mean(axis=1)
            out[name][metric] = draws
    return out


def write_learning_curve(lc: LearningCurve, out_dir, params: Mapping[str, Any] | None = None, *,
                         model: str | None = None, task: str | None = None) -> dict[str, Any]:
    """Write ``learning_curve.md``, ``.csv``, ``.json`` and ``.png`` into ``out_dir`` (each file
    atomically; the JSON, written last, carries ``"complete": true``). Returns name -> path.

    ``model`` and ``task`` (e.g. ``store.manifest.get("model")`` and ``.get("task")``; either may
    be None) name the plot's title and are recorded in the JSON, whose ``interval`` field states
    how the intervals were computed (:attr:`LearningCurve.interval`)."""
    from .plots import learning_curves  # heavy: matplotlib

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = lc.to_rows()
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    files = {"md": write_text_atomic(out / "learning_curve.md", lc.to_markdown()),
             "csv": write_text_atomic(out / "learning_curve.csv", buf.getvalue())}
    series = {m: {n: tuple(np.array([s[k] for s in lc.summary(n, m)]) for k in ("mean", "ci_low", "ci_high"))
                  for n in lc.shown} for m in ("auc_euro_all", "smece")}
    band = (f"bands: 95% bootstrap interval (repeats and {lc.interval['n_bootstrap']} resamples of the records)"
            if lc.interval["n_bootstrap"] else "bands: 2.5th to 97.5th percentile of the repeats")
    files["png"] = learning_curves(
        lc.sizes, series, out / "learning_curve.png", model=model, task=task,
        title=f"{lc.n_records:,} records (accuracy {lc.accuracy:.2f}), {lc.n_splits}-fold CV x {lc.repeats} repeats\n{band}")
    doc = {"complete": True, "model": model, "task": task, "sizes": lc.sizes, "best_baseline": lc.best_baseline,
           "shown": lc.shown, "n_records": lc.n_records, "accuracy": lc.accuracy, "n_splits": lc.n_splits,
           "repeats": lc.repeats, "interval": lc.interval, "params": dict(params or {}), "rows": rows,
           "per_repeat": {n: {m: v.tolist() for m, v in d.items()} for n, d in lc.values.items()}}
    files["json"] = write_text_atomic(out / "learning_curve.json", json.dumps(json_ready(doc), indent=1))
    return files
