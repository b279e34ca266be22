"""What the multi-store studies (label_free.py, stop_early.py, bfcl_parse_leak.py) share: their
command line, how they publish their tables and their paired auc-euro differences. Imported by those scripts, which run as ``python benchmarks/NAME.py``
(so this folder is on ``sys.path``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from acute.metrics import auc_euro
from acute.metrics.resampling import bootstrap_indices

__all__ = ["study_parser", "command_line", "mean_metric", "paired_difference", "publish"]


def study_parser(description: str, stores_help: str) -> argparse.ArgumentParser:
    """A parser with the stores and the cross-validation settings every study takes."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("stores", nargs="+", help=stores_help)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cv", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-jobs", type=int, default=1)
    ap.add_argument("--n-estimators", type=int, default=None)
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--group-by", default=None, help="default: each task's own grouping")
    ap.add_argument("--out", default=None, help="markdown file for the tables (printed either way)")
    return ap


def command_line(script: str, args: argparse.Namespace, *flags: str) -> str:
    """The command that regenerates a study's tables, as the first line of its results file."""
    parts = [f"python benchmarks/{script}", *args.stores, f"--repeats {args.repeats} --cv {args.cv} --seed {args.seed}",
             *flags]
    if args.n_estimators:
        parts.append(f"--n-estimators {args.n_estimators}")
    return "`" + " ".join(parts) + "`"


def publish(text: str, out: str | None) -> None:
    """Print the tables and, with ``--out``, write them (saying where)."""
    print(text)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        print(f"written to {out}", file=sys.stderr)


def mean_metric(p, y, metric):
    """The mean over repeats (rows of ``p``) of ``metric``; NaN when no repeat is complete."""
    vals = [metric(row, y) for row in p if np.all(np.isfinite(row))]
    return float(np.mean(vals)) if vals else float("nan")


def paired_difference(a, b, y, group_of, n_bootstrap, seed):
    """``(estimate, low, high, p)``: the mean over repeats of auc-euro(a) - auc-euro(b), its 95%
    cluster-bootstrap interval (groups resampled whole) and the bootstrap's two-sided p-value."""
    codes, inverse = np.unique(group_of, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(codes.size)]
    draws = []
    for rows in bootstrap_indices(codes.size, n_bootstrap, seed):
        pick = np.concatenate([members[g] for g in rows])
        draws.append(np.mean([auc_euro(u[pick], y[pick]) - auc_euro(v[pick], y[pick]) for u, v in zip(a, b)]))
    draws = np.asarray(draws)
    low, high = np.percentile(draws, [2.5, 97.5])
    p = min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0)))
    return mean_metric(a, y, auc_euro) - mean_metric(b, y, auc_euro), float(low), float(high), float(p)
