"""Protocol study: verbalized vs token confidence under explicit measurement choices.

A comparison "is verbalized confidence better calibrated than token probability?" depends on
choices that papers rarely state. This module makes each one an explicit setting, measures the
signed gap ``g = metric(c_verb) - metric(c_tok)`` (positive: the verbalized confidence is *worse*
calibrated) for every combination, and reports how much ``g`` moves when one choice is toggled.

Settings (paper names)
----------------------
* **elicitation provenance**: the answer the model is asked to rate: its own ``generated``
  answer, or a provided ``gold``, ``plausible_wrong`` (the task's first plausible wrong answer)
  or ``wrong_type`` answer (an answer of another type). The elicitation template is fixed
  (:mod:`acute.verbalize`), greedy decoding.
* **scored answer**: whose token probability is the token confidence: the model's
  ``generated`` answer, or the ``gold`` reference answer by teacher forcing.
* **token readout**: ``T1`` = geometric mean of the answer span's token probabilities
  ``exp(mean(log p))``; ``T2`` = probability of the first answer token; ``product`` = the
  product of all span probabilities ``exp(sum(log p))`` (recorded and tabulated; the readout
  shift compares T1 and T2 as in the paper).
* **conditioning context**: the token probabilities are measured under the ``query`` (the
  task's own prompt, the text the model answered) or under the ``verbal`` prefix (the
  verbalization prompt up to and including the answer: the very text the model saw when it
  verbalized). The verbalization prompt shows the question as the task shows it to a base
  model, without the task's answering instruction and demonstrations
  (:func:`acute.verbalize.question_text`), so the two contexts differ by those (and, for base
  models, by ``Answer:`` vs ``Proposed answer:``); ``counts.n_context_identical`` reports how many generated
  answers had the same text before them in both contexts (a no-op axis would show there).
* **estimator**: 10-bin ``ECE``, ``KDE-ECE``, ``KS-Cal``, ``smECE``; ``Brier``, ``NLL`` and
  ``AUROC`` as robustness metrics (for AUROC higher is better, so ``g < 0`` there means the
  verbalized confidence ranks worse).

Which triple each cell compares
-------------------------------
Every cell compares two confidences *about the same answer*, against that answer's correctness,
on the same rows (so a paired bootstrap over rows gives the interval of ``g``):

* ``scored = generated``: one row per example whose generation is usable. ``c_verb`` = the
  verbalized confidence elicited on the generated answer (provenance ``generated``); ``c_tok`` =
  the readout of the generated answer's teacher-forced token log-probs under the chosen context;
  label = the task's correctness of the generated answer (``task.is_correct``).
* ``scored = gold``: the provided-answer rows pooled, one row per (example, provided answer):
  gold (label 1), plausible-wrong (label 0) and wrong-type (label 0), where the task has such an
  answer. ``c_verb`` = the verbalized confidence elicited on *that* provided answer; ``c_tok`` =
  the readout of *that* answer's teacher-forced log-probs under the chosen context; label known
  by construction.

Why not pair ``c_verb`` on the generated answer with the probability of the gold answer: the
two would then rate different answers, and ``P(gold)`` is not a probability that the generated
answer is correct; comparing their calibration against one label would mix the scored-answer
choice with a change of what is being rated. Pooling the wrong provided answers with the gold
one keeps both classes present (a gold-only set has every label 1). The provided answers'
token log-probs and verbalizations are all stored per record, so other pairings can be
recomputed from ``protocol.json``.

Intervals resample rows; in the pooled ``gold`` cells an example contributes up to three rows,
so those intervals treat rows as independent (a cluster bootstrap over examples would be
somewhat wider).

A row enters a cell only when its verbalization parsed and its answer was scored under *both*
contexts, so toggling context, readout or estimator never changes the rows. A reply without a
parseable number is a *parse failure*: counted per cell, excluded, never replaced; when every
elicitation of a cell failed the cell reads ``n/a: 100% parse failures``. An answer that
tokenizes to nothing (e.g. an empty generation) and a prompt beyond the context window are
counted and excluded with a warning.

Outputs of :func:`run_protocol`: ``protocol.json`` (settings, templates, wall time, every
per-record value: ids, correctness, generated answer, raw verbalization text and ``c_verb`` per
provenance, token log-probs per (answer, context); plus the computed cells) and ``protocol.md``
(gap table with paired-bootstrap intervals, shift table, provenance table, reporting checklist,
templates). :func:`write_protocol_report` combines several runs into the same tables.
"""

from __future__ import annotations

import logging
import datetime as _dt
import itertools
import json
import math
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as _metrics
from ._util import json_ready, progress as _progress, read_json, write_text_atomic
from .tasks.base import use_chat as resolve_chat
from .verbalize import TEMPLATES, build_verbal_prompt, parse_confidence, question_text, split_answer
from .errors import InputError

__all__ = [
    "AXES",
    "CONTEXTS",
    "ESTIMATORS",
    "PAPER_SHIFTS",
    "PROVENANCES",
    "PROVIDED",
    "READOUTS",
    "ROBUSTNESS",
    "SCORED",
    "SHIFT_READOUTS",
    "CellData",
    "ProtocolResult",
    "analyze_records",
    "cell_data",
    "checklist",
    "gap_cells",
    "load_protocol",
    "provenance_table",
    "readout",
    "render_combined_report",
    "render_report",
    "resample_indices",
    "run_protocol",
    "shift_table",
    "write_protocol_report",
]

logger = logging.getLogger(__name__)

FORMAT = "acute-protocol/1"

PROVENANCES = ("generated", "gold", "plausible_wrong", "wrong_type")
PROVIDED = ("gold", "plausible_wrong", "wrong_type")
#: correctness of a provided answer, known by construction
PROVIDED_LABELS = {"gold": True, "plausible_wrong": False, "wrong_type": False}
SCORED = ("generated", "gold")
READOUTS = ("T1", "T2", "product")
SHIFT_READOUTS = ("T1", "T2")
CONTEXTS = ("query", "verbal")
ESTIMATORS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "ECE": _metrics.ece,
    "KDE-ECE": _metrics.kde_ece,
    "KS-Cal": _metrics.ks_cal,
    "smECE": _metrics.smece,
}
ROBUSTNESS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "Brier": _metrics.brier,
    "NLL": _metrics.nll,
    "AUROC": _metrics.auroc,
}
AXES = ("context", "readout", "scored", "estimator")
#: mean absolute change of g per toggled axis reported in the paper (for reference in reports)
PAPER_SHIFTS = {"context": 0.28, "readout": 0.11, "estimator": 0.01}
VERBAL_MAX_NEW_TOKENS = 12
ALPHA = 0.05

_AXIS_LEVELS = {
    "context": CONTEXTS,
    "readout": SHIFT_READOUTS,
    "scored": SCORED,
    "estimator": tuple(ESTIMATORS),
}
_AXIS_TITLES = {
    "context": "conditioning context (query <-> verbal prefix)",
    "readout": "token readout (T1 <-> T2)",
    "scored": "scored answer (generated <-> gold)",
    "estimator": "estimator (pairs of ECE, KDE-ECE, KS-Cal, smECE)",
}
_SCORED_PROVENANCE = {
    "generated": "generated (the model's own answer)",
    "gold": "provided: gold + plausible-wrong + wrong-type, pooled",
}
_CONTEXT_NAMES = {"query": "bare query", "verbal": "verbalization prefix"}


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


def resample_indices(size: int, n: int, seed: int) -> np.ndarray:
    """``[n, size]`` bootstrap row indices: :func:`acute.metrics.bootstrap_indices`, so an
    interval computed from them equals ``acute.metrics.paired_bootstrap``'s for the same seed."""
    from .metrics import bootstrap_indices

    return bootstrap_indices(size, n, seed)


def _metric_stats(metric, conf: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.array([metric(conf[i], y[i]) for i in idx], dtype=np.float64)


def _percentiles(stats: np.ndarray, alpha: float = ALPHA) -> tuple[float | None, float | None, int]:
    from .metrics import percentile_interval

    low, high, n_bad = percentile_interval(stats, alpha)
    return _finite(low), _finite(high), n_bad


def _finite(x: float) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def gap_cells(records: Sequence[Mapping], *, n_bootstrap: int = 1000, seed: int = 0,
              estimators: Mapping[str, Callable] | None = None,
              progress: bool = False) -> list[dict[str, Any]]:
    """Every cell ``scored x readout x context x estimator`` with its signed gap.

    ``estimators`` defaults to :data:`ESTIMATORS` and :data:`ROBUSTNESS`. Each cell is a dict
    with ``scored, readout, context, estimator, status`` (``"ok"`` or an ``"n/a: ..."`` text),
    ``n`` (rows used), ``n_rows``, ``n_elicited``, ``n_parse_failures``, ``parse_failure_rate``,
    ``excluded``, ``verb`` = metric(c_verb), ``tok`` = metric(c_tok), ``gap`` = verb - tok and
    ``low``/``high``: the ``1 - ALPHA`` paired percentile bootstrap interval of the gap (rows
    resampled together, :func:`resample_indices`; non-finite resamples such as AUROC on a
    single-class resample are dropped and counted in ``n_nonfinite``). Values are ``None`` for
    an n/a cell and where the metric is undefined (AUROC with one class).
    """
    estimators = dict(estimators) if estimators is not None else {**ESTIMATORS, **ROBUSTNESS}
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 1:
        raise InputError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")
    cells: list[dict[str, Any]] = []
    jobs = [(s, e) for s in SCORED for e in estimators]
    data = {s: cell_data(records, s) for s in SCORED}
    indices = {s: resample_indices(d.n, n_bootstrap, seed) for s, d in data.items() if d.status() == "ok"}
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
                 for a, b in itertools.combinations(_AXIS_LEVELS[axis], 2) if a in g and b in g]
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
    idx = resample_indices(values.size, n_bootstrap, seed)
    low, high, _ = _percentiles(values[idx].mean(axis=1))
    return {"mean": float(values.mean()), "low": low, "high": high, "n": int(values.size)}


def provenance_table(records: Sequence[Mapping], *, n_bootstrap: int = 1000,
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
            "provenance": _SCORED_PROVENANCE[c["scored"]],
            "scored": c["scored"],
            "readout": c["readout"],
            "context": _CONTEXT_NAMES[c["context"]],
            "estimator": c["estimator"],
            "template": c.get("template", template),
            "parse_failure_rate": c["parse_failure_rate"],
            "n": c["n"],
        }
        if "run" in c:
            row = {"run": c["run"], **row}
        out.append(row)
    return out


def analyze_records(records: Sequence[Mapping], *, template: str = "unit", n_bootstrap: int = 1000,
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


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _gap_text(c: Mapping) -> str:
    if c["status"] != "ok":
        return c["status"]
    if c["gap"] is None:
        return "n/a: undefined"
    ci = "" if c["low"] is None else f" [{c['low']:+.3f}, {c['high']:+.3f}]"
    return f"{c['gap']:+.3f}{ci}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in r) + " |"
              for r in rows]
    return lines


def _row_key(c: Mapping, with_run: bool) -> tuple:
    key = (c["scored"], c["readout"], _CONTEXT_NAMES[c["context"]])
    return ((c["run"],) + key) if with_run else key


def _gap_tables(cells: Sequence[Mapping], with_run: bool) -> list[str]:
    lead = (["run"] if with_run else []) + ["scored answer", "readout", "context"]
    lines: list[str] = []
    for title, names, calibration in (
            ("Calibration gap g = metric(c_verb) - metric(c_tok), 95% paired bootstrap interval",
             tuple(ESTIMATORS), True),
            ("Robustness metrics: metric(c_verb) - metric(c_tok) (AUROC: higher is better)",
             tuple(ROBUSTNESS), False)):
        grid: dict[tuple, dict[str, Mapping]] = defaultdict(dict)
        for c in cells:
            if c["estimator"] in names:
                grid[_row_key(c, with_run)][c["estimator"]] = c
        present = [n for n in names if any(n in g for g in grid.values())]
        if not present:
            continue
        rows = []
        for key, by_est in grid.items():
            first = next(iter(by_est.values()))
            rows.append(list(key) + [_gap_text(by_est[n]) if n in by_est else "" for n in present]
                        + [first["n"], _pct(first["parse_failure_rate"])])
        lines += [f"### {title}", ""]
        lines += _table(lead + present + ["n", "parse failures"], rows) + [""]
        if calibration:
            vrows = []
            for key, by_est in grid.items():
                vrows.append(list(key) + [
                    "n/a" if by_est[n]["status"] != "ok" else
                    f"{_f(by_est[n]['verb'])} / {_f(by_est[n]['tok'])}" if n in by_est else ""
                    for n in present])
            lines += ["Underlying values, metric(c_verb) / metric(c_tok):", ""]
            lines += _table(lead + present, vrows) + [""]
    return lines


def _shift_lines(shifts: Mapping[str, Mapping], per_run: Mapping[str, Mapping] | None = None) -> list[str]:
    header = ["axis toggled", "mean abs change in g", "max", "pairs", "paper"]
    rows = [[_AXIS_TITLES[a], _f(shifts[a]["mean_abs_change"]), _f(shifts[a]["max_abs_change"]),
             shifts[a]["n_pairs"], _f(PAPER_SHIFTS.get(a))] for a in AXES]
    lines = ["## Shift table", "",
             "Mean |g(a) - g(b)| over pairs of cells that differ in one axis only (calibration "
             "estimators, readouts T1/T2; n/a cells left out).", ""]
    lines += _table(header, rows) + [""]
    if per_run:
        lines += ["Per run (mean abs change in g):", ""]
        lines += _table(["run"] + list(AXES),
                        [[run] + [_f(s[a]["mean_abs_change"]) for a in AXES]
                         for run, s in per_run.items()]) + [""]
    return lines


def _provenance_lines(prov_by_run: Mapping[str, Mapping]) -> list[str]:
    names = ["generated", "generated_correct", "generated_wrong"] + list(PROVIDED)
    lines = ["## Provenance table", "",
             "Mean verbalized confidence by the answer being rated (95% bootstrap interval; n; "
             "parse-failure rate).", ""]
    rows = []
    for run, prov in prov_by_run.items():
        for name in names:
            r = prov["rows"][name]
            value = (r["status"] if r["status"] != "ok" else
                     f"{_f(r['mean'])} [{_f(r['low'])}, {_f(r['high'])}]")
            rows.append(([run] if run else []) + [name, value, r["n"], _pct(r["parse_failure_rate"])])
        for name, d in prov["differences"].items():
            value = ("n/a: no example with both parsed" if d["mean"] is None else
                     f"{d['mean']:+.3f} [{_f(d['low'])}, {_f(d['high'])}]")
            rows.append(([run] if run else []) + [name + " (paired)", value, d["n"], ""])
    lead = ["run"] if any(prov_by_run) else []
    return lines + _table(lead + ["answer rated", "mean c_verb", "n", "parse failures"], rows) + [""]


def _checklist_lines(rows: Sequence[Mapping]) -> list[str]:
    keys = (["run"] if rows and "run" in rows[0] else []) + [
        "comparison", "provenance", "scored", "readout", "context", "estimator", "template",
        "parse_failure_rate", "n"]
    body = [[_pct(r[k]) if k == "parse_failure_rate" else r[k] for k in keys] for r in rows]
    return ["## Reporting checklist", "",
            "Every comparison states: elicitation provenance, scored answer, token readout, "
            "conditioning context, estimator, template, parse-failure rate, n.", ""] + \
        _table(keys, body) + [""]


def _definitions_lines() -> list[str]:
    return [
        "## What each cell compares", "",
        "* scored answer = generated: c_verb elicited on the model's generated answer vs c_tok of "
        "that answer (teacher-forced); label = the task's correctness of the generated answer.",
        "* scored answer = gold: provided answers pooled (gold -> 1, plausible-wrong -> 0, "
        "wrong-type -> 0); c_verb elicited on that provided answer vs c_tok of that answer by "
        "teacher forcing.",
        "* readout: T1 = geometric mean of the span's token probabilities, T2 = first-token "
        "probability, product = product of all span probabilities.",
        "* context: bare query = the task's own prompt; verbalization prefix = the verbalization "
        "prompt up to and including the answer.",
        "* g > 0: verbalized confidence is worse by that metric (for AUROC, better). Rows with an "
        "unparseable verbalization are excluded and counted; a cell whose elicitations all failed "
        "reads n/a.", ""]


def _counts_lines(doc: Mapping) -> list[str]:
    c = doc["counts"]
    lines = ["## Counts and exclusions", "",
             f"* examples: {c['n_examples']}; queries beyond the context window (skipped): "
             f"{c['n_query_too_long']}; empty generated answers (excluded): {c['n_empty_generated']}",
             f"* verbalization prompts equal to the bare query up to the answer: "
             f"{c['n_context_identical']} of {c['n_context_compared']} generated answers"]
    for prov, v in c["verbal"].items():
        lines.append(f"* verbalization on {prov}: " + ", ".join(f"{k} {n}" for k, n in v.items()))
    for prov, by_ctx in c["token"].items():
        lines.append(f"* token scoring of {prov}: " + "; ".join(
            f"{ctx}: " + ", ".join(f"{k} {n}" for k, n in v.items()) for ctx, v in by_ctx.items()))
    return lines + [""]


def _template_lines(templates: Mapping) -> list[str]:
    used = templates["used"]
    return ["## Elicitation template", "",
            f"Variant `{used['name']}` (scale {used['scale']}), greedy decoding.", "",
            "Chat (final user turn after user: question, assistant: answer):", "",
            "```", used["chat"], "```", "", "Plain (base models):", "", "```", used["plain"], "```", ""]


def render_report(doc: Mapping) -> str:
    """The markdown report (``protocol.md``) of one run's ``protocol.json`` document."""
    s = doc["settings"]
    lines = [f"# Protocol study: {doc['model']} on {doc['task']}", "",
             f"Verbalized vs token confidence. {s['n_examples']} examples, "
             f"{'chat template' if s['chat'] else 'plain prompts'}, template variant "
             f"`{s['variant']}`, {s['n_bootstrap']} bootstrap resamples (seed {s['seed']}), "
             f"wall time {doc['wall_time_s']:.1f} s.", ""]
    parse = {c["scored"]: c for c in doc["cells"]}
    for scored, c in parse.items():
        if c["status"].startswith("n/a: 100% parse failures"):
            lines.append(f"**Warning:** no verbalization for scored answer `{scored}` gave a "
                         f"parseable number ({c['status'][5:]}); its cells are marked n/a.")
    lines += ["", "## Gap table", ""] + _gap_tables(doc["cells"], with_run=False)
    lines += _shift_lines(doc["shifts"])
    lines += _provenance_lines({"": doc["provenance"]})
    lines += _counts_lines(doc)
    lines += _checklist_lines(doc["checklist"])
    lines += _template_lines(doc["templates"])
    lines += _definitions_lines()
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Writing and combining
# --------------------------------------------------------------------------------------------



def load_protocol(path: str | os.PathLike) -> dict[str, Any]:
    """Read a run's ``protocol.json`` (``path`` is the file or the run folder).

    Raises ``FileNotFoundError`` when it is missing and ``ValueError`` when it is not a protocol
    document of this format.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "protocol.json"
    doc = read_json(p, "run `acute protocol` first")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{p}: not an {FORMAT} document (format={doc.get('format') if isinstance(doc, dict) else None!r})")
    return doc


def render_combined_report(docs: Sequence[Mapping], labels: Sequence[str]) -> tuple[str, dict]:
    """Markdown and JSON summary combining several runs (``labels[i]`` names ``docs[i]``).

    Cells of all runs are tabulated together; the shift table pools pairs over runs (pairs are
    only formed within a run) and is also given per run.
    """
    cells, checks, per_run, prov = [], [], {}, {}
    for doc, label in zip(docs, labels):
        variant = doc["settings"]["variant"]
        run_cells = [{**c, "run": label, "template": variant} for c in doc["cells"]]
        cells += run_cells
        checks += checklist(run_cells, variant)
        per_run[label] = shift_table(run_cells)
        prov[label] = doc["provenance"]
    pooled = shift_table(cells)
    lines = ["# Protocol study: combined report", "",
             f"{len(docs)} runs: " + "; ".join(
                 f"{lab} ({d['settings']['n_examples']} examples, variant {d['settings']['variant']})"
                 for lab, d in zip(labels, docs)), ""]
    lines += ["## Gap table", ""] + _gap_tables(cells, with_run=True)
    lines += _shift_lines(pooled, per_run)
    lines += _provenance_lines(prov)
    lines += _checklist_lines(checks)
    lines += _definitions_lines()
    summary = {"format": FORMAT + "-report", "runs": list(labels), "shifts": pooled,
               "shifts_per_run": per_run, "cells": cells}
    return "\n".join(lines), summary


def write_protocol_report(run_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Combine protocol runs (models x tasks) into ``out_dir/protocol-report.md`` (returned) and
    ``protocol-report.json``, written atomically.

    Each entry of ``run_dirs`` is a run folder or its ``protocol.json``. Raises ``ValueError`` for
    no runs and the errors of :func:`load_protocol`.
    """
    if isinstance(run_dirs, (str, os.PathLike)) or not run_dirs:
        raise InputError("run_dirs must be a non-empty list of run folders")
    docs = [load_protocol(p) for p in run_dirs]
    labels, seen = [], defaultdict(int)
    for doc in docs:
        label = f"{doc['model']} on {doc['task']}"
        seen[label] += 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    md, summary = render_combined_report(docs, labels)
    out = Path(out_dir)
    md_path = out / "protocol-report.md"
    write_text_atomic(out / "protocol-report.json", json.dumps(json_ready(summary, nonfinite="clip"), indent=1))
    write_text_atomic(md_path, md)
    logger.info("protocol report: wrote %s and %s", md_path, out / "protocol-report.json")
    return md_path


# --------------------------------------------------------------------------------------------
# Running the grid
# --------------------------------------------------------------------------------------------


@dataclass
class ProtocolResult:
    """What :func:`run_protocol` wrote and computed.

    ``cells`` (:func:`gap_cells`), ``shifts`` (:func:`shift_table`), ``provenance``
    (:func:`provenance_table`), ``checklist``, ``counts`` (exclusions), ``records`` (per-record
    values as in ``protocol.json``), ``wall_time_s``, and the output paths.
    """

    out_dir: Path
    json_path: Path
    md_path: Path
    cells: list[dict]
    shifts: dict
    provenance: dict
    checklist: list[dict]
    counts: dict
    records: list[dict]
    wall_time_s: float


def _context_limit(model) -> int | None:
    try:
        from .extraction import context_window
    except ImportError:  # pragma: no cover
        context_window = None
    if context_window is not None:
        return context_window(model)
    value = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(value) if value else None


def _model_name(model, model_name: str | None) -> str:
    if model_name:
        return str(model_name)
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or type(model).__name__)


def _fingerprint(model) -> dict | None:
    try:
        from .models import model_fingerprint
        return model_fingerprint(model)
    except Exception:  # noqa: BLE001 - informative only
        return None


def _first_text(values) -> str | None:
    for v in values or []:
        if isinstance(v, str) and v.strip():
            return v
    return None


def _provided_answers(task, ex) -> dict[str, str | None]:
    gold = task.gold_answer(ex)
    wrong = _first_text(task.plausible_wrong(ex))
    wtype = task.wrong_type(ex)
    out = {}
    for prov, ans in (("gold", gold), ("plausible_wrong", wrong), ("wrong_type", wtype)):
        out[prov] = None if ans is None else str(task.answer_text(ex, ans)).strip()
    return out


def _count(statuses) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for s in statuses:
        out[s] += 1
    return dict(sorted(out.items()))


def run_protocol(model, tokenizer, task, examples, out_dir, *, model_name: str | None = None,
                 batch_size: int = 8, max_new_tokens: int | None = None, n_bootstrap: int = 1000,
                 seed: int = 0, variant: str = "unit", progress: bool = True,
                 chat: bool | None = None,
                 verbal_max_new_tokens: int = VERBAL_MAX_NEW_TOKENS) -> ProtocolResult:
    """Run the protocol grid on ``examples`` and write ``protocol.json`` and ``protocol.md``.

    Passes (all batched): (1) greedy generation of an answer per example under the task prompt
    (``generate_and_record``, ``max_new_tokens`` defaults to the task's); (2) greedy
    verbalization (``verbal_max_new_tokens`` tokens) of the generated answer and of the provided
    gold, plausible-wrong and wrong-type answers with template ``variant`` (``"unit"`` or
    ``"percent"``, see :mod:`acute.verbalize`); (3) teacher-forced scoring
    (``score_continuations``) of each of these answers under the bare query and under its
    verbalization prefix. Then the cells, shift and provenance tables and the checklist are
    computed (``n_bootstrap`` paired resamples, ``seed``) and written atomically to ``out_dir``.
    ``chat=None`` uses the chat template when the tokenizer has one (instruct models), plain
    prompts otherwise (base models).

    Bad input is counted, reported and excluded, never filled in: a query beyond the context
    window (the example is skipped), an empty generated answer, a verbalization without a
    parseable number, a verbalization prompt or scored pair beyond the context window. Raises
    ``ValueError`` for bad arguments (no examples, unknown variant, non-positive sizes).
    """
    from .extraction import generate_and_record, score_continuations

    start = time.perf_counter()
    examples = list(examples)
    if not examples:
        raise InputError("examples is empty: nothing to run the protocol on")
    if variant not in TEMPLATES:
        raise InputError(f"variant must be one of {sorted(TEMPLATES)}, got {variant!r}")
    for name, value in (("batch_size", batch_size), ("n_bootstrap", n_bootstrap),
                        ("verbal_max_new_tokens", verbal_max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
        raise InputError(f"max_new_tokens must be a positive integer or None, got {max_new_tokens!r}")
    use_chat = resolve_chat(tokenizer, chat)
    template = TEMPLATES[variant]
    out = Path(out_dir)
    gen_tokens = int(max_new_tokens or getattr(task, "max_new_tokens", 32))

    # (1) answers -----------------------------------------------------------------------------
    queries = [task.prompt(tokenizer, ex, chat=use_chat) for ex in examples]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # too-long prompts: counted and reported below
        gens = generate_and_record(model, tokenizer, queries, max_new_tokens=gen_tokens,
                                   batch_size=batch_size,
                                   stop_strings=tuple(getattr(task, "stop_strings", ()) or ()),
                                   progress=progress)
    records: list[dict[str, Any]] = []
    for ex, query, gen in zip(examples, queries, gens):
        rec: dict[str, Any] = {
            "id": str(ex.id), "question": ex.question, "gold": list(ex.answers),
            "query_prompt": query, "status": "ok" if gen is not None else "too_long",
            "generation": None, "extracted": None, "correct": None, "finish_reason": None,
            "gen_logprobs": None, "answers": {p: None for p in PROVENANCES},
            "labels": {p: None for p in PROVENANCES},
            "verbal": {p: {"status": "unavailable", "raw": None, "c_verb": None, "prompt": None}
                       for p in PROVENANCES},
            "token": {p: {c: {"status": "unavailable", "logprobs": None} for c in CONTEXTS}
                      for p in PROVENANCES},
        }
        if gen is not None:
            rec.update(generation=gen.text, extracted=task.extract(ex, gen.text),
                       correct=bool(task.is_correct(ex, gen.text)), finish_reason=gen.finish_reason,
                       gen_logprobs=[float(x) for x in np.asarray(gen.token_logprobs)])
            rec["answers"]["generated"] = gen.text.strip()
            rec["labels"]["generated"] = rec["correct"]
            for prov, ans in _provided_answers(task, ex).items():
                rec["answers"][prov] = ans
                rec["labels"][prov] = PROVIDED_LABELS[prov] if ans is not None else None
        records.append(rec)
    n_too_long = sum(r["status"] == "too_long" for r in records)
    if n_too_long:
        warnings.warn(f"{n_too_long} of {len(records)} prompts exceed the context window and were "
                      "skipped (counted in the report)", UserWarning, stacklevel=2)

    # (2) verbalization prompts and (3) scoring jobs ------------------------------------------
    vjobs: list[tuple[int, str]] = []
    vprompts: list[str] = []
    sjobs: list[tuple[int, str, str, str, str]] = []  # (record, provenance, context, prefix, cont)
    n_empty = n_compared = n_identical = 0
    for i, (ex, rec) in enumerate(zip(examples, records)):
        if rec["status"] != "ok":
            continue
        qtext = question_text(task, ex)
        for prov in PROVENANCES:
            ans = rec["answers"][prov]
            if ans is None:
                continue
            if not ans:
                rec["verbal"][prov]["status"] = "empty_answer"
                for ctx in CONTEXTS:
                    rec["token"][prov][ctx]["status"] = "empty_span"
                n_empty += prov == "generated"
                continue
            try:
                vp = build_verbal_prompt(tokenizer, qtext, ans, variant=variant, chat=use_chat)
            except ValueError as exc:
                rec["verbal"][prov].update(status="template_error", raw=str(exc))
                rec["token"][prov]["verbal"]["status"] = "template_error"
                vp = None
            if vp is not None:
                rec["verbal"][prov]["prompt"] = vp.prompt
                vjobs.append((i, prov))
                vprompts.append(vp.prompt)
                sjobs.append((i, prov, "verbal", vp.prefix, vp.continuation))
            qprefix, qcont = split_answer(rec["query_prompt"], ans)
            sjobs.append((i, prov, "query", qprefix, qcont))
            if prov == "generated" and vp is not None:
                n_compared += 1
                n_identical += (qprefix + qcont) == (vp.prefix + vp.continuation)
    if n_empty:
        warnings.warn(f"{n_empty} generated answers are empty (the answer span has no tokens); "
                      "excluded and counted", UserWarning, stacklevel=2)

    if vprompts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            vgens = generate_and_record(model, tokenizer, vprompts,
                                        max_new_tokens=verbal_max_new_tokens,
                                        batch_size=batch_size, progress=progress)
        for (i, prov), g in zip(vjobs, vgens):
            slot = records[i]["verbal"][prov]
            if g is None:
                slot["status"] = "too_long"
                continue
            value = parse_confidence(g.text, template.scale)
            slot.update(raw=g.text, c_verb=value,
                        status="ok" if value is not None else "parse_failure")
        n_vlong = sum(g is None for g in vgens)
        if n_vlong:
            warnings.warn(f"{n_vlong} verbalization prompts exceed the context window; skipped and "
                          "counted (verbal status too_long)", UserWarning, stacklevel=2)

    limit = _context_limit(model)
    runnable: list[int] = []
    if sjobs:
        p_ids = tokenizer([j[3] for j in sjobs], add_special_tokens=False)["input_ids"]
        c_ids = tokenizer([j[4] for j in sjobs], add_special_tokens=False)["input_ids"]
        for k, (i, prov, ctx, _, _) in enumerate(sjobs):
            slot = records[i]["token"][prov][ctx]
            if not c_ids[k]:
                slot["status"] = "empty_span"
            elif not p_ids[k] or (limit is not None and len(p_ids[k]) + len(c_ids[k]) > limit):
                slot["status"] = "too_long" if p_ids[k] else "empty_context"
            else:
                runnable.append(k)
    chunk = max(1, batch_size * 16)
    chunks = [runnable[s: s + chunk] for s in range(0, len(runnable), chunk)]
    for part in _progress(chunks, len(chunks), progress, "score"):
        scores = score_continuations(model, tokenizer, [sjobs[k][3] for k in part],
                                     [sjobs[k][4] for k in part], batch_size=batch_size)
        for k, lp in zip(part, scores):
            i, prov, ctx, _, _ = sjobs[k]
            records[i]["token"][prov][ctx].update(
                status="ok", logprobs=[float(x) for x in np.asarray(lp, dtype=np.float64)])
    n_span_empty = sum(records[sjobs[k][0]]["token"][sjobs[k][1]][sjobs[k][2]]["status"] == "empty_span"
                       for k in range(len(sjobs)))
    if n_span_empty:
        warnings.warn(f"{n_span_empty} answer spans tokenize to nothing; excluded and counted",
                      UserWarning, stacklevel=2)

    # analysis and outputs ---------------------------------------------------------------------
    ok_records = [r for r in records if r["status"] == "ok"]
    counts = {
        "n_examples": len(records),
        "n_query_too_long": n_too_long,
        "n_empty_generated": n_empty,
        "n_context_compared": n_compared,
        "n_context_identical": n_identical,
        "verbal": {p: _count(r["verbal"][p]["status"] for r in ok_records) for p in PROVENANCES},
        "token": {p: {c: _count(r["token"][p][c]["status"] for r in ok_records) for c in CONTEXTS}
                  for p in PROVENANCES},
    }
    analysis = analyze_records(records, template=variant, n_bootstrap=n_bootstrap, seed=seed,
                               progress=progress)
    wall = time.perf_counter() - start
    settings_fn = getattr(task, "settings", None)
    try:
        task_settings = settings_fn() if callable(settings_fn) else None
    except Exception:  # noqa: BLE001 - informative only
        task_settings = None
    doc = {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": _model_name(model, model_name),
        "model_fingerprint": _fingerprint(model),
        "task": str(getattr(task, "name", type(task).__name__)),
        "task_settings": task_settings,
        "settings": {
            "n_examples": len(records), "chat": use_chat, "variant": variant,
            "scale": template.scale, "batch_size": batch_size, "max_new_tokens": gen_tokens,
            "verbal_max_new_tokens": verbal_max_new_tokens, "n_bootstrap": n_bootstrap,
            "seed": seed, "decoding": "greedy", "alpha": ALPHA,
            "scored": list(SCORED), "readouts": list(READOUTS), "contexts": list(CONTEXTS),
            "estimators": list(ESTIMATORS), "robustness": list(ROBUSTNESS),
        },
        "templates": {"used": template.as_dict(),
                      "all": {k: t.as_dict() for k, t in TEMPLATES.items()}},
        "wall_time_s": wall,
        "counts": counts,
        **analysis,
        "records": records,
    }
    doc = json_ready(doc, nonfinite="clip")
    json_path, md_path = out / "protocol.json", out / "protocol.md"
    write_text_atomic(json_path, json.dumps(doc, indent=1, ensure_ascii=False))
    write_text_atomic(md_path, render_report(doc))
    logger.info("protocol study: wrote %s and %s", json_path, md_path)
    return ProtocolResult(out_dir=out, json_path=json_path, md_path=md_path,
                          cells=doc["cells"], shifts=doc["shifts"], provenance=doc["provenance"],
                          checklist=doc["checklist"], counts=counts, records=doc["records"],
                          wall_time_s=wall)
