"""The paper-style Markdown results table of metric rows (:mod:`acute.evaluation.table`): one
column per :data:`acute.metrics.METRIC_SPECS` entry, the best of each bold in its direction."""

from __future__ import annotations

import math
from typing import Sequence

from ..metrics import METRICS, best_value
from .table import TABLE_COLUMNS

__all__ = ["results_markdown"]


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
        value = best_value([r.get(key) for r in rows], direction)
        if value is not None:
            best[key] = value
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
