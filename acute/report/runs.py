"""One evaluation folder as the report reads it (:class:`EvalRun`: its ``results.json`` and the
test predictions the figures draw, or its ``results.json`` alone: a tables-only run, e.g. the
tables an earlier report committed), and the report's numbers: each evaluation's own metric rows
(nothing is recomputed, so a pair shows one number everywhere) and their mean over models."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..evaluation.table import TABLE_COLUMNS
from ..fileio import read_json

__all__ = ["REPORT_METRICS", "EvalRun", "average_summaries", "committed_eval_run", "load_eval_run", "run_summary",
           "settings_differences"]

logger = logging.getLogger(__name__)


#: (key, column header, direction): the report's columns, from the evaluation's (``acute.evaluation.table``):
#: the paper-style ones up to auc-euro all, then AURC and the coverage at 10% error beside its
#: certified counterpart (cross-validation only: ``acute.evaluation.table.CERTIFIED_MAX_ERROR``)
REPORT_METRICS: tuple[tuple[str, str, int], ...] = TABLE_COLUMNS[:6] + tuple(
    c for c in TABLE_COLUMNS if c[0] in ("aurc", "coverage_10")) + (
    ("certified_coverage_10", "certified coverage at 10% error ↑", +1),)


_METRIC_KEYS = tuple(k for k, _, _ in REPORT_METRICS)


@dataclass
class EvalRun:
    """One model's held-out predictions on one task (an evaluation folder).

    ``ids`` and ``correct`` (bool[n]) of the test records, ``predictions`` (estimator ->
    float64[n] confidence, in the evaluation's order) and ``results`` (the parsed
    ``results.json``). A tables-only run (:attr:`tables_only`: ``results.json`` alone, e.g. the
    tables an earlier report committed) has no ids, labels or predictions; its :attr:`n` and
    :attr:`accuracy` are the ones its ``results.json`` records.
    """

    model: str
    task: str
    path: Path
    ids: list[str]
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    results: dict = field(repr=False, default_factory=dict)

    @property
    def tables_only(self) -> bool:
        """No test predictions, only the evaluation's tables (nothing to draw figures from)."""
        return not self.predictions

    @property
    def n(self) -> int:
        """Scored records: the test predictions', or for a tables-only run the count its
        ``results.json`` records (a cross-validation's ``n_records``, a held-out split's ``n_test``)."""
        if not self.tables_only:
            return int(self.correct.size)
        sp = self.results.get("split", {})
        return int(sp.get("n_records", sp.get("n_test", 0)))

    @property
    def accuracy(self) -> float:
        """Share of correct answers among the scored records (a tables-only run: its
        ``results.json``'s ``split.accuracy``, or ``accuracy_test`` of a held-out split)."""
        if not self.tables_only:
            return float(np.mean(self.correct))
        sp = self.results.get("split", {})
        return float(sp.get("accuracy", sp.get("accuracy_test", math.nan)))


def load_eval_run(eval_dir: str | os.PathLike, model: str, task: str, predictions: bool = True) -> EvalRun:
    """Read ``results.json`` and ``predictions.csv`` of an evaluation folder; with
    ``predictions=False`` only ``results.json``: a tables-only run (``ids=[]``, ``predictions={}``,
    an empty ``correct``; :attr:`EvalRun.n` and :attr:`EvalRun.accuracy` from its ``split``).

    Raises ``FileNotFoundError`` when a file it reads is missing and ``InputError`` (naming the
    file and line) when ``results.json`` is not a complete evaluation, a prediction is not a
    number in [0, 1] or ``correct`` is not 0/1.
    """
    folder = Path(eval_dir)
    res_path, pred_path = folder / "results.json", folder / "predictions.csv"
    for p in (res_path, pred_path) if predictions else (res_path,):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist (run the evaluate stage first)")
    results = read_json(res_path, "run the evaluate stage first")
    if not isinstance(results, dict) or results.get("complete") is not True:
        raise InputError(f"{res_path}: not a complete evaluation (missing \"complete\": true)")
    if not predictions:
        return EvalRun(model=model, task=task, path=folder, ids=[], correct=np.zeros(0, dtype=bool),
                       predictions={}, results=results)
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


def settings_differences(results: Mapping[str, Any], expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """How a ``results.json`` differs from the evaluation settings ``expected`` of it:
    ``{"split": {key: value}, "params": {key: value}}``, compared as JSON (a key the evaluation
    did not record counts as None). ``params.estimators`` are the evaluated estimators: the
    recorded list is compared without its ``params.controls`` (which controls a store can feed is
    no setting). Returns ``"<block>.<key> = <recorded> (expected <value>)"`` per difference."""
    out = []
    for block, wanted in expected.items():
        recorded = results.get(block) or {}
        for key, value in wanted.items():
            got = recorded.get(key)
            if block == "params" and key == "estimators" and isinstance(got, list):
                got = [e for e in got if e not in (recorded.get("controls") or [])]
            if _as_json(got) != _as_json(value):
                out.append(f"{block}.{key} = {_as_json(got)} (expected {_as_json(value)})")
    return out


def committed_eval_run(folder: str | os.PathLike, model: str, task: str,
                       expected: Mapping[str, Mapping[str, Any]]) -> EvalRun | None:
    """The tables-only run (:func:`load_eval_run` with ``predictions=False``) of the evaluation
    tables an earlier report committed in ``folder`` (its ``results.json``), when they are a
    complete evaluation with the settings ``expected`` (:func:`settings_differences`): the same
    estimand as an evaluation on this machine. Otherwise None, with a warning that names the
    file and why (the pair then stays a kept row of the earlier summary)."""
    path = Path(folder) / "results.json"
    try:
        run = load_eval_run(folder, model, task, predictions=False)
    except (OSError, InputError) as exc:
        logger.warning("%s/%s: the committed tables are not used: %s", model, task, exc)
        return None
    differ = settings_differences(run.results, expected)
    if differ:
        logger.warning("%s/%s: the committed tables %s are not used: other settings than this config's: %s",
                       model, task, path, "; ".join(differ))
        return None
    return run


def _as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def run_summary(run: EvalRun, metrics: Sequence[str] | None = None
                ) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{estimator: {metric: {"estimate", "low", "high"}}}`` of one evaluation, read from its
    ``results.json`` (the evaluation's own numbers: means over cross-validation repeats, its
    95% bootstrap intervals; ``low``/``high`` None where it computed none). ``metrics``:
    the keys to read (default :data:`REPORT_METRICS`'); a metric the evaluation did not compute
    (an older acute) is None throughout. JSON-ready."""
    keys = list(metrics) if metrics is not None else list(_METRIC_KEYS)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for row in run.results.get("results", []):
        out[row["estimator"]] = {k: {"estimate": _finite(row.get(k)), "low": _finite(row.get(f"{k}_ci_low")),
                                     "high": _finite(row.get(f"{k}_ci_high"))} for k in keys}
    return out


def average_summaries(per_run: Sequence[Mapping[str, Mapping[str, Mapping[str, float | None]]]], z: float = 1.96
                      ) -> dict[str, dict[str, dict[str, float | None]]]:
    """The mean over independent evaluations (e.g. one per model) of :func:`run_summary` s.

    For every estimator present in all of them: estimate = the mean of the estimates; interval =
    estimate -/+ ``z`` x sqrt(sum of se_i^2) / k, with each se_i = its interval's half-width / z
    (a normal approximation: the evaluations are independent; the intervals, not the draws, are
    what results.json keeps). No interval when any evaluation lacks one. One evaluation is returned
    as it is: its own (percentile) interval, not a symmetrised one that could leave [0, 1]. An
    empty input gives ``{}``.
    """
    if not per_run:
        return {}
    k = len(per_run)
    if k == 1:  # one evaluation: its own interval (percentile, often asymmetric, e.g. smECE near 0)
        return {est: {key: dict(cell) for key, cell in metrics.items()} for est, metrics in per_run[0].items()}
    common = [e for e in per_run[0] if all(e in r for r in per_run[1:])]
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for est in common:
        out[est] = {}
        for key in per_run[0][est]:
            cells = [r[est].get(key) or {} for r in per_run]
            estimates = [c.get("estimate") for c in cells]
            if any(v is None for v in estimates):
                out[est][key] = {"estimate": None, "low": None, "high": None}
                continue
            mean = float(np.mean(estimates))
            low = high = None
            if all(c.get("low") is not None and c.get("high") is not None for c in cells):
                se = math.sqrt(sum(((c["high"] - c["low"]) / (2 * z)) ** 2 for c in cells)) / k
                low, high = mean - z * se, mean + z * se
            out[est][key] = {"estimate": mean, "low": low, "high": high}
    return out


def _finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
