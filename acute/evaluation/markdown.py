"""The Markdown tables of metric rows (:mod:`acute.evaluation.table`): the paper-style results
table (one column per calibration entry of :data:`acute.metrics.METRIC_SPECS`) and the
selective-prediction table beside it, the best of each column bold in its direction."""

from __future__ import annotations

import math
from typing import Sequence

from ..metrics import METRICS
from ..metrics.specs import best_value
from .table import TABLE_COLUMNS

__all__ = ["results_markdown", "selective_markdown"]

_CALIBRATION = tuple(c for c in TABLE_COLUMNS if METRICS[c[0]].table == "calibration")
_SELECTIVE = tuple(c for c in TABLE_COLUMNS if METRICS[c[0]].table == "selective")


def _fmt(row: dict, key: str) -> str:
    spec = METRICS[key]
    v = row.get(key)
    if v is None or not math.isfinite(v):
        return "n/a"
    lo, hi = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return f"{spec.format(v)} [{spec.format(lo)}, {spec.format(hi)}]"
    return spec.format(v)


def _fmt_diff(row: dict, prefix: str = "diff", ref_key: str = "reference", key: str = "auc_euro_all") -> str:
    """``row``'s paired difference to the reference in ``key``: estimate, bootstrap and t-interval,
    bold when every interval lies on the better side of zero (the spec's direction)."""
    v = row.get(f"{prefix}_{key}")
    if v is None or not math.isfinite(v):
        return "n/a"
    if row["estimator"] == row.get(ref_key):
        return "(reference)"

    def interval(kind: str) -> tuple[float, float] | None:
        lo, hi = row.get(f"{prefix}_{key}_{kind}low"), row.get(f"{prefix}_{key}_{kind}high")
        return (lo, hi) if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) else None

    boot, t = interval("ci_"), interval("t_")
    text = f"{v:+.3f}"
    for iv in (boot, t):
        if iv is not None:
            text += f" [{iv[0]:+.3f}, {iv[1]:+.3f}]"
    found = [iv for iv in (boot, t) if iv is not None]
    better = (lambda iv: iv[0] > 0) if METRICS[key].direction > 0 else (lambda iv: iv[1] < 0)
    return f"**{text}**" if found and all(better(iv) for iv in found) else text


def _fmt_certified(r: dict) -> str:
    """``coverage (error among trusted; share of folds certified)``, or n/a."""
    v = r.get("certified_coverage_10")
    if v is None or not math.isfinite(v):
        return "n/a"
    err = r.get("certified_error_10")
    err_s = "-" if err is None or not math.isfinite(err) else f"{err:.3f}"
    share = r.get("certified_folds_10")
    share_s = "n/a" if share is None or not math.isfinite(share) else f"{share:.2f}"
    return f"{v:.3f} ({err_s}; {share_s})"


def _name(r: dict) -> str:
    name = r["estimator"] + (f" (layer {r['layer']})" if r.get("layer") is not None else "")
    return name + (f" ({r['chosen']})" if r.get("chosen") else "")


def _metric_cells(rows: Sequence[dict], columns) -> list[list[str]]:
    """Per row, each column's value with its interval, bold where best (ties bold too)."""
    best: dict[str, float] = {}
    for key, _, direction in columns:
        value = best_value([r.get(key) for r in rows], direction)
        if value is not None:
            best[key] = value
    out = []
    for r in rows:
        cells = []
        for key, _, _ in columns:
            s = _fmt(r, key)
            digits = METRICS[key].digits
            if key in best and r.get(key) is not None and round(r[key], digits) == round(best[key], digits):
                s = f"**{s}**"
            cells.append(s)
        out.append(cells)
    return out


def results_markdown(rows: Sequence[dict]) -> str:
    """The paper-style Markdown table of metric rows, calibration columns (best value per column
    in bold; ties bold too; :func:`selective_markdown` has the selective-prediction columns).

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
    header = "| Estimator | uses | " + " | ".join([h for _, h, _ in _CALIBRATION] + extra) + " |"
    sep = "|---|---|" + "|".join("---:" for _ in list(_CALIBRATION) + extra) + "|"
    lines = [header, sep]
    for r, metric_cells in zip(rows, _metric_cells(rows, _CALIBRATION)):
        name = _name(r)
        cells = [r.get("uses", ""), *metric_cells]
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


def selective_markdown(rows: Sequence[dict]) -> str:
    """The selective-prediction table of metric rows: AURC, E-AURC and the coverage at 5% and 10%
    error (intervals as in :func:`results_markdown`, best in bold), then, when the rows carry
    paired differences, AURC and coverage at 10% error minus the reference's with their
    bootstrap and t-intervals (bold where every interval lies on the better side of zero). After
    cross-validation a column beside the coverage at 10% error gives its certified counterpart
    (``certified_coverage_10``: each fold trusted by a certificate fitted on the other folds).
    Empty when no row has these columns (an evaluation written by an older acute)."""
    if not any(key in r for r in rows for key, _, _ in _SELECTIVE):
        return ""
    ref = next((r.get("reference") for r in rows if r.get("reference")), None)
    certified = any("certified_coverage_10" in r for r in rows)
    extra = (["certified coverage at 10% error (error among trusted; folds certified)"] if certified else []) \
        + ([f"Δ AURC vs {ref}", f"Δ coverage at 10% vs {ref}"] if ref else [])
    header = "| Estimator | " + " | ".join([h for _, h, _ in _SELECTIVE] + extra) + " |"
    lines = [header, "|---|" + "|".join("---:" for _ in list(_SELECTIVE) + extra) + "|"]
    for r, cells in zip(rows, _metric_cells(rows, _SELECTIVE)):
        if certified:
            cells.append(_fmt_certified(r))
        if ref:
            cells += [_fmt_diff(r, key="aurc"), _fmt_diff(r, key="coverage_10")]
        lines.append(f"| {_name(r)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
