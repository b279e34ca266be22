"""Trust without labels, measured by the rule of benchmarks/label_free.md (read it first: this
script follows it and changes nothing it fixes).

On a store with sampled answers, over the evaluation's folds (grouped as it groups them), per
number N of gold labels (drawn from the training fold with the seed, nested across N): raw
confidence, Platt scaling, the `consistency` and `semantic-entropy` controls and the supervised
default, each calibrated or fitted on those N labels; the supervised default on every training
label; and the label-free probe (`acute.evaluation.label_free`: its forest fitted on the
agreement target of every training record, its calibration on the N labels; N = 0: a ranking,
AUROC only). auc-euro, AUROC and smECE out of fold, the label-free probe's paired differences
with cluster-bootstrap intervals, and the tokens a record's samples cost relative to greedy.

    python benchmarks/label_free.py runs/evidence/qwen2.5-coder-1.5b-instruct/triviaqa/store \\
        --out benchmarks/label_free-results.md --repeats 5 --n-jobs 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from acute.estimators.agreement import AgreementPlatt, agreement_matrix, sampling_cost, store_task
from acute.estimators.calibration import calibration_scores, probe_calibrator
from acute.estimators.inputs import AGREEMENT, Inputs, states_source
from acute.estimators.probes import ActivationProbe
from acute.estimators.registry import DEFAULT_ESTIMATOR, make_estimator
from acute.evaluation.crossval import cv_folds, inputs_for
from acute.evaluation.evaluate import store_groups
from acute.evaluation.label_free import agreement_target
from acute.metrics import auc_euro, auroc, smece
from acute.metrics.resampling import bootstrap_indices
from acute.store import open_store

SIZES = (0, 50, 100, 200, 500)


def fold_predictions(data, tr, te, n_labels, order, seed, n_jobs, n_estimators):
    """Per row name, P(correct) of the test records ``te`` (None where a fit is impossible)."""
    y, X = data["y"], data["X"]
    cal = np.sort(tr[order[:n_labels]])
    out = {}
    params = {"n_estimators": n_estimators} if n_estimators else None

    def fit(est, rows):
        if rows.size < 10 or np.unique(y[rows]).size < 2:
            return None
        return est.fit(X.take(rows), y[rows]).predict_proba(X.take(te))[:, 1]

    out["raw"] = data["confidence"][te]
    out["platt"] = fit(make_estimator("platt"), cal)
    out["consistency"] = fit(AgreementPlatt("consistency"), cal)
    out["semantic-entropy"] = fit(AgreementPlatt("semantic-entropy"), cal)
    out["supervised"] = fit(make_estimator(DEFAULT_ESTIMATOR, random_state=seed, n_jobs=n_jobs, probe_params=params),
                            cal)
    # the label-free probe: its forest on the agreement target of every training record
    target = agreement_target(data["agreement"][tr], "consistency")
    probe = ActivationProbe(view="pca10", append_confidence=False, calibration="platt", oof="oob",
                            random_state=seed, n_jobs=n_jobs, **({"n_estimators": n_estimators} if n_estimators else {}))
    probe.fit(Inputs({states_source("mean"): data["states"][tr]}), target)
    forest_te = probe.predict_proba(Inputs({states_source("mean"): data["states"][te]}), calibrated=False)[:, 1]
    if n_labels == 0:
        out["label-free"] = forest_te
    else:
        held = np.searchsorted(tr, cal)  # positions of the calibration records in the training fold
        if np.unique(y[cal]).size < 2:
            out["label-free"] = None
        else:
            platt = probe_calibrator("platt").fit(calibration_scores("platt", probe.oof_proba_[held]), y[cal])
            out["label-free"] = platt.predict_proba(forest_te)[:, 1]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="a store collected with --samples")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-jobs", type=int, default=1)
    ap.add_argument("--n-estimators", type=int, default=None)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--group-by", default=None, help="default: the task's own grouping")
    ap.add_argument("--out", default=None, help="markdown file for the table (printed either way)")
    args = ap.parse_args(argv)

    store = open_store(args.store)
    y = np.asarray(store.correct).astype(np.int64)
    field, groups = store_groups(store, args.group_by)
    group_of = np.asarray(groups if groups is not None else [str(i) for i in store.ids])
    agreement = agreement_matrix(store.records, store_task(store.manifest), where=str(args.store))
    X = inputs_for(store, ["platt", DEFAULT_ESTIMATOR])
    X = Inputs({**{s: X[s] for s in X}, AGREEMENT: agreement})
    data = {"y": y, "X": X, "agreement": agreement, "confidence": np.asarray(store.raw_confidence),
            "states": np.asarray(X[states_source("mean")])}
    folds = cv_folds(store.ids, y, args.cv, args.repeats, seed=args.seed, groups=groups,
                     group_name=field or "record ids")
    preds = {}  # (row, N) -> [repeats, n]
    full = np.full((args.repeats, y.size), np.nan)
    for r, rep in enumerate(folds):
        for f, (tr, te) in enumerate(rep):
            started = time.perf_counter()
            tr, te = np.sort(tr), np.sort(te)
            order = np.random.default_rng(args.seed + 1000 * r + f).permutation(tr.size)
            params = {"n_estimators": args.n_estimators} if args.n_estimators else None
            est = make_estimator(DEFAULT_ESTIMATOR, random_state=args.seed, n_jobs=args.n_jobs, probe_params=params)
            full[r, te] = est.fit(X.take(tr), y[tr]).predict_proba(X.take(te))[:, 1]
            for n in SIZES:
                if n > tr.size:
                    continue
                for name, p in fold_predictions(data, tr, te, n, order, args.seed, args.n_jobs,
                                                args.n_estimators).items():
                    arr = preds.setdefault((name, n), np.full((args.repeats, y.size), np.nan))
                    if p is not None:
                        arr[r, te] = p
            print(f"repeat {r + 1}/{args.repeats} fold {f + 1}/{args.cv}: {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)

    def score(p, metric):
        vals = [metric(row, y) for row in p if np.all(np.isfinite(row))]
        return float(np.mean(vals)) if vals else float("nan")

    lines = [f"## {store.manifest.get('model')} on {store.manifest.get('task')} ({len(store)} records, accuracy "
             f"{y.mean():.3f}; samples {(store.manifest.get('generation') or {}).get('samples')}; tokens generated "
             f"per record relative to greedy: {sampling_cost(store.records):.2f})", "",
             f"`python benchmarks/label_free.py {args.store} --repeats {args.repeats} --cv {args.cv} --seed {args.seed}`",
             "", "| row | N gold labels | auc-euro | AUROC | smECE |", "|---|---:|---:|---:|---:|",
             f"| supervised default, every training label | all | {score(full, auc_euro):.4f} | "
             f"{score(full, auroc):.3f} | {score(full, smece):.4f} |"]
    for (name, n), p in sorted(preds.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if np.isnan(p).all() or (name == "raw" and n):  # nothing fitted on no labels; raw needs none
            continue
        ranking_only = name == "label-free" and n == 0
        lines.append(f"| {name} | {n} | {'' if ranking_only else f'{score(p, auc_euro):.4f}'} | "
                     f"{score(p, auroc):.3f} | {'' if ranking_only else f'{score(p, smece):.4f}'} |")
    # paired differences of the label-free probe at N = 100, groups resampled whole
    codes, inverse = np.unique(group_of, return_inverse=True)
    index = bootstrap_indices(codes.size, args.n_bootstrap, args.seed)
    lf = preds.get(("label-free", 100))
    lines.append("")
    for ref_name, ref in (("the supervised default on every label", full),
                          ("the supervised default on the same 100 labels", preds.get(("supervised", 100))),
                          ("consistency (K + 1 generations)", preds.get(("consistency", 100)))):
        if lf is None or ref is None or not np.all(np.isfinite(lf)) or not np.all(np.isfinite(ref)):
            continue
        members = [np.flatnonzero(inverse == g) for g in range(codes.size)]
        estimate = score(lf, auc_euro) - score(ref, auc_euro)
        draws = []
        for rows in index:
            pick = np.concatenate([members[g] for g in rows])
            draws.append(np.mean([auc_euro(a[pick], y[pick]) - auc_euro(b[pick], y[pick]) for a, b in zip(lf, ref)]))
        low, high = np.percentile(draws, [2.5, 97.5])
        lines.append(f"Label-free (100 labels) minus {ref_name}: {estimate:+.4f} [{low:+.4f}, {high:+.4f}] auc-euro "
                     f"(95% cluster bootstrap, {codes.size} groups, {args.n_bootstrap} resamples).")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
