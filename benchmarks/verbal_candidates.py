#!/usr/bin/env python
"""How much a model's verbalized confidence varies with the answer it rates (a benchmark).

Reads protocol runs (``acute protocol ... --out RUN``) and prints, per run and provenance
(generated, gold, plausible-wrong, wrong-type answer), the share of verbalizations that parse,
the mean, spread and number of distinct values of ``c_verb``, and per run the paired difference
gold minus plausible-wrong (a model whose confidence tracks correctness rates the gold answer
higher). Used to pick the protocol study's second model (issue 17): a model that verbalizes a
constant makes every verbalized-confidence cell degenerate.

Usage::

    acute protocol --model gemma-3-270m --task triviaqa --data ../shared/data/triviaqa \\
        --limit 50 --n-bootstrap 200 --out runs/cand17/gemma-3-270m
    acute protocol --model qwen2.5-coder-0.5b-instruct --task triviaqa \\
        --data ../shared/data/triviaqa --limit 50 --n-bootstrap 200 \\
        --out runs/cand17/qwen2.5-coder-0.5b-instruct
    python benchmarks/verbal_candidates.py runs/cand17/* --out benchmarks/verbal_candidates.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch_throughput import command_line, markdown_table, write_report  # noqa: E402

from acute.protocol import PROVENANCES, load_protocol  # noqa: E402


def provenance_rows(doc: dict) -> list[list[str]]:
    """One row per provenance: parsed / elicited, mean, SD and distinct values of c_verb."""
    rows = []
    for prov in PROVENANCES:
        slots = [r["verbal"][prov] for r in doc["records"] if r["verbal"][prov]["status"] != "unavailable"]
        values = np.array([s["c_verb"] for s in slots if s["status"] == "ok"], dtype=float)
        stats = ([f"{values.mean():.3f}", f"{values.std():.3f}", str(len(np.unique(values)))]
                 if len(values) else ["n/a", "n/a", "0"])
        rows.append([prov, f"{len(values)}/{len(slots)}", *stats])
    return rows


def gold_minus_wrong(doc: dict) -> tuple[int, float, float]:
    """``(pairs, mean difference, share of pairs that differ)`` of c_verb(gold) - c_verb(plausible-wrong)."""
    diffs = np.array([r["verbal"]["gold"]["c_verb"] - r["verbal"]["plausible_wrong"]["c_verb"]
                      for r in doc["records"]
                      if r["verbal"]["gold"]["c_verb"] is not None
                      and r["verbal"]["plausible_wrong"]["c_verb"] is not None], dtype=float)
    if not len(diffs):
        return 0, float("nan"), float("nan")
    return len(diffs), float(diffs.mean()), float(np.mean(diffs != 0))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="protocol run folders (or protocol.json files)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "verbal_candidates.md"))
    args = ap.parse_args(argv)
    parts = ["# Verbalized confidence of candidate models (`benchmarks/verbal_candidates.py`)", "",
             f"    {command_line(Path(__file__).name, argv)}", ""]
    for run in args.runs:
        doc = load_protocol(run)
        n, mean, share = gold_minus_wrong(doc)
        correct = [r["correct"] for r in doc["records"] if r["correct"] is not None]
        parts += [f"## {doc['model']} on {doc['task']} ({len(doc['records'])} rows, accuracy "
                  f"{np.mean(correct):.2f}, template `{doc['settings']['variant']}`)", "",
                  markdown_table(["provenance", "parsed", "mean c_verb", "SD", "distinct values"],
                                 provenance_rows(doc)), "",
                  f"c_verb(gold) - c_verb(plausible-wrong): mean {mean:+.3f} over {n} pairs; "
                  f"{share:.0%} of the pairs differ.", ""]
    write_report(args.out, "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
