"""The protocol study's analysis, pure functions of per-row records: token readouts, cell data,
gap cells with paired bootstrap intervals, the shift table, the provenance table, the checklist."""

from __future__ import annotations

import itertools
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..fileio import progress as _progress
from ..errors import InputError
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP, bootstrap_indices, percentile_interval
from ..validation import check_count
from .settings import (
    ALPHA,
    AXES,
    CONTEXTS,
    ESTIMATORS,
    PROVENANCES,
    PROVIDED,
    PROVIDED_LABELS,
    READOUTS,
    ROBUSTNESS,
    SCORED,
    SHIFT_READOUTS,
    AXIS_LEVELS,
    CONTEXT_NAMES,
    SCORED_PROVENANCE,
)
from ..metrics import metric_over_resamples

__all__ = ["analyze_records", "cell_data", "checklist", "gap_cells", "provenance_table", "readout",
           "shift_table"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Token readouts
# --------------------------------------------------------------------------------------------


def readout(logprobs: Sequence[float] | np.ndarray, kind: str) -> float:
    """Token confidence of an answer span from its token log-probabilities.

    ``"T1"``: ``exp(mean(logprobs))`` (geometric mean of the token probabilities); ``"T2"``:
    ``exp(logprobs[0])`` (first token); ``"product"``: ``exp(sum(logprobs))``. The result is
    clipped to [0, 1] (float32 log-probs can exceed 0 by rounding). Raises ``ValueError`` for an
    unknown ``kind``, an empty span, a non-1-D input or NaN.
    """
    if kind not in READOUTS:
        raise InputError(f"kind must be one of {READOUTS}, got {kind!r}")
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 1:
        raise InputError(f"logprobs must be 1-D, got shape {lp.shape}")
    if lp.size == 0:
        raise InputError("logprobs is empty: an answer span needs at least one token")
    if np.isnan(lp).any():
        raise InputError("logprobs contains NaN")
    if kind == "T1":
        value = math.exp(float(lp.mean()))
    elif kind == "T2":
        value = math.exp(float(lp[0]))
    else:
        value = math.exp(float(lp.sum()))
    return float(min(max(value, 0.0), 1.0))


# --------------------------------------------------------------------------------------------
# Rows of a cell
# --------------------------------------------------------------------------------------------


@dataclass
class CellData:
    """The rows shared by every cell of one scored answer (see the module docstring).

    ``c_verb`` float64[n], ``correct`` bool[n], ``logprobs[context]`` a list of n arrays, ``ids``
    row ids (``"<id>"`` or ``"<id>/<provenance>"``). Counts: ``n_rows`` candidate rows,
    ``n_elicited`` rows whose verbalization was generated, ``n_parse_failures`` of them without a
    parseable number, and ``excluded`` (reason -> count) for every row left out.
    """

    scored: str
    c_verb: np.ndarray
    correct: np.ndarray
    logprobs: dict[str, list[np.ndarray]]
    ids: list[str]
    n_rows: int = 0
    n_elicited: int = 0
    n_parse_failures: int = 0
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.c_verb.shape[0])

    @property
    def parse_failure_rate(self) -> float | None:
        """Parse failures / elicitations, ``None`` when nothing was elicited."""
        return self.n_parse_failures / self.n_elicited if self.n_elicited else None

    def status(self) -> str:
        """``"ok"`` or the ``"n/a: ..."`` text a report shows instead of the cell's value."""
        if self.n_elicited and self.n_parse_failures == self.n_elicited:
            return f"n/a: 100% parse failures ({self.n_parse_failures}/{self.n_elicited})"
        if self.n == 0:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.excluded.items()) if v)
            return f"n/a: no usable rows ({reasons or 'no rows'})"
        return "ok"

    def confidences(self, kind: str, context: str) -> np.ndarray:
        """``c_tok`` of the rows for one readout and context."""
        if context not in CONTEXTS:
            raise InputError(f"context must be one of {CONTEXTS}, got {context!r}")
        return np.array([readout(lp, kind) for lp in self.logprobs[context]], dtype=np.float64)


def _candidates(records: Sequence[Mapping], scored: str):
    """Yield ``(row_id, provenance, label, record)`` for the candidate rows of ``scored``."""
    for rec in records:
        if rec.get("status") != "ok":
            continue
        if scored == "generated":
            if rec["answers"].get("generated") is None:
                continue
            yield str(rec["id"]), "generated", bool(rec["correct"]), rec
        else:
            for prov in PROVIDED:
                if rec["answers"].get(prov) is None:
                    continue
                yield f"{rec['id']}/{prov}", prov, PROVIDED_LABELS[prov], rec


def cell_data(records: Sequence[Mapping], scored: str) -> CellData:
    """Collect the rows of ``scored`` (``"generated"`` or ``"gold"``) from per-record values.

    ``records`` are the per-record dicts of ``protocol.json`` (see :func:`run_protocol`). A row
    is kept when its verbalization status is ``"ok"`` and its token log-probs are ``"ok"`` under
    every context; otherwise it is counted in ``excluded`` under its first failing reason
    (``verbal:<status>`` or ``token:<context>:<status>``).
    """
    if scored not in SCORED:
        raise InputError(f"scored must be one of {SCORED}, got {scored!r}")
    c_verb, labels, ids = [], [], []
    lps: dict[str, list[np.ndarray]] = {ctx: [] for ctx in CONTEXTS}
    excluded: dict[str, int] = defaultdict(int)
    n_rows = n_elicited = n_fail = 0
    for row_id, prov, label, rec in _candidates(records, scored):
        n_rows += 1
        verbal = rec["verbal"][prov]
        if verbal["status"] in ("ok", "parse_failure"):
            n_elicited += 1
        if verbal["status"] == "parse_failure":
            n_fail += 1
        if verbal["status"] != "ok":
            excluded[f"verbal:{verbal['status']}"] += 1
            continue
        token = rec["token"][prov]
        bad = [ctx for ctx in CONTEXTS if token[ctx]["status"] != "ok"]
        if bad:
            excluded[f"token:{bad[0]}:{token[bad[0]]['status']}"] += 1
            continue
        c_verb.append(float(verbal["c_verb"]))
        labels.append(bool(label))
        ids.append(row_id)
        for ctx in CONTEXTS:
            lps[ctx].append(np.asarray(token[ctx]["logprobs"], dtype=np.float64))
    return CellData(scored=scored, c_verb=np.asarray(c_verb, dtype=np.float64),
                    correct=np.asarray(labels, dtype=bool), logprobs=lps, ids=ids, n_rows=n_rows,
                    n_elicited=n_elicited, n_parse_failures=n_fail, excluded=dict(excluded))


# --------------------------------------------------------------------------------------------
# Gap cells with paired bootstrap intervals
# --------------------------------------------------------------------------------------------


def _metric_stats(metric, conf: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``metric`` on every resample (row of ``idx``), non-finite-metric warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return metric_over_resamples(metric, conf, y, idx)


def _percentiles(stats: np.ndarray, alpha: float = ALPHA) -> tuple[float | None, float | None, int]:
    low, high, n_bad = percentile_interval(stats, alpha)
    return _finite(low), _finite(high), n_bad


def _finite(x: float) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def gap_cells(records: Sequence[Mapping], *, n_bootstrap: int = DEFAULT_N_BOOTSTRAP, seed: int = 0,
              estimators: Mapping[str, Callable] | None = None,
              progress: bool = False) -> list[dict[str, Any]]:
    """Every cell ``scored x readout x context x estimator`` with its signed gap.

    ``estimators`` defaults to :data:`ESTIMATORS` and :data:`ROBUSTNESS`. Each cell is a dict
    with ``scored, readout, context, estimator, status`` (``"ok"`` or an ``"n/a: ..."`` text),
    ``n`` (rows used), ``n_rows``, ``n_elicited``, ``n_parse_failures``, ``parse_failure_rate``,
    ``excluded``, ``verb`` = metric(c_verb), ``tok`` = metric(c_tok), ``gap`` = verb - tok and
    ``low``/``high``: the ``1 - ALPHA`` paired percentile bootstrap interval of the gap (rows
    resampled together, :func:`acute.metrics.bootstrap_indices`, so an interval equals
    ``acute.metrics.paired_bootstrap``'s for the same seed; non-finite resamples such as AUROC on a
    single-class resample are dropped and counted in ``n_nonfinite``). Values are ``None`` for
    an n/a cell and where the metric is undefined (AUROC with one class).
    """
    estimators = dict(estimators) if estimators is not None else {**ESTIMATORS, **ROBUSTNESS}
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap", minimum=1)
    cells: list[dict[str, Any]] = []
    jobs = [(s, e) for s in SCORED for e in estimators]
    data = {s: cell_data(records, s) for s in SCORED}
    indices = {s: bootstrap_indices(d.n, n_bootstrap, seed) for s, d in data.items() if d.status() == "ok"}
    tok_conf = {(s, r, c): d.confidences(r, c) for s, d in data.items() if d.status() == "ok"
                for r in READOUTS for c in CONTEXTS}
    for scored, est in _progress(jobs, len(jobs), progress, "bootstrap"):
        d = data[scored]
        base = {"scored": scored, "estimator": est, "status": d.status(), "n": d.n,
                "n_rows": d.n_rows, "n_elicited": d.n_elicited,
                "n_parse_failures": d.n_parse_failures, "parse_failure_rate": d.parse_failure_rate,
                "excluded": dict(d.excluded)}
        if base["status"] != "ok":
            for r in READOUTS:
                for c in CONTEXTS:
                    cells.append({**base, "readout": r, "context": c, "verb": None, "tok": None,
                                  "gap": None, "low": None, "high": None, "n_nonfinite": 0})
            continue
        metric = estimators[est]
        idx = indices[scored]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            verb = float(metric(d.c_verb, d.correct))
        verb_stats = _metric_stats(metric, d.c_verb, d.correct, idx)
        for r in READOUTS:
            for c in CONTEXTS:
                conf = tok_conf[(scored, r, c)]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    tok = float(metric(conf, d.correct))
                low, high, n_bad = _percentiles(verb_stats - _metric_stats(metric, conf, d.correct, idx))
                cells.append({**base, "readout": r, "context": c, "verb": _finite(verb),
                              "tok": _finite(tok), "gap": _finite(verb - tok), "low": low,
                              "high": high, "n_nonfinite": n_bad})
    order = {k: i for i, k in enumerate(estimators)}
    cells.sort(key=lambda c: (SCORED.index(c["scored"]), READOUTS.index(c["readout"]),
                              CONTEXTS.index(c["context"]), order[c["estimator"]]))
    return cells


# --------------------------------------------------------------------------------------------
# Shift table
# --------------------------------------------------------------------------------------------


def shift_table(cells: Sequence[Mapping], group_by: Sequence[str] = ("run",)) -> dict[str, dict]:
    """Mean absolute change in ``g`` when one axis is toggled with the others fixed.

    For each axis in :data:`AXES`, cells are grouped by the values of the other three axes (and
    of ``group_by`` keys such as the run, when present); within a group every pair of levels of
    the axis gives ``|g_a - g_b|`` (readout levels: T1 and T2; estimator levels: the four
    calibration estimators, so the estimator axis averages over the 6 estimator pairs). Only
    calibration-estimator cells with readout T1/T2 and a finite gap take part. Returns
    ``{axis: {"mean_abs_change": float | None, "max_abs_change": ..., "n_pairs": int}}``
    (``None`` when no pair had both values).
    """
    usable = [c for c in cells if c.get("estimator") in ESTIMATORS
              and c.get("readout") in SHIFT_READOUTS and c.get("gap") is not None]
    out: dict[str, dict] = {}
    for axis in AXES:
        others = [a for a in AXES if a != axis] + list(group_by)
        groups: dict[tuple, dict[str, float]] = defaultdict(dict)
        for c in usable:
            groups[tuple(c.get(k) for k in others)][c[axis]] = float(c["gap"])
        diffs = [abs(g[a] - g[b]) for g in groups.values()
                 for a, b in itertools.combinations(AXIS_LEVELS[axis], 2) if a in g and b in g]
        out[axis] = {"mean_abs_change": float(np.mean(diffs)) if diffs else None,
                     "max_abs_change": float(np.max(diffs)) if diffs else None,
                     "n_pairs": len(diffs)}
    return out


# --------------------------------------------------------------------------------------------
# Provenance table
# --------------------------------------------------------------------------------------------


def _mean_interval(values: np.ndarray, n_bootstrap: int, seed: int) -> dict[str, Any]:
    if values.size == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    idx = bootstrap_indices(values.size, n_bootstrap, seed)
    low, high, _ = _percentiles(values[idx].mean(axis=1))
    return {"mean": float(values.mean()), "low": low, "high": high, "n": int(values.size)}


def provenance_table(records: Sequence[Mapping], *, n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
                     seed: int = 0) -> dict[str, Any]:
    """Mean verbalized confidence per elicitation provenance, and paired differences.

    Returns ``{"rows": {provenance: {mean, low, high, n, n_rows, n_elicited, n_parse_failures,
    parse_failure_rate, status}}, "differences": {name: {mean, low, high, n}}}`` where rows also
    include ``generated_correct`` / ``generated_wrong`` (generated answers split by correctness)
    and the differences are per-example paired ``gold - plausible_wrong`` and
    ``gold - wrong_type`` (examples where both parsed). Intervals: percentile bootstrap of the
    mean over rows (examples for the differences).
    """
    rows: dict[str, Any] = {}
    parsed: dict[str, dict[str, float]] = {p: {} for p in PROVENANCES}
    subsets = [(p, p, None) for p in PROVENANCES] + [
        ("generated_correct", "generated", True), ("generated_wrong", "generated", False)]
    for name, prov, want in subsets:
        vals, n_rows, n_el, n_fail = [], 0, 0, 0
        for rec in records:
            if rec.get("status") != "ok" or rec["answers"].get(prov) is None:
                continue
            if want is not None and bool(rec["correct"]) != want:
                continue
            n_rows += 1
            v = rec["verbal"][prov]
            if v["status"] in ("ok", "parse_failure"):
                n_el += 1
            if v["status"] == "parse_failure":
                n_fail += 1
            if v["status"] == "ok":
                vals.append(float(v["c_verb"]))
                if want is None:
                    parsed[prov][str(rec["id"])] = float(v["c_verb"])
        row = _mean_interval(np.asarray(vals, dtype=np.float64), n_bootstrap, seed)
        row.update(n_rows=n_rows, n_elicited=n_el, n_parse_failures=n_fail,
                   parse_failure_rate=n_fail / n_el if n_el else None)
        if n_el and n_fail == n_el:
            row["status"] = f"n/a: 100% parse failures ({n_fail}/{n_el})"
        elif not vals:
            row["status"] = "n/a: no rows" if not n_rows else "n/a: no usable rows"
        else:
            row["status"] = "ok"
        rows[name] = row
    diffs = {}
    for other in ("plausible_wrong", "wrong_type"):
        common = [i for i in parsed["gold"] if i in parsed[other]]
        d = np.array([parsed["gold"][i] - parsed[other][i] for i in common], dtype=np.float64)
        diffs[f"gold - {other}"] = _mean_interval(d, n_bootstrap, seed)
    return {"rows": rows, "differences": diffs}


# --------------------------------------------------------------------------------------------
# Checklist and the full analysis
# --------------------------------------------------------------------------------------------


def checklist(cells: Sequence[Mapping], template: str) -> list[dict[str, Any]]:
    """One reporting-checklist row per calibration comparison (cell with an ECE-type estimator).

    Each row states: ``comparison`` (a short id), ``provenance``, ``scored``, ``readout``,
    ``context``, ``estimator``, ``template``, ``parse_failure_rate``, ``n`` (and ``run`` when
    the cell has one).
    """
    out = []
    for c in cells:
        if c["estimator"] not in ESTIMATORS:
            continue
        row = {
            "comparison": f"g[{c['scored']}, {c['readout']}, {c['context']}, {c['estimator']}]",
            "provenance": SCORED_PROVENANCE[c["scored"]],
            "scored": c["scored"],
            "readout": c["readout"],
            "context": CONTEXT_NAMES[c["context"]],
            "estimator": c["estimator"],
            "template": c.get("template", template),
            "parse_failure_rate": c["parse_failure_rate"],
            "n": c["n"],
        }
        if "run" in c:
            row = {"run": c["run"], **row}
        out.append(row)
    return out


def analyze_records(records: Sequence[Mapping], *, template: str = "unit", n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
                    seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """All derived tables from per-record values: ``{"cells", "shifts", "provenance",
    "checklist"}`` (see :func:`gap_cells`, :func:`shift_table`, :func:`provenance_table`,
    :func:`checklist`). Use it to recompute a report from ``protocol.json``'s records."""
    cells = gap_cells(records, n_bootstrap=n_bootstrap, seed=seed, progress=progress)
    return {
        "cells": cells,
        "shifts": shift_table(cells),
        "provenance": provenance_table(records, n_bootstrap=n_bootstrap, seed=seed),
        "checklist": checklist(cells, template),
    }
