#!/usr/bin/env python
"""Stacking on grouped inner folds against the default's out-of-bag stacking (issue 42).

For each ``PAIR`` folder (``PAIR/store`` and its evaluation ``PAIR/eval``, as ``acute run`` lays
them out), on the evaluation's own outer folds (``folds.json``, the first ``--repeats``): the
plain forest ``acute-pca10`` (the default's forest, the evaluation's probe parameters and seed)
is cross-fitted on inner folds of each outer training set, stratified and grouped by the task's
group field (``cv_folds``), its out-of-fold probabilities fit the stacker
(:class:`acute.estimators.calibration.StackedCalibration`) with the raw confidence, and the forest fitted
on the whole outer training set is stacked on the outer test fold. The result is compared with
the evaluation's own predictions of the default (out-of-bag stacking), of ``visible`` and of its
best baseline: auc-euro (all), paired cluster-bootstrap and corrected t-intervals. The rule is
in ``benchmarks/grouped_stacking.md``.

Usage::

    python benchmarks/grouped_stacking.py runs/evidence/qwen2.5-coder-0.5b-instruct/bfcl \\
        runs/evidence/qwen2.5-coder-1.5b-instruct/bfcl --out benchmarks/grouped_stacking-results.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from oob_stacking import evaluation_folds, write_table  # noqa: E402

DEFAULT = "acute-pca10-stacked"
FOREST = "acute-pca10"
GROUPED = f"{DEFAULT} (grouped stacking)"


def grouped_stacked(X, y, raw, groups, folds, seed: int, probe_params: dict, n_jobs) -> np.ndarray:
    """``[repeats, n]`` out-of-fold P(correct) of the default stacked on grouped inner folds."""
    from acute.estimators.calibration import StackedCalibration
    from acute.evaluation.crossval import cross_val_predictions, cv_folds, fit_predict

    params = {k: v for k, v in probe_params.items() if k != "oof"}
    out = np.full((len(folds), y.size), np.nan)
    for r, rep in enumerate(folds):
        for k, (tr, te) in enumerate(rep):
            inner = cv_folds(np.asarray(tr), y[tr], 5, 1, seed, groups=[groups[i] for i in tr], group_name="toolset")
            oof = cross_val_predictions([FOREST], X.take(tr), y[tr], inner, random_state=seed,
                                        n_jobs=n_jobs, probe_params=params)[FOREST][0]
            stacker = StackedCalibration().fit(np.column_stack([oof, raw[tr]]), y[tr])
            (w, v), b = stacker.coef_, stacker.intercept_
            p = fit_predict([FOREST], X.take(tr), y[tr], X.take(te), random_state=seed,
                            n_jobs=n_jobs, probe_params=params)[FOREST]
            out[r, te] = stacker.predict_proba(np.column_stack([p, raw[te]]))[:, 1]
            print(f"  repeat {r} fold {k}: stacker w={w:.2f} v={v:.2f} b={b:.2f}", file=sys.stderr, flush=True)
    return out


def pair_rows(pair: Path, args) -> list[str]:
    from acute.evaluation import read_predictions
    from acute.evaluation.crossval import inputs_for
    from acute.evaluation.grouping import store_groups
    from acute.evaluation.table import evaluate_predictions
    from acute.store import open_store

    store = open_store(pair / "store")
    eval_dir = pair / "eval"
    folds, seed, probe_params = evaluation_folds(eval_dir, store.ids, args.repeats)
    saved = json.loads((eval_dir / "results.json").read_text(encoding="utf-8"))
    base = saved["reference"]
    y = np.asarray(store.correct).astype(np.int64)
    raw = np.asarray(store.raw_confidence, dtype=np.float64)
    field, groups = store_groups(store, saved["params"].get("group_by"))
    if groups is None:
        raise SystemExit(f"{eval_dir}: the evaluation was not grouped; nothing to compare")
    names = [DEFAULT, "visible", base]
    ids, _, cv = read_predictions(eval_dir, names)
    if ids != [str(i) for i in store.ids]:
        raise SystemExit(f"{eval_dir}: its predictions are not of the records of {pair / 'store'}")
    t0 = time.perf_counter()
    grouped = grouped_stacked(inputs_for(store, [FOREST]), y, raw, groups, folds, seed, probe_params, args.n_jobs)
    seconds = time.perf_counter() - t0
    preds = {GROUPED: grouped, **{n: cv[n][: len(folds)] for n in names}}
    m = store.manifest
    out = []
    for ref in names:
        rows = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=args.n_bootstrap, seed=seed,
                                                                reference=ref, folds=folds, clusters=groups)}
        g = rows[GROUPED]
        out.append(f"| {m.get('model')} | {m.get('task')} | {len(folds[0])}x{len(folds)} | {ref} "
                   f"| {rows[ref]['auc_euro_all']:.4f} | {g['auc_euro_all']:.4f} "
                   f"| {g['diff_auc_euro_all']:+.4f} [{g['diff_auc_euro_all_ci_low']:+.4f}, "
                   f"{g['diff_auc_euro_all_ci_high']:+.4f}] "
                   f"| {g['diff_auc_euro_all_t_mean']:+.4f} [{g['diff_auc_euro_all_t_low']:+.4f}, "
                   f"{g['diff_auc_euro_all_t_high']:+.4f}] | {rows[ref]['smece']:.4f} | {g['smece']:.4f} "
                   f"| {seconds:.0f} |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pairs", nargs="+", help="PAIR folders holding store/ and eval/")
    p.add_argument("--repeats", type=int, default=1, help="the evaluation's first R repeats (default %(default)s)")
    p.add_argument("--n-bootstrap", type=int, default=1000)
    p.add_argument("--n-jobs", type=int, default=None, help="forest threads (default: scikit-learn's, one)")
    p.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    lines = [f"`python benchmarks/grouped_stacking.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             "| model | task | folds x repeats | compared with | its auc-euro | grouped stacking auc-euro "
             "| grouped minus it [95% cluster bootstrap] | mean of folds [corrected t 95%] | its smECE "
             "| grouped smECE | grouped fit s |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    write_table(lines, args.pairs, lambda pair: pair_rows(pair, args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
