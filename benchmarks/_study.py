"""What the multi-store studies (label_free.py, stop_early.py) share: their command line and how
they publish their tables. Imported by those scripts, which run as ``python benchmarks/NAME.py``
(so this folder is on ``sys.path``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["study_parser", "command_line", "publish"]


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
