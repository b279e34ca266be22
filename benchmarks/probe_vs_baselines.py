"""Do the probes beat calibrated raw confidence? Cross-validated, paired, on any store.

Usage:
    python benchmarks/probe_vs_baselines.py --store DIR [--cv 5] [--repeats 2] [--out DIR]
        [--estimators raw,platt,...] [--n-bootstrap 1000]

Runs ``acute.evaluation.evaluate_store`` in its default mode (stratified k-fold x repeats, every
record scored out of fold, grouped by record id) over every estimator (the six baselines, the
paper's six forest probes, their stacked variants and ``auto``, the default estimator), writes
the usual evaluation folder (default ``DIR/probe-vs-baselines``) and prints:

* the full table (paired difference to the best baseline in its last column);
* a compact table of every estimator's auc-euro (all) and smECE minus Platt scaling's, with 95%
  paired bootstrap intervals (the same resampled records for both), which is the comparison
  the "Probes that earn their place" issue asks for.

The README's estimator section quotes this script's output for SmolLM2-135M-Instruct and
Qwen2.5-Coder-0.5B-Instruct on the 600 built-in questions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def platt_table(rows: list[dict]) -> str:
    lines = ["| estimator | auc-euro all | Δ vs platt [95% paired] | smECE | Δ smECE vs platt [95% paired] |",
             "|---|---:|---:|---:|---:|"]

    def iv(r, key):
        lo, hi = r[f"diff_{key}_ci_low"], r[f"diff_{key}_ci_high"]
        if lo is None or not math.isfinite(lo):
            return f"{r[f'diff_{key}']:+.4f}"
        return f"{r[f'diff_{key}']:+.4f} [{lo:+.4f}, {hi:+.4f}]"

    for r in rows:
        name = r["estimator"] + (f" ({r['chosen']})" if r.get("chosen") else "")
        lines.append(f"| {name} | {r['auc_euro_all']:.4f} | {iv(r, 'auc_euro_all')} | {r['smece']:.4f} | "
                     f"{iv(r, 'smece')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from acute.estimators import ESTIMATORS
    from acute.fileio import json_ready
    from acute.evaluation import evaluate_predictions, evaluate_store
    from acute.store import open_store

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", default=None, help="evaluation folder (default: STORE/probe-vs-baselines)")
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--estimators", default=None, help="comma-separated subset (must include platt)")
    ap.add_argument("--n-estimators", type=int, default=None, help="trees per forest (default 500)")
    args = ap.parse_args(argv)

    names = list(ESTIMATORS) if args.estimators is None else [n.strip() for n in args.estimators.split(",")]
    if "platt" not in names:
        ap.error("--estimators must include platt (the comparison this benchmark prints)")
    store = open_store(args.store)
    out = Path(args.out) if args.out else Path(args.store) / "probe-vs-baselines"
    t0 = time.perf_counter()
    res = evaluate_store(store, out_dir=out, estimators=names, cv=args.cv, repeats=args.repeats,
                         seed=args.seed, n_bootstrap=args.n_bootstrap, reliability="best",
                         probe_params={"n_estimators": args.n_estimators})
    seconds = time.perf_counter() - t0
    vs_platt = evaluate_predictions(res.cv_predictions, res.test_correct, n_bootstrap=args.n_bootstrap,
                                    seed=args.seed, reference="platt")
    for r, full in zip(vs_platt, res.rows):
        r["chosen"] = full.get("chosen")
    model = store.manifest.get("model")
    task = store.manifest.get("task")
    head = (f"{model}, task {task}: {len(store)} records, accuracy {res.test_correct.mean():.3f}; "
            f"{args.cv}-fold x {args.repeats} cross-validation (seed {args.seed}), "
            f"{args.n_bootstrap} paired bootstrap resamples; {seconds:.0f} s\n")
    text = head + "\n" + res.to_markdown() + "\nAgainst Platt scaling of the raw confidence:\n\n" + platt_table(vs_platt)
    (out / "vs-platt.md").write_text(text, encoding="utf-8")
    (out / "vs-platt.json").write_text(json.dumps(json_ready(
        {"model": model, "task": task, "n_records": len(store), "seconds": seconds,
         "cv": args.cv, "repeats": args.repeats, "seed": args.seed, "rows": vs_platt}), indent=1),
        encoding="utf-8")
    print(text)
    print(f"written to {out} (vs-platt.md, vs-platt.json and the evaluation files)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
