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

from acute.metrics import bootstrap_indices  # noqa: E402
from acute.metrics.resampling import percentile_interval  # noqa: E402
from acute.protocol import load_protocol  # noqa: E402
from acute.protocol.settings import PROVENANCES  # noqa: E402


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


def gold_minus(doc: dict, other: str = "plausible_wrong") -> np.ndarray:
    """Per row where both parse: c_verb(gold) - c_verb(``other``) (float64[pairs])."""
    return np.array([r["verbal"]["gold"]["c_verb"] - r["verbal"][other]["c_verb"]
                     for r in doc["records"]
                     if r["verbal"]["gold"]["c_verb"] is not None
                     and r["verbal"][other]["c_verb"] is not None], dtype=float)


def mean_interval(diffs: np.ndarray, n_bootstrap: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of paired differences with its 95% percentile-bootstrap
    interval over rows (:func:`acute.metrics.bootstrap_indices`); NaNs without pairs."""
    if not len(diffs):
        return float("nan"), float("nan"), float("nan")
    idx = bootstrap_indices(len(diffs), n_bootstrap, seed)
    low, high, _ = percentile_interval(diffs[idx].mean(axis=1))
    return float(diffs.mean()), float(low), float(high)


def fmt_interval(m: tuple[float, float, float]) -> str:
    return "n/a" if not np.isfinite(m[0]) else f"{m[0]:+.3f} [{m[1]:+.3f}, {m[2]:+.3f}]"


def summary_row(doc: dict) -> list[str]:
    """model, task, rows, parse failures (all provenances), SD of c_verb over generated answers,
    gold - plausible-wrong and gold - wrong-type with intervals."""
    slots = [r["verbal"][p] for r in doc["records"] for p in PROVENANCES
             if r["verbal"][p]["status"] != "unavailable"]
    failed = sum(s["status"] != "ok" for s in slots)
    gen = np.array([r["verbal"]["generated"]["c_verb"] for r in doc["records"]
                    if r["verbal"]["generated"]["c_verb"] is not None], dtype=float)
    return [doc["model"], doc["task"], str(len(doc["records"])), f"{failed}/{len(slots)}",
            f"{gen.std():.3f}" if len(gen) else "n/a",
            fmt_interval(mean_interval(gold_minus(doc, "plausible_wrong"))),
            fmt_interval(mean_interval(gold_minus(doc, "wrong_type")))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="protocol run folders (or protocol.json files)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "verbal_candidates.md"))
    args = ap.parse_args(argv)
    parts = ["# Verbalized confidence of candidate models (`benchmarks/verbal_candidates.py`)", "",
             f"    {command_line(Path(__file__).name, argv)}", ""]
    docs = [load_protocol(run) for run in args.runs]
    parts += ["## Summary", "",
              "Per run: parse failures over all four provenances, the spread of c_verb over the model's "
              "own answers, and the paired differences c_verb(gold) - c_verb(plausible-wrong) and "
              "c_verb(gold) - c_verb(wrong-type) over the rows where both parse, with 95% "
              "percentile-bootstrap intervals over rows (2000 resamples, seed 0). A model's verbalized "
              "confidence *varies with the answer* on a task when gold - plausible-wrong lies above zero "
              "beyond its interval.", "",
              markdown_table(["model", "task", "rows", "parse failures", "SD c_verb (generated)",
                              "gold - plausible-wrong", "gold - wrong-type"], [summary_row(d) for d in docs]), ""]
    for doc in docs:
        diffs = gold_minus(doc)
        correct = [r["correct"] for r in doc["records"] if r["correct"] is not None]
        parts += [f"## {doc['model']} on {doc['task']} ({len(doc['records'])} rows, accuracy "
                  f"{np.mean(correct):.2f}, template `{doc['settings']['variant']}`)", "",
                  markdown_table(["provenance", "parsed", "mean c_verb", "SD", "distinct values"],
                                 provenance_rows(doc)), "",
                  f"c_verb(gold) - c_verb(plausible-wrong): {fmt_interval(mean_interval(diffs))} over "
                  f"{len(diffs)} pairs; {np.mean(diffs != 0) if len(diffs) else float('nan'):.0%} of the pairs differ.", ""]
    write_report(args.out, "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
