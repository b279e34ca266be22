"""One evaluation folder as the report reads it (:class:`EvalRun`: the test predictions of every
estimator), and the report's numbers: every metric on paired bootstrap resamples of the test
records, averaged over models resample by resample, and the percentile intervals of the draws."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..evaluation.table import TABLE_COLUMNS
from ..fileio import read_json
from ..metrics import BANDS, EURO_GRID, METRICS, bootstrap_indices, euro_curve, metric_over_resamples, \
    percentile_interval, smece
from ..validation import check_count

__all__ = ["REPORT_METRICS", "EvalRun", "average_draws", "interval_summary", "load_eval_run", "metric_draws",
           "metric_values"]


#: (key, column header, direction): the paper-style columns of ``acute.evaluation.evaluate`` up to auc-euro all
REPORT_METRICS: tuple[tuple[str, str, int], ...] = TABLE_COLUMNS[:6]


_METRIC_KEYS = tuple(k for k, _, _ in REPORT_METRICS)


_BANDS = ("low", "med", "high", "all")


@dataclass
class EvalRun:
    """One model's held-out predictions on one task (an evaluation folder).

    ``ids`` and ``correct`` (bool[n]) of the test records, ``predictions`` (estimator ->
    float64[n] confidence, in the evaluation's order) and ``results`` (the parsed
    ``results.json``).
    """

    model: str
    task: str
    path: Path
    ids: list[str]
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    results: dict = field(repr=False, default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.correct.size)

    def layer_of(self, estimator: str) -> int | None:
        """The layer an ACUTE single-layer variant chose (``None`` for other estimators)."""
        for row in self.results.get("results", []):
            if row.get("estimator") == estimator:
                return row.get("layer")
        return None


def load_eval_run(eval_dir: str | os.PathLike, model: str, task: str) -> EvalRun:
    """Read ``results.json`` and ``predictions.csv`` of an evaluation folder.

    Raises ``FileNotFoundError`` when either file is missing and ``ValueError`` (naming the
    file and line) when ``results.json`` is not a complete evaluation, a prediction is not a
    number in [0, 1] or ``correct`` is not 0/1.
    """
    folder = Path(eval_dir)
    res_path, pred_path = folder / "results.json", folder / "predictions.csv"
    for p in (res_path, pred_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist (run the evaluate stage first)")
    results = read_json(res_path, "run the evaluate stage first")
    if not isinstance(results, dict) or results.get("complete") is not True:
        raise InputError(f"{res_path}: not a complete evaluation (missing \"complete\": true)")
    ids: list[str] = []
    correct: list[int] = []
    with open(pred_path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or header[:2] != ["id", "correct"] or len(header) < 3:
            raise InputError(f"{pred_path}:1: expected a header 'id,correct,<estimator>...', got {header}")
        names = header[2:]
        cols: list[list[float]] = [[] for _ in names]
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(f"{pred_path}:{lineno}: {len(row)} cells, expected {len(header)}")
            if row[1] not in ("0", "1"):
                raise InputError(f"{pred_path}:{lineno}: correct must be 0 or 1, got {row[1]!r}")
            ids.append(row[0])
            correct.append(int(row[1]))
            for j, cell in enumerate(row[2:]):
                try:
                    v = float(cell)
                except ValueError:
                    raise InputError(f"{pred_path}:{lineno}: {names[j]} is not a number: {cell!r}") from None
                if not 0.0 <= v <= 1.0:
                    raise InputError(f"{pred_path}:{lineno}: {names[j]} = {v} is outside [0, 1]")
                cols[j].append(v)
    if not ids:
        raise InputError(f"{pred_path}: no test records")
    return EvalRun(model=model, task=task, path=folder, ids=ids,
                   correct=np.asarray(correct, dtype=bool),
                   predictions={n: np.asarray(c, dtype=np.float64) for n, c in zip(names, cols)},
                   results=results)


def metric_values(confidence: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """Every report metric of one confidence vector on one labelled set.

    ``accuracy`` = mean of ``correct``; ``smece`` (:func:`acute.smece`);
    ``auc_euro_<band>`` = mean of :func:`acute.euro_curve` over the band's grid points,
    i.e. :func:`acute.metrics.auc_euro` with ``exact=False`` (one euro curve serves all bands).
    """
    conf = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    curve = np.asarray(euro_curve(conf, y, EURO_GRID), dtype=np.float64)
    return {"accuracy": float(y.mean()), "smece": float(smece(conf, y)),
            **{f"auc_euro_{band}": float(np.mean(curve[BANDS[band][0]])) for band in _BANDS}}


def metric_draws(run: EvalRun, n_bootstrap: int = 1000, seed: int = 0,
                 estimators: Sequence[str] | None = None) -> dict[str, dict[str, tuple[float, np.ndarray]]]:
    """``{estimator: {metric: (estimate, draws)}}`` for one run.

    ``estimate`` is the metric on all test records; ``draws`` (float64[n_bootstrap]) the metric
    on each resample of :func:`acute.bootstrap_indices` ``(run.n, n_bootstrap, seed)``,
    the same resamples for every estimator (NaN where a metric is undefined on a resample).
    ``n_bootstrap = 0`` gives empty draws. Raises ``ValueError`` for an unknown estimator.
    """
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap", minimum=0)
    names = list(run.predictions) if estimators is None else list(estimators)
    missing = [n for n in names if n not in run.predictions]
    if missing:
        raise InputError(f"{run.path}: no predictions for estimator(s) {missing}")
    idx = bootstrap_indices(run.n, int(n_bootstrap), seed) if n_bootstrap else np.empty((0, run.n), int)
    out: dict[str, dict[str, tuple[float, np.ndarray]]] = {}
    y = np.asarray(run.correct, dtype=bool)
    fns = {"smece": smece, **{f"auc_euro_{b}": METRICS[f"auc_euro_{b}"].fn for b in _BANDS}}
    for name in names:
        conf = run.predictions[name]
        draws = {"accuracy": y[idx].mean(axis=1)}
        for key, fn in fns.items():  # every resample at once
            draws[key] = metric_over_resamples(fn, conf, y, idx)
        full = metric_values(conf, y)
        out[name] = {k: (full[k], draws[k]) for k in _METRIC_KEYS}
    return out


def average_draws(per_run: Sequence[Mapping[str, Mapping[str, tuple[float, np.ndarray]]]]
                  ) -> dict[str, dict[str, tuple[float, np.ndarray]]]:
    """Average several runs' :func:`metric_draws` (independent test sets, e.g. one per model).

    For every estimator present in all runs: estimate = mean of the estimates, draw ``b`` = mean
    of the runs' draw ``b`` (all runs must have the same number of draws). Returns the same
    structure; an empty input gives ``{}``.
    """
    if not per_run:
        return {}
    common = [e for e in per_run[0] if all(e in r for r in per_run[1:])]
    out: dict[str, dict[str, tuple[float, np.ndarray]]] = {}
    for est in common:
        out[est] = {}
        for key in per_run[0][est]:
            estimates = [r[est][key][0] for r in per_run]
            draws = [np.asarray(r[est][key][1], dtype=np.float64) for r in per_run]
            if len({d.size for d in draws}) != 1:
                raise InputError(f"runs have different numbers of bootstrap draws: {[d.size for d in draws]}")
            out[est][key] = (float(np.mean(estimates)), np.mean(np.stack(draws), axis=0))
    return out


def interval_summary(draws: Mapping[str, Mapping[str, tuple[float, np.ndarray]]], alpha: float = 0.05
                     ) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{estimator: {metric: {"estimate", "low", "high"}}}``: percentile intervals of the draws.

    Non-finite draws are left out; ``low``/``high`` are ``None`` when no draw is finite (or
    there were none). Values are plain floats (JSON-ready).
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for est, by_metric in draws.items():
        out[est] = {}
        for key, (estimate, d) in by_metric.items():
            lo, hi, _ = percentile_interval(d, alpha)
            low = lo if math.isfinite(lo) else None
            high = hi if math.isfinite(hi) else None
            est_v = float(estimate) if estimate is not None and math.isfinite(estimate) else None
            out[est][key] = {"estimate": est_v, "low": low, "high": high}
    return out
