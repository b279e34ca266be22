"""Which pooled hidden states carry the correctness signal? An ablation on any store.

Usage:
    python benchmarks/pooling_ablation.py --store DIR [--estimator acute-cosine-stacked]
        [--poolings mean,last-prompt,last-answer,mean+last-answer] [--cv 5] [--repeats 2]
        [--n-bootstrap 1000] [--n-estimators N] [--out DIR]

The store must hold the last-prompt / last-answer states (collected by this acute, or
re-recorded: ``acute rerecord OLD --out NEW``). Runs ``acute.evaluation.evaluate_store`` in its
default mode (stratified k-fold x repeats, every record scored out of fold, grouped by id, the
same folds for every row) on the six baselines and the estimator once per pooling
(``ESTIMATOR@POOLING``, :mod:`acute.store.pooling`), writes the evaluation folder (default
``DIR/pooling-ablation``) and prints one row per pooling: auc-euro (all), smECE and the paired
differences (95% bootstrap intervals, the same resampled records for every row) to the best
baseline and to the mean pooling. ``benchmarks/pooling_ablation.md`` quotes its output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DEFAULT_POOLINGS = "mean,last-prompt,last-answer,mean+last-answer"


def _iv(row: dict, key: str) -> str:
    lo, hi = row.get(f"diff_{key}_ci_low"), row.get(f"diff_{key}_ci_high")
    if lo is None:
        return f"{row[f'diff_{key}']:+.4f}"
    return f"{row[f'diff_{key}']:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def ablation_table(poolings: list[str], vs_baseline: dict, vs_mean: dict, baseline: str) -> str:
    lines = [f"| pooling | auc-euro all | Δ vs {baseline} [95% paired] | Δ vs mean [95% paired] | smECE | "
             f"Δ smECE vs {baseline} |", "|---|---:|---:|---:|---:|---:|"]
    for p in poolings:
        b, m = vs_baseline[p], vs_mean[p]
        lines.append(f"| {p} | {b['auc_euro_all']:.4f} | {_iv(b, 'auc_euro_all')} | "
                     f"{'—' if p == 'mean' else _iv(m, 'auc_euro_all')} | {b['smece']:.4f} | {_iv(b, 'smece')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from acute.fileio import json_ready
    from acute.estimators.baselines import BASELINES
    from acute.estimators.registry import split_pooling
    from acute.evaluation import evaluate_predictions, evaluate_store
    from acute.store.pooling import parse_pooling
    from acute.store import open_store

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--estimator", default="acute-cosine-stacked", help="a probe name without @POOLING")
    ap.add_argument("--poolings", default=DEFAULT_POOLINGS, help=f"comma-separated (default {DEFAULT_POOLINGS})")
    ap.add_argument("--out", default=None, help="evaluation folder (default: STORE/pooling-ablation)")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--n-estimators", type=int, default=None, help="trees per forest (default 500)")
    args = ap.parse_args(argv)

    poolings = [p.strip() for p in args.poolings.split(",") if p.strip()]
    for p in poolings:
        parse_pooling(p)
    if "mean" not in poolings:
        ap.error("--poolings must include mean (the reference of the Δ vs mean column)")
    if split_pooling(args.estimator)[1] is not None:
        ap.error("--estimator takes no @POOLING: the benchmark adds each pooling")
    names = {p: args.estimator if p == "mean" else f"{args.estimator}@{p}" for p in poolings}
    store = open_store(args.store)
    out = Path(args.out) if args.out else Path(args.store) / "pooling-ablation"
    t0 = time.perf_counter()
    res = evaluate_store(store, out_dir=out, estimators=list(BASELINES) + list(names.values()), cv=args.cv,
                         repeats=args.repeats, seed=args.seed, n_bootstrap=args.n_bootstrap, reliability="best",
                         probe_params={"n_estimators": args.n_estimators})
    seconds = time.perf_counter() - t0
    by_name = {r["estimator"]: r for r in res.rows}
    baseline = res.rows[0]["reference"]
    vs_mean_rows = evaluate_predictions({n: res.cv_predictions[n] for n in names.values()}, res.test_correct,
                                        n_bootstrap=args.n_bootstrap, seed=args.seed, reference=names["mean"])
    vs_mean = {p: r for p, r in zip(names, vs_mean_rows)}
    vs_baseline = {p: by_name[n] for p, n in names.items()}
    model, task = store.manifest.get("model"), store.manifest.get("task")
    head = (f"{model}, task {task}: {len(store)} records, accuracy {res.test_correct.mean():.3f}; "
            f"{args.estimator} by pooling; {args.cv}-fold x {args.repeats} cross-validation (seed {args.seed}), "
            f"{args.n_bootstrap} paired bootstrap resamples; best baseline {baseline} "
            f"(auc-euro {by_name[baseline]['auc_euro_all']:.4f}); {seconds:.0f} s\n")
    text = head + "\n" + ablation_table(poolings, vs_baseline, vs_mean, baseline)
    (out / "ablation.md").write_text(text, encoding="utf-8")
    (out / "ablation.json").write_text(json.dumps(json_ready(
        {"model": model, "task": task, "n_records": len(store), "estimator": args.estimator,
         "best_baseline": baseline, "seconds": seconds, "cv": args.cv, "repeats": args.repeats,
         "seed": args.seed, "vs_baseline": vs_baseline, "vs_mean": vs_mean}), indent=1), encoding="utf-8")
    print(text)
    print(f"written to {out} (ablation.md, ablation.json and the evaluation files)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
