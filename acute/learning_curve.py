"""How many labelled answers does a probe need? auc-euro and smECE against training-set size.

``learning_curve`` runs stratified k-fold cross-validation (grouped by record id, repeated with
seeds ``seed + repeat``); inside each training fold it fits every estimator on nested random
subsets of ``sizes`` records (the first m of one seeded permutation of the fold, so a larger
subset contains the smaller ones) and predicts the whole test fold. For each size and repeat
the out-of-fold predictions of all folds give one auc-euro (all) and one smECE; the table
reports their mean over repeats with a 95% t-interval of that mean (and the standard deviation).

The six baselines are always fitted (they are cheap); the table and plot show the one with the
highest auc-euro at the largest size ("best baseline") next to the requested probes.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .baselines import BASELINES
from .estimators import ESTIMATORS, estimator_group, is_estimator
from .errors import InputError

__all__ = ["DEFAULT_SIZES", "LearningCurve", "learning_curve", "resolve_sizes"]

DEFAULT_SIZES: tuple[int, ...] = (50, 100, 200, 400, 800, 1600, 3200, 6400)
# records of each class a training subset needs: the stacked probes and auto run 5-fold CV inside
_MIN_PER_CLASS = 5


def resolve_sizes(sizes: Sequence[int] | None, pool: int) -> list[int]:
    """Training-set sizes to run: the given ones (each must be in ``[10, pool]``), or the default
    sizes below ``pool`` followed by ``pool`` itself (all training records of a fold)."""
    if sizes is None:
        return [s for s in DEFAULT_SIZES if s < pool] + [pool]
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
    size and repeat, metric in ``auc_euro_all``, ``smece``); ``n_records``, ``accuracy``,
    ``n_splits``, ``repeats``.
    """

    def __init__(self, sizes, values, best_baseline, shown, n_records, accuracy, n_splits, repeats):
        self.sizes = list(sizes)
        self.values = values
        self.best_baseline = best_baseline
        self.shown = list(shown)
        self.estimators = list(values)
        self.n_records = n_records
        self.accuracy = accuracy
        self.n_splits = n_splits
        self.repeats = repeats

    def summary(self, name: str, metric: str) -> list[dict[str, float]]:
        """Per size: ``size``, ``mean``, ``sd`` and the 95% t-interval ``ci_low``/``ci_high`` of
        the mean over repeats (NaN interval with one repeat)."""
        from scipy.stats import t

        out = []
        for size, row in zip(self.sizes, self.values[name][metric]):
            r = row.size
            mean = float(row.mean())
            sd = float(row.std(ddof=1)) if r > 1 else math.nan
            half = float(t.ppf(0.975, r - 1) * sd / math.sqrt(r)) if r > 1 else math.nan
            out.append({"size": size, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half})
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
                 f"Mean over repeats with a 95% t-interval. Best baseline: {self.best_baseline}.\n"]
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


def learning_curve(layer_means, correct, confidence, ids: Sequence[Any], *,
                   estimators: Sequence[str] = ("acute-cosine", "acute-cosine-stacked"),
                   sizes: Sequence[int] | None = None, n_splits: int = 5, repeats: int = 3,
                   seed: int = 0, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None,
                   progress: Callable[[Iterable], Iterable] | None = None) -> LearningCurve:
    """auc-euro (all) and smECE against the number of training records (see module doc).

    ``estimators``: probe names (or ``auto``) of :data:`acute.estimators.ESTIMATORS`; the six
    baselines are added. ``layer_means``: the mean states, or ``{pooling spec: array}`` for
    probes that read other poolings (:func:`acute.crossval.states_for`). ``sizes`` default to 50, 100, 200, ... below the training-fold size,
    then the full fold. Raises ``ValueError`` for an unknown estimator (listing the known
    names), a size larger than a training fold, or too few records of a class for the folds.
    """
    from . import metrics
    from .crossval import cv_folds, fit_predict, take_rows

    for name in estimators:
        if not is_estimator(name):
            raise InputError(f"unknown estimator {name!r}; choose from {', '.join(ESTIMATORS)} "
                             "(a probe name may end in @POOLING)")
    probes = [n for n in dict.fromkeys(estimators) if estimator_group(n) != "baseline"]
    names = list(BASELINES) + probes
    y = np.asarray(correct).astype(np.int64)
    conf = np.asarray(confidence, dtype=np.float64)
    folds = cv_folds(ids, y, n_splits=n_splits, n_repeats=repeats, seed=seed)
    pool = min(tr.size for rep in folds for tr, _ in rep)
    sizes = resolve_sizes(sizes, pool)
    lm = take_rows(layer_means, slice(None)) if probes else None
    oof = {n: np.full((len(sizes), repeats, y.size), np.nan) for n in names}
    jobs = [(r, k, tr, te) for r, rep in enumerate(folds) for k, (tr, te) in enumerate(rep)]
    it: Iterable = jobs if progress is None else progress(jobs)
    for r, k, tr, te in it:
        for i, size in enumerate(sizes):
            sub = _subset(tr, y, min(size, tr.size), seed * 1_000_003 + r * 1009 + k)
            preds = fit_predict(names, take_rows(lm, sub), y[sub], conf[sub],
                                take_rows(lm, te), conf[te], random_state=seed,
                                n_jobs=n_jobs, probe_params=probe_params)
            for n, p in preds.items():
                oof[n][i, r, te] = p
    values = {n: {"auc_euro_all": np.array([[metrics.auc_euro(o[i, r], y) for r in range(repeats)]
                                            for i in range(len(sizes))]),
                  "smece": np.array([[metrics.smece(o[i, r], y) for r in range(repeats)]
                                     for i in range(len(sizes))])}
              for n, o in oof.items()}
    best = max(BASELINES, key=lambda n: (values[n]["auc_euro_all"][-1].mean(), -values[n]["smece"][-1].mean()))
    return LearningCurve(sizes, values, best, [best] + probes, int(y.size), float(y.mean()), n_splits, repeats)


def write_learning_curve(lc: LearningCurve, out_dir, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``learning_curve.md``, ``.csv``, ``.json`` and ``.png`` into ``out_dir`` (each file
    atomically; the JSON, written last, carries ``"complete": true``). Returns name -> path."""
    import csv
    import io
    import json
    from pathlib import Path

    from ._util import json_ready, write_text_atomic
    from .plots import learning_curves

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
    files["png"] = learning_curves(lc.sizes, series, out / "learning_curve.png",
                                   title=f"{lc.n_records} records, {lc.repeats} repeats")
    doc = {"complete": True, "sizes": lc.sizes, "best_baseline": lc.best_baseline, "shown": lc.shown,
           "n_records": lc.n_records, "accuracy": lc.accuracy, "n_splits": lc.n_splits,
           "repeats": lc.repeats, "params": dict(params or {}), "rows": rows,
           "per_repeat": {n: {m: v.tolist() for m, v in d.items()} for n, d in lc.values.items()}}
    files["json"] = write_text_atomic(out / "learning_curve.json", json.dumps(json_ready(doc), indent=1))
    return files
