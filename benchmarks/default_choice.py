"""Which stacked view should be the default? Paired comparison over finished evaluations.

Usage:
    python benchmarks/default_choice.py --work runs/evidence [--a acute-pca10-stacked]
        [--b acute-cosine-stacked] [--n-bootstrap 1000]

Reads every ``<work>/<model>/<task>/eval`` folder that ``acute run examples/evidence.toml``
wrote (out-of-fold predictions of every repeat: ``predictions.csv``, ``predictions-repeat1.csv``,
...) and prints, per model and task, auc-euro (all) and smECE of ``--a`` minus ``--b`` with 95%
paired bootstrap intervals (the same resampled records for both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from acute.evaluation import evaluate_predictions, read_predictions

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--a", default="acute-pca10-stacked")
    ap.add_argument("--b", default="acute-cosine-stacked")
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    args = ap.parse_args(argv)
    print(f"| model | task | n | {args.a} minus {args.b}: auc-euro all [95% paired] | smECE [95% paired] |")
    print("|---|---|---:|---:|---:|")
    for eval_dir in sorted(Path(args.work).glob("*/*/eval")):
        _, y, preds = read_predictions(eval_dir, [args.a, args.b])
        rows = evaluate_predictions(preds, y, n_bootstrap=args.n_bootstrap, reference=args.b)
        r = rows[0]
        print(f"| {eval_dir.parts[-3]} | {eval_dir.parts[-2]} | {y.size} | "
              f"{r['diff_auc_euro_all']:+.4f} [{r['diff_auc_euro_all_ci_low']:+.4f}, {r['diff_auc_euro_all_ci_high']:+.4f}] | "
              f"{r['diff_smece']:+.4f} [{r['diff_smece_ci_low']:+.4f}, {r['diff_smece_ci_high']:+.4f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
