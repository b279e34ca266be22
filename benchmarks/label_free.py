"""Trust without labels, measured by the rule of benchmarks/label_free.md (read it first: this
script follows it and changes nothing it fixes).

On a store with sampled answers, over the evaluation's folds (grouped as it groups them), per
number N of gold labels (drawn from the training fold with the seed, nested across N): raw
confidence, Platt scaling, the `consistency` and `semantic-entropy` controls and the supervised
default, each calibrated or fitted on those N labels; the supervised default on every training
label; and the label-free probe (`acute.evaluation.label_free`: its forest fitted on the
agreement target of every training record, its calibration on the N labels; N = 0: a ranking,
AUROC only). auc-euro, AUROC and smECE out of fold, the label-free probe's paired differences
with cluster-bootstrap intervals, the rule's reading at N = 100 (Holm over the stores given), and
what sampling costs: all tokens generated, greedy and sampled, over the greedy answers' tokens. With ``--transfer`` (stores of one model):
leave one task out, the first levels fitted on the other stores, Platt-scaled on 100 labels of the
held-out task.

    python benchmarks/label_free.py runs/evidence/qwen2.5-coder-1.5b-instruct/{triviaqa,sciq,truthfulqa-gen}/store \\
        --transfer --repeats 5 --n-jobs 1 --out benchmarks/label_free-results.md
"""

from __future__ import annotations

import sys
import time

import numpy as np

from acute.estimators.agreement import AgreementPlatt, agreement_matrix, sampling_cost, store_task
from acute.estimators.calibration import calibration_scores, probe_calibrator
from acute.estimators.inputs import AGREEMENT, Inputs, states_source
from acute.estimators.probes import ActivationProbe
from acute.errors import InputError
from acute.estimators.registry import STATES_PROBE, make_estimator
from acute.evaluation.crossval import cv_folds, inputs_for
from acute.evaluation.grouping import store_groups
from acute.evaluation.label_free import agreement_target
from acute.metrics import auc_euro, auroc, smece
from acute.metrics.intervals import holm
from acute.store import open_store

from _study import command_line, mean_metric, paired_difference, publish, study_parser

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
        try:  # e.g. the default's inner folds need 5 labels of each class
            return est.fit(X.take(rows), y[rows]).predict_proba(X.take(te))[:, 1]
        except InputError:
            return None

    out["raw"] = data["confidence"][te]
    out["platt"] = fit(make_estimator("platt"), cal)
    out["consistency"] = fit(AgreementPlatt("consistency"), cal)
    out["semantic-entropy"] = fit(AgreementPlatt("semantic-entropy"), cal)
    out["supervised"] = fit(make_estimator(STATES_PROBE, random_state=seed, n_jobs=n_jobs, probe_params=params),
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


def load(path, group_by):
    """The arrays of one store the rows read (its task's grouping unless ``group_by``)."""
    store = open_store(path)
    y = np.asarray(store.correct).astype(np.int64)
    field, groups = store_groups(store, group_by)
    agreement = agreement_matrix(store.records, store_task(store.manifest), where=str(path))
    X = inputs_for(store, ["platt", STATES_PROBE])
    X = Inputs({**{s: X[s] for s in X}, AGREEMENT: agreement})
    m = store.manifest
    return {"path": str(path), "model": m.get("model"), "task": m.get("task"), "y": y, "X": X,
            "agreement": agreement, "confidence": np.asarray(store.raw_confidence),
            "states": np.asarray(X[states_source("mean")]), "ids": list(store.ids), "groups": groups,
            "field": field, "group_of": np.asarray(groups if groups is not None else [str(i) for i in store.ids]),
            "samples": (m.get("generation") or {}).get("samples"), "cost": sampling_cost(store.records)}


def within_pair(data, args):
    """The table of one store (the rule's rows, 5-fold x repeats out of fold) and the label-free
    probe's paired differences at N = 100 (name -> (estimate, low, high, p))."""
    y, X = data["y"], data["X"]
    folds = cv_folds(data["ids"], y, args.cv, args.repeats, seed=args.seed, groups=data["groups"],
                     group_name=data["field"] or "record ids")
    preds = {}  # (row, N) -> [repeats, n]
    full = np.full((args.repeats, y.size), np.nan)
    for r, rep in enumerate(folds):
        for f, (tr, te) in enumerate(rep):
            started = time.perf_counter()
            tr, te = np.sort(tr), np.sort(te)
            order = np.random.default_rng(args.seed + 1000 * r + f).permutation(tr.size)
            params = {"n_estimators": args.n_estimators} if args.n_estimators else None
            est = make_estimator(STATES_PROBE, random_state=args.seed, n_jobs=args.n_jobs, probe_params=params)
            full[r, te] = est.fit(X.take(tr), y[tr]).predict_proba(X.take(te))[:, 1]
            for n in SIZES:
                if n > tr.size:
                    continue
                for name, p in fold_predictions(data, tr, te, n, order, args.seed, args.n_jobs,
                                                args.n_estimators).items():
                    arr = preds.setdefault((name, n), np.full((args.repeats, y.size), np.nan))
                    if p is not None:
                        arr[r, te] = p
            print(f"{data['task']}: repeat {r + 1}/{args.repeats} fold {f + 1}/{args.cv}: "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    lines = [f"## {data['model']} on {data['task']} ({y.size} records, accuracy {y.mean():.3f}; samples "
             f"{data['samples']}; tokens generated relative to greedy: {data['cost']:.2f}x; folds "
             f"grouped by {data['field'] or 'record id'})", "",
             "| row | N gold labels | auc-euro | AUROC | smECE |", "|---|---:|---:|---:|---:|",
             f"| supervised default, every training label | all | {mean_metric(full, y, auc_euro):.4f} | "
             f"{mean_metric(full, y, auroc):.3f} | {mean_metric(full, y, smece):.4f} |"]
    unfitted = []
    for (name, n), p in sorted(preds.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if name == "raw" and n:  # raw needs no labels
            continue
        if not any(np.all(np.isfinite(row)) for row in p):
            if n:  # nothing is fitted on no labels
                unfitted.append(f"{name} at N = {n}")
            continue
        ranking_only = name == "label-free" and n == 0
        lines.append(f"| {name} | {n} | {'' if ranking_only else f'{mean_metric(p, y, auc_euro):.4f}'} | "
                     f"{mean_metric(p, y, auroc):.3f} | {'' if ranking_only else f'{mean_metric(p, y, smece):.4f}'} |")
    if unfitted:
        lines += ["", "Not fitted in every fold (too few labels of a class drawn): " + ", ".join(unfitted) + "."]
    lf = preds.get(("label-free", 100))
    diffs = {}
    for key, ref in (("every label", full), ("same 100 labels", preds.get(("supervised", 100))),
                     ("consistency", preds.get(("consistency", 100)))):
        if lf is None or ref is None or not np.all(np.isfinite(lf)) or not np.all(np.isfinite(ref)):
            continue
        diffs[key] = paired_difference(lf, ref, y, data["group_of"], args.n_bootstrap, args.seed)
    return lines, diffs


def leave_one_task_out(datas, args):
    """The rule's transfer rows: for each held-out store, the label-free forest fitted on the other
    stores' agreement targets and the supervised default on their gold labels, each Platt-scaled on
    N = 100 labels of the held-out task drawn from outside the test fold (its grouped folds x
    repeats), scored out of fold on the held-out task."""
    lines = ["## Leave one task out (first level on the other tasks, Platt on 100 of the held-out task's labels)", "",
             "| held-out task | label-free auc-euro | supervised auc-euro | label-free AUROC | supervised AUROC | "
             "label-free minus supervised (95% cluster bootstrap) |", "|---|---:|---:|---:|---:|---|"]
    params = {"n_estimators": args.n_estimators} if args.n_estimators else {}
    for i, held in enumerate(datas):
        others = [d for j, d in enumerate(datas) if j != i]
        states = np.concatenate([d["states"] for d in others])
        conf = np.concatenate([d["confidence"] for d in others])
        y_other = np.concatenate([d["y"] for d in others])
        target = np.concatenate([agreement_target(d["agreement"], "consistency") for d in others])
        forest = ActivationProbe(view="pca10", append_confidence=False, calibration="platt", oof="oob",
                                 random_state=args.seed, n_jobs=args.n_jobs, **params)
        forest.fit(Inputs.of(states), target)
        supervised = make_estimator(STATES_PROBE, random_state=args.seed, n_jobs=args.n_jobs,
                                    probe_params=params or None)
        supervised.fit(Inputs.of(states, conf), y_other)
        scores = {"label-free": forest.predict_proba(Inputs.of(held["states"]), calibrated=False)[:, 1],
                  "supervised": supervised.predict_proba(Inputs.of(held["states"], held["confidence"]))[:, 1]}
        y = held["y"]
        out = {k: np.full((args.repeats, y.size), np.nan) for k in scores}
        folds = cv_folds(held["ids"], y, args.cv, args.repeats, seed=args.seed, groups=held["groups"],
                         group_name=held["field"] or "record ids")
        for r, rep in enumerate(folds):
            for f, (tr, te) in enumerate(rep):
                tr = np.sort(tr)
                cal = np.sort(tr[np.random.default_rng(args.seed + 1000 * r + f).permutation(tr.size)[:100]])
                if np.unique(y[cal]).size < 2:
                    continue
                for k, s in scores.items():
                    platt = probe_calibrator("platt").fit(calibration_scores("platt", s[cal]), y[cal])
                    out[k][r, te] = platt.predict_proba(s[te])[:, 1]
        est, low, high, _ = paired_difference(out["label-free"], out["supervised"], y, held["group_of"],
                                              args.n_bootstrap, args.seed)
        lines.append(f"| {held['task']} | {mean_metric(out['label-free'], y, auc_euro):.4f} | "
                     f"{mean_metric(out['supervised'], y, auc_euro):.4f} | {mean_metric(out['label-free'], y, auroc):.3f} | "
                     f"{mean_metric(out['supervised'], y, auroc):.3f} | {est:+.4f} [{low:+.4f}, {high:+.4f}] |")
        print(f"leave one task out: {held['task']} done", file=sys.stderr, flush=True)
    return lines


def reading(per_pair):
    """The rule's verdicts at N = 100 per pair, Holm over the pairs for "beats"."""
    lines = ["## Reading (the rule of label_free.md, N = 100)", ""]
    same = [d.get("same 100 labels") for _, d in per_pair]
    rejected = holm([s[3] if s else float("nan") for s in same])
    for (task, d), beats in zip(per_pair, rejected):
        parts = []
        if "every label" in d:
            est, low, high, _ = d["every label"]
            verdict = ("ties" if -0.01 <= low and high <= 0.01 else "falls short of" if high < 0 else "neither ties nor falls short of")
            parts.append(f"{verdict} the supervised default on every label ({est:+.4f} [{low:+.4f}, {high:+.4f}])")
        if "same 100 labels" in d:
            est, low, high, p = d["same 100 labels"]
            verdict = "beats" if low > 0 and beats else "does not beat"
            parts.append(f"{verdict} the supervised default on the same 100 labels ({est:+.4f} [{low:+.4f}, "
                         f"{high:+.4f}], bootstrap p {p:.3f}, Holm over {len(per_pair)} pairs)")
        if "consistency" in d:
            est, low, high, _ = d["consistency"]
            parts.append(f"minus consistency (K + 1 generations at scoring time, the probe one): {est:+.4f} "
                         f"[{low:+.4f}, {high:+.4f}]")
        lines.append(f"- {task}: the label-free probe " + "; ".join(parts) + "." if parts else
                     f"- {task}: no complete N = 100 rows (too few training records or one class drawn).")
    return lines


def main(argv=None) -> int:
    ap = study_parser(__doc__.split("\n\n")[0], "stores collected with --samples (one per pair)")
    ap.add_argument("--transfer", action="store_true",
                    help="also leave one task out across the stores (same model: one states space)")
    args = ap.parse_args(argv)

    datas = [load(path, args.group_by) for path in args.stores]
    if args.transfer and len({d["model"] for d in datas}) != 1:
        ap.error("--transfer needs stores of one model")
    lines, per_pair = [command_line("label_free.py", args, *(["--transfer"] if args.transfer else [])), ""], []
    for data in datas:
        table, diffs = within_pair(data, args)
        lines += table + [""]
        per_pair.append((f"{data['model']} / {data['task']}", diffs))
    lines += reading(per_pair) + [""]
    if args.transfer:
        lines += leave_one_task_out(datas, args) + [""]
    publish("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
