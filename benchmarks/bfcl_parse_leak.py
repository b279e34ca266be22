"""What BFCL's gold-dependent parse status (fixed 2026-12-07) lent the `visible` and
`answer-surface` controls, by the plan of benchmarks/bfcl_parse_leak.md (read it first).

On a BFCL store collected after the fix: each control fitted, over the evaluation's folds
(grouped by tool set), on the visible array as the store has it and on the same array with the
old rule's ``parse_error`` (False for an irrelevance row whose reply does not parse); auc-euro and
AUROC out of fold, leaky minus gold-free with a cluster-bootstrap interval.

    python benchmarks/bfcl_parse_leak.py runs/evidence/qwen2.5-coder-0.5b-instruct/bfcl/store \\
        --repeats 5 --out benchmarks/bfcl_parse_leak-results.md
"""

from __future__ import annotations

import sys

import numpy as np

from acute.errors import InputError
from acute.estimators.inputs import VISIBLE, Inputs
from acute.estimators.registry import make_estimator
from acute.estimators.visible import reply_fields, visible_inputs
from acute.evaluation.crossval import cv_folds, inputs_for
from acute.evaluation.grouping import store_groups
from acute.metrics import auc_euro, auroc
from acute.store import open_store

from _study import command_line, mean_metric, paired_difference, publish, study_parser

CONTROLS = ("visible", "answer-surface")


def leaky_records(records: list[dict]) -> tuple[list[dict], int]:
    """The records with the old rule's ``parse_error`` (an irrelevance row's reply that does not
    parse: not a parse error), and how many changed."""
    out, changed = [], 0
    for rec in records:
        if (rec.get("meta") or {}).get("category") == "irrelevance" and rec.get("parse_error"):
            rec, changed = dict(rec, parse_error=False), changed + 1
        out.append(rec)
    return out, changed


def arrays(path: str, group_by: str | None) -> dict:
    """The gold-free and the leaky inputs of one store, its labels and groups."""
    store = open_store(path)
    if store.manifest.get("task") != "bfcl":
        raise InputError(f"{path}: a BFCL store is needed (its task is {store.manifest.get('task')!r})")
    clean = inputs_for(store, list(CONTROLS))
    records, changed = leaky_records(store.records)
    visible = visible_inputs(records, store.token_logprobs, fields=reply_fields(store.records), where=path)
    field, groups = store_groups(store, group_by)
    return {"y": np.asarray(store.correct).astype(np.int64), "ids": list(store.ids), "groups": groups,
            "field": field, "group_of": np.asarray(groups if groups is not None else [str(i) for i in store.ids]),
            "X": {"gold-free": clean, "leaky": Inputs({**{s: clean[s] for s in clean}, VISIBLE: visible})},
            "changed": changed, "model": store.manifest.get("model"), "n": len(store.ids)}


def predictions(data: dict, args) -> dict:
    """(control, variant) -> [repeats, n] out-of-fold P(correct)."""
    y = data["y"]
    folds = cv_folds(data["ids"], y, args.cv, args.repeats, seed=args.seed, groups=data["groups"],
                     group_name=data["field"] or "record ids")
    out = {(c, v): np.full((args.repeats, y.size), np.nan) for c in CONTROLS for v in data["X"]}
    for r, rep in enumerate(folds):
        for tr, te in rep:
            for (control, variant), p in out.items():
                X = data["X"][variant]
                est = make_estimator(control, random_state=args.seed)
                p[r, te] = est.fit(X.take(tr), y[tr]).predict_proba(X.take(te))[:, 1]
        print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr)
    return out


def table(path: str, data: dict, preds: dict, args) -> list[str]:
    y = data["y"]
    lines = [f"## {data['model']} on {path} ({data['n']} records, accuracy {y.mean():.3f}; "
             f"{data['changed']} records whose parse status the old rule changed)", "",
             "| control | auc-euro gold-free | auc-euro leaky | AUROC gold-free | AUROC leaky | leaky minus gold-free, auc-euro [95% cluster bootstrap] |",
             "|---|---:|---:|---:|---:|---|"]
    for c in CONTROLS:
        clean, leaky = preds[(c, "gold-free")], preds[(c, "leaky")]
        est, low, high, _ = paired_difference(leaky, clean, y, data["group_of"], args.n_bootstrap, args.seed)
        lines.append(f"| {c} | {mean_metric(clean, y, auc_euro):.4f} | {mean_metric(leaky, y, auc_euro):.4f} | "
                     f"{mean_metric(clean, y, auroc):.3f} | {mean_metric(leaky, y, auroc):.3f} | "
                     f"{est:+.4f} [{low:+.4f}, {high:+.4f}] |")
    return lines + [""]


def main(argv=None) -> int:
    ap = study_parser("What BFCL's gold-dependent parse status lent the visible controls.", "BFCL store folders")
    args = ap.parse_args(argv)
    lines = ["# What BFCL's gold-dependent parse status lent the visible controls: measured", "",
             "By the plan of [bfcl_parse_leak.md](bfcl_parse_leak.md), committed before these numbers.", "",
             command_line("bfcl_parse_leak.py", args), ""]
    for path in args.stores:
        data = arrays(path, args.group_by)
        lines += table(path, data, predictions(data, args), args)
    publish("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
