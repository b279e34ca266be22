"""The report's summary: per model and task, the default estimator against the best baseline and
the controls, with both intervals and Holm's correction across the rows (``summary.csv``)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


from ..evaluation.table import VISIBLE_CONTROL
from .runs import EvalRun
from .tables import markdown_table
from ..metrics.intervals import holm

__all__ = ["SUMMARY_COLUMNS", "kept_summary_rows", "summary_csv", "summary_markdown", "summary_rows"]


SUMMARY_COLUMNS = ("model", "task", "n_records", "folds", "repeats", "accuracy", "best_baseline",
                   "best_baseline_auc_euro", "default_estimator", "default_auc_euro", "diff", "ci_low", "ci_high",
                   "default_smece", "best_baseline_smece", "constant_auc_euro", "skill", "best_meta_baseline", "meta_diff",
                   "meta_ci_low", "meta_ci_high", "t_mean", "t_ci_low", "t_ci_high", "holm_significant",
                   "question_only_auc_euro", "within_group_auroc_raw", "within_group_auroc_default",
                   "visible_auc_euro", "visible_diff", "visible_ci_low", "visible_ci_high", "visible_t_low",
                   "visible_t_high", "best_visible_control", "best_visible_auc_euro", "best_visible_diff",
                   "best_visible_ci_low", "best_visible_ci_high", "best_visible_t_low", "best_visible_t_high",
                   "visible_all_auc_euro", "states_add", "states_add_ci_low", "states_add_ci_high", "states_add_t_low",
                   "states_add_t_high", "states_add_holm_significant", "group_by", "evaluation")


def kept_summary_rows(path: Path, present: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The rows of an earlier ``summary.csv`` whose (model, task) this report has no evaluation
    for (their stores and evaluation folders are not on this machine): kept as they were, with
    ``evaluation = "kept"``, so regenerating the report never drops a pair. Columns the earlier
    acute did not write are None; numbers are parsed back from the CSV."""
    if not path.is_file():
        return []
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if (row.get("model"), row.get("task")) in present:
                continue
            kept: dict[str, Any] = {}
            for k in SUMMARY_COLUMNS:
                v = row.get(k)
                if v in (None, ""):
                    kept[k] = None
                elif k in ("model", "task", "best_baseline", "default_estimator", "best_meta_baseline", "evaluation",
                           "group_by", "best_visible_control"):
                    kept[k] = v
                elif k in ("n_records", "folds", "repeats"):
                    kept[k] = int(v)
                elif k in ("holm_significant", "states_add_holm_significant"):
                    kept[k] = v == "True"
                else:
                    kept[k] = float(v)
            kept["evaluation"] = "kept"
            out.append(kept)
    return out


def summary_rows(runs: Sequence[EvalRun], default: str, alpha: float = 0.05) -> list[dict[str, Any]]:
    """One row per evaluation (:data:`SUMMARY_COLUMNS`): the ``default`` estimator against the
    evaluation's best baseline (its ``reference``: highest auc-euro all among the baselines), with
    the cross-validation's ``folds`` and ``repeats`` (None for a held-out split), the paired
    difference in auc-euro (all), its 95% bootstrap interval (``ci_*``) and its
    corrected resampled t-interval over folds x repeats (``t_ci_*``, centred on ``t_mean``, the mean
    of the per-fold differences: its own estimand, beside ``diff`` on the pooled out-of-fold
    predictions), as the evaluation computed them (means over cross-validation repeats); the
    default against the ``visible`` control (everything a deployment sees without hidden states:
    ``visible_auc_euro``, ``visible_diff`` with its bootstrap ``visible_ci_*`` and t
    ``visible_t_*`` intervals) and against the best of every control without hidden states
    (``best_visible_control``: :data:`acute.evaluation.table.VISIBLE_SIGNALS`, the same columns
    as ``best_visible_*``); ``group_by``: the field the folds kept apart and the intervals
    resampled whole (blank: record ids); the constant control's auc-euro and the default's
    skill over it; the difference to the best of the baselines and the metadata / text controls
    (``best_meta_baseline``, ``meta_*``); the question-only probe's auc-euro; the within-group
    AUROC of raw confidence and of the default. ``holm_significant``: the difference to the best
    baseline survives Holm's correction across the rows at ``alpha`` with both tests, i.e. Holm
    over ``max(p_t, p_bootstrap)`` (blank for evaluations without the t-test). What the states
    add: ``states_add`` (acute-all minus visible-all in auc-euro (all), with its cluster-bootstrap
    ``states_add_ci_*`` and t ``states_add_t_*`` intervals), ``visible_all_auc_euro``, and
    ``states_add_holm_significant`` (Holm's correction of its own family across the rows, as
    for the default). Values an
    evaluation did not compute are None. Evaluations without ``default`` or without a reference
    are skipped. ``evaluation``: ``"this run"`` for an evaluation folder of this machine,
    ``"committed tables"`` for a tables-only run (:attr:`EvalRun.tables_only`: an earlier
    report's committed ``results.json`` of the same settings); both are rows of the one Holm
    correction (the kept rows of :func:`kept_summary_rows` are not)."""
    out = []
    for run in runs:
        rows = {r["estimator"]: r for r in run.results.get("results", [])}
        ref = run.results.get("reference")
        d, b = rows.get(default), rows.get(ref)
        if d is None or b is None:
            continue
        sp = run.results.get("split", {})
        out.append({"model": run.model, "task": run.task,
                    "n_records": int(sp.get("n_records", sp.get("n_train", 0) + sp.get("n_test", 0)) or run.n),
                    "folds": sp.get("n_splits"), "repeats": sp.get("n_repeats"),
                    "accuracy": d["accuracy"], "best_baseline": ref, "best_baseline_auc_euro": b["auc_euro_all"],
                    "default_estimator": default, "default_auc_euro": d["auc_euro_all"],
                    "diff": d.get("diff_auc_euro_all"), "ci_low": d.get("diff_auc_euro_all_ci_low"),
                    "ci_high": d.get("diff_auc_euro_all_ci_high"), "default_smece": d["smece"],
                    "best_baseline_smece": b["smece"],
                    "constant_auc_euro": rows.get("constant", {}).get("auc_euro_all"), "skill": d.get("skill"),
                    "best_meta_baseline": d.get("meta_reference"), "meta_diff": d.get("diff_meta_auc_euro_all"),
                    "meta_ci_low": d.get("diff_meta_auc_euro_all_ci_low"),
                    "meta_ci_high": d.get("diff_meta_auc_euro_all_ci_high"),
                    "t_mean": d.get("diff_auc_euro_all_t_mean"),
                    "t_ci_low": d.get("diff_auc_euro_all_t_low"), "t_ci_high": d.get("diff_auc_euro_all_t_high"),
                    "holm_significant": None,
                    "question_only_auc_euro": rows.get("question-only", {}).get("auc_euro_all"),
                    "within_group_auroc_raw": rows.get("raw", {}).get("within_group_auroc"),
                    "within_group_auroc_default": d.get("within_group_auroc"),
                    "visible_auc_euro": rows.get("visible", {}).get("auc_euro_all"),
                    "visible_diff": d.get("diff_visible_auc_euro_all"),
                    "visible_ci_low": d.get("diff_visible_auc_euro_all_ci_low"),
                    "visible_ci_high": d.get("diff_visible_auc_euro_all_ci_high"),
                    "visible_t_low": d.get("diff_visible_auc_euro_all_t_low"),
                    "visible_t_high": d.get("diff_visible_auc_euro_all_t_high"),
                    "best_visible_control": d.get("best_visible_reference"),
                    "best_visible_auc_euro": rows.get(d.get("best_visible_reference"), {}).get("auc_euro_all"),
                    "best_visible_diff": d.get("diff_best_visible_auc_euro_all"),
                    "best_visible_ci_low": d.get("diff_best_visible_auc_euro_all_ci_low"),
                    "best_visible_ci_high": d.get("diff_best_visible_auc_euro_all_ci_high"),
                    "best_visible_t_low": d.get("diff_best_visible_auc_euro_all_t_low"),
                    "best_visible_t_high": d.get("diff_best_visible_auc_euro_all_t_high"),
                    **_states_add(rows),
                    "group_by": sp.get("group_by"),
                    "evaluation": "committed tables" if run.tables_only else "this run", "_p": _joint_p(d),
                    "_p_states": _joint_p(rows.get("acute-all", {}), "states_add")})
    for key, column in (("_p", "holm_significant"), ("_p_states", "states_add_holm_significant")):
        tested = [r for r in out if r[key] is not None]
        for r, significant in zip(tested, holm([r[key] for r in tested], alpha)):
            r[column] = bool(significant)
    for r in out:
        del r["_p"], r["_p_states"]
    return out


def _states_add(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the states add (acute-all minus visible-all, the acute-all row's ``states_add_*``)
    and visible-all's auc-euro; None where the evaluation has no stacks."""
    a = rows.get("acute-all", {})
    return {"visible_all_auc_euro": rows.get("visible-all", {}).get("auc_euro_all"),
            "states_add": a.get("states_add_auc_euro_all"),
            "states_add_ci_low": a.get("states_add_ci_low"), "states_add_ci_high": a.get("states_add_ci_high"),
            "states_add_t_low": a.get("states_add_t_low"), "states_add_t_high": a.get("states_add_t_high"),
            "states_add_holm_significant": None}


def _joint_p(row: Mapping[str, Any], prefix: str = "diff_auc_euro_all") -> float | None:
    """``max(p_t, p_bootstrap)`` of a row's difference (default: to the best baseline;
    ``"states_add"``: acute-all minus visible-all): rejected only when both tests reject. None
    without the t-test (an evaluation of an older acute, or one split)."""
    pt, pb = row.get(f"{prefix}_t_p"), row.get(f"{prefix}_boot_p")
    if pt is None or pb is None or not (math.isfinite(pt) and math.isfinite(pb)):
        return None
    return max(float(pt), float(pb))


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary rows as a table: the difference to the best baseline with its bootstrap and
    t-intervals (bold when it survives Holm's correction with both), the skill over the constant,
    the difference to the best control with metadata / text, the question-only probe and the
    within-group AUROC of raw confidence and of the default."""
    def f(v, fmt="{:.3f}"):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)

    body = []
    for r in rows:
        diff = f"{f(r['diff'], '{:+.4f}')} [{f(r['ci_low'], '{:+.4f}')}, {f(r['ci_high'], '{:+.4f}')}]"
        if r.get("t_ci_low") is not None:
            mean = f"{f(r['t_mean'], '{:+.4f}')} " if r.get("t_mean") is not None else ""
            diff += f" t: {mean}[{f(r['t_ci_low'], '{:+.4f}')}, {f(r['t_ci_high'], '{:+.4f}')}]"
        if r.get("holm_significant"):
            diff = f"**{diff}**"
        meta = (f"{r['best_meta_baseline']}: {f(r['meta_diff'], '{:+.4f}')} "
                f"[{f(r['meta_ci_low'], '{:+.4f}')}, {f(r['meta_ci_high'], '{:+.4f}')}]"
                if r.get("best_meta_baseline") else "n/a")
        visible = (f"{f(r['visible_auc_euro'], '{:.4f}')}: {f(r['visible_diff'], '{:+.4f}')} "
                   f"[{f(r['visible_ci_low'], '{:+.4f}')}, {f(r['visible_ci_high'], '{:+.4f}')}]"
                   if r.get("visible_auc_euro") is not None else "n/a")
        best = r.get("best_visible_control")
        if best and best != VISIBLE_CONTROL:
            visible = ("" if visible == "n/a" else f"{visible}; ") + (
                f"best without states, {best} {f(r['best_visible_auc_euro'], '{:.4f}')}: "
                f"{f(r['best_visible_diff'], '{:+.4f}')} "
                f"[{f(r['best_visible_ci_low'], '{:+.4f}')}, {f(r['best_visible_ci_high'], '{:+.4f}')}]")
        model = r["model"] + (" (kept)" if r.get("evaluation") == "kept" else "")
        cv = f"{r['folds']}x{r['repeats']}" if r.get("folds") and r.get("repeats") else "n/a"
        cv += f" by {r['group_by']}" if r.get("group_by") else ""
        body.append([model, r["task"], r["n_records"], cv, f(r["accuracy"]), r["best_baseline"],
                     f(r["best_baseline_auc_euro"], "{:.4f}"), f(r["default_auc_euro"], "{:.4f}"), diff,
                     f(r.get("constant_auc_euro"), "{:.4f}"), f(r.get("skill"), "{:+.3f}"), meta, visible,
                     f(r.get("question_only_auc_euro"), "{:.4f}"),
                     f"{f(r.get('within_group_auroc_raw'))} / {f(r.get('within_group_auroc_default'))}",
                     f(r["default_smece"]), f(r["best_baseline_smece"])])
    return "\n".join(markdown_table(["model", "task", "records", "folds x repeats", "accuracy", "best baseline", "its auc-euro",
                              f"{rows[0]['default_estimator'] if rows else 'default'} auc-euro",
                              "difference [bootstrap] t: mean of folds [corrected t]", "constant", "skill",
                              "vs best with metadata/text", "visible control: its auc-euro, default minus it",
                              "question-only", "within-group AUROC raw / default",
                              "smECE (default)", "smECE (baseline)"], body)) + "\n"


def summary_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(SUMMARY_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else round(r[k], 6) if isinstance(r[k], float) else r[k])
                    for k in SUMMARY_COLUMNS})
    return buf.getvalue()
