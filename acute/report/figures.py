"""The report's figures and the sections built from other stages' files: euro curves,
reliability diagrams and euro differences per task, the learning-curve plots, the transfer
tables."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path


from ..fileio import read_json
from .runs import EvalRun
from .tables import markdown_table

__all__ = ["learning_curve_section", "task_figures", "transfer_section"]


def task_figures(run: EvalRun, task: str, fig_dir: Path) -> list[tuple[str, str]]:
    """Draw the figures of one task from ``run``'s test predictions: euro curves of raw
    confidence, the best baseline and the default estimator (when evaluated; else the best ACUTE
    variant, highest auc-euro all, see :func:`acute.evaluation.evaluate.best_estimators`), and the
    reliability diagram of that estimator against the best baseline (on the data's support), and the
    euro difference of the two over the risk level with its paired bootstrap band. Returns ``(caption, path
    relative to the report)`` pairs."""
    from ..estimators.registry import DEFAULT_ESTIMATOR
    from ..evaluation.evaluate import best_estimators
    from ..evaluation.curves import euro_difference
    from ..evaluation.plots import euro_curves, euro_difference_curve, reliability_diagram

    best = best_estimators(run.results.get("results", []))
    if DEFAULT_ESTIMATOR in run.predictions:  # the estimator acute ships is the one to show
        best["acute"] = DEFAULT_ESTIMATOR
    names = ["raw"] + [best[g] for g in ("baseline", "acute") if g in best and best[g] != "raw"]
    names = [n for n in dict.fromkeys(names) if n in run.predictions]
    if not names:
        return []
    fig_dir.mkdir(parents=True, exist_ok=True)
    y = run.correct.astype(int)
    out = []
    path = fig_dir / f"{task}-euro-curves.png"
    euro_curves({n: run.predictions[n] for n in names}, y, path,
                title=f"{task}: euro curves ({run.model}, {run.n} out-of-fold records, repeat 0)")
    out.append((f"euro curves, {task}, {run.model}", f"figures/{path.name}"))
    shown, base = best.get("acute"), best.get("baseline")
    pair = [n for n in dict.fromkeys([shown, base]) if n is not None and n in run.predictions]
    if pair:
        path = fig_dir / f"{task}-reliability.png"
        reliability_diagram({n: run.predictions[n] for n in pair}, y, path,
                            title=f"{task}: reliability of {' vs '.join(pair)} ({run.model})")
        out.append((f"reliability, {task}, {' vs '.join(pair)}, {run.model}", f"figures/{path.name}"))
    if shown in run.predictions and base in run.predictions and shown != base:
        d = euro_difference(run.predictions[shown], run.predictions[base], y, n_bootstrap=300, seed=0)
        path = fig_dir / f"{task}-euro-difference.png"
        euro_difference_curve(*d[:4], path, names=(shown, base),
                              title=f"{task}: euro of {shown} minus {base} ({run.model})")
        out.append((f"euro difference, {task}, {shown} - {base}, {run.model}", f"figures/{path.name}"))
    return out


def learning_curve_section(runs: Sequence[EvalRun], fig_dir: Path) -> list[str]:
    """Copy each evaluation's learning-curve plot into ``fig_dir``; returns README lines: a table
    of auc-euro (all) at the middle and the largest training size for the best baseline and each
    probe of the curve, then the images."""
    body, images, probes = [], [], None
    for run in runs:
        folder = run.path / "learning-curve"
        if not ((folder / "learning_curve.json").is_file() and (folder / "learning_curve.png").is_file()):
            continue
        doc = read_json(folder / "learning_curve.json", "run the evaluate stage again")
        fig_dir.mkdir(parents=True, exist_ok=True)
        name = f"learning-curve-{run.model}-{run.task}.png"
        shutil.copyfile(folder / "learning_curve.png", fig_dir / name)
        images.append(f"![learning curve, {run.model}, {run.task}](figures/{name})")
        sizes = doc["sizes"]
        mid, top = sizes[(len(sizes) - 1) // 2], sizes[-1]
        auc = {(r["estimator"], r["size"]): r["auc_euro_all_mean"] for r in doc["rows"]}
        probes = probes or doc["shown"][1:]
        cells = [run.model, run.task, f"{mid} / {top}", doc["best_baseline"]]
        cells += [f"{auc[(e, mid)]:.3f} / {auc[(e, top)]:.3f}" if (e, top) in auc else "n/a"
                  for e in [doc["best_baseline"], *probes]]
        body.append(cells)
    if not body:
        return []
    header = ["model", "task", "training records", "best baseline", "its auc-euro", *[f"{p} auc-euro" for p in probes]]
    return ["auc-euro (all) at the middle / largest training size (mean over repeats):", "",
            *markdown_table(header, body), "", " ".join(images), ""]


def transfer_section(transfer_runs: Sequence[tuple[str, Path]], default: str) -> tuple[list[str], dict]:
    from ..evaluation.transfer import subjects_markdown, transfer_markdown

    lines, data = [], {}
    for model, path in transfer_runs:
        doc = read_json(path, "run the transfer stage first")
        data[model] = doc
        lines += [f"### {model}", "", transfer_markdown(doc["table"], default)]
        for task, res in doc.get("subjects", {}).items():
            lines += [f"{task}, leave subjects out: {res['n_records']} records, {res['n_subjects']} subjects in "
                      f"{res['n_splits']} groups, {res['repeats']} shuffles; random folds of the same count "
                      "for comparison:", "", subjects_markdown(res, default)]
    return lines, data
