"""Does a probe's gain survive once the answers that did not parse are set aside? (issue 26)

Usage:
    python benchmarks/parseable_only.py --evaluation EVAL_DIR --store STORE [--n-bootstrap 1000]
        [--out benchmarks/parseable_only.md]

A letter-answer task labels a reply that names no option (``parse_error`` in the store) wrong
by construction, and a deployment knows it parsed nothing before any confidence is read, so a
gain that comes only from spotting those replies is not one a calibrator of the raw confidence
lacks. This reads the out-of-fold predictions of every repeat that the evaluation wrote
(``predictions.csv``, ``predictions-repeat*.csv``; nothing is refitted) and recomputes the
evaluation table (acute.evaluation.table: means over repeats, paired bootstrap, the best
baseline as reference) on the records whose answer parsed. Post hoc: the estimators were
fitted with the unparseable records in their training folds. Appends a section to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.evaluation import read_predictions  # noqa: E402
from acute.evaluation.table import evaluate_predictions  # noqa: E402
from acute.store import open_store  # noqa: E402


def section(eval_dir: Path, store_dir: Path, n_bootstrap: int) -> str:
    ids, y, preds = read_predictions(eval_dir)
    failed = {str(r["id"]) for r in open_store(store_dir).records if r.get("parse_error")}
    keep = np.array([i not in failed for i in ids])
    lines = [f"## {eval_dir}", "",
             f"{int(keep.sum())} of {len(ids)} answers parsed; accuracy {y.mean():.3f} on all, "
             f"{y[keep].mean():.3f} on the parsed ones ({int((~y[~keep].astype(bool)).sum())} of the "
             f"{int((~keep).sum())} unparsed are labelled wrong).", "",
             "| estimator | auc-euro all (all records) | auc-euro all (parsed only) | Δ vs best baseline, parsed only [95% paired] | AUROC, parsed only |",
             "|---|---:|---:|---:|---:|"]
    every = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=0)}
    rows = evaluate_predictions({n: p[:, keep] for n, p in preds.items()}, y[keep], n_bootstrap=n_bootstrap)
    for r in rows:
        diff = ("(reference)" if r["estimator"] == r.get("reference") else
                f"{r['diff_auc_euro_all']:+.4f} [{r['diff_auc_euro_all_ci_low']:+.4f}, {r['diff_auc_euro_all_ci_high']:+.4f}]")
        lines.append(f"| {r['estimator']} | {every[r['estimator']]['auc_euro_all']:.4f} | {r['auc_euro_all']:.4f} | "
                     f"{diff} | {r['auroc']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evaluation", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("parseable_only.md"))
    args = ap.parse_args(argv)
    text = section(args.evaluation, args.store, args.n_bootstrap)
    head = "" if args.out.is_file() else ("# Gains once unparsed answers are set aside (`benchmarks/parseable_only.py`)\n\n")
    with open(args.out, "a", encoding="utf-8") as fh:
        fh.write(head + f"    python benchmarks/parseable_only.py --evaluation {args.evaluation} --store {args.store}\n\n" + text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
