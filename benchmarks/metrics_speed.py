"""Time acute.metrics' smece, kde_ece and auc_euro next to relplot's smECE.

Usage:
    python benchmarks/metrics_speed.py [--sizes 1000 100000 1000000] [--reps 5] [--seed 0]

Prints a Markdown table of median wall-clock times (milliseconds) over ``--reps`` runs on
synthetic over-confident data (confidence ~ Beta(5, 2), P(correct) = confidence^1.5), plus
the largest |acute smece - relplot smECE| seen. relplot (test extra) is optional: without it
that column reads "n/a".
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from acute import metrics


def _median_ms(fn: Callable[[], float], reps: int) -> tuple[float, float]:
    """(median milliseconds over ``reps`` calls after one warm-up call, the value returned)."""
    value = fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times), value


def run(sizes: list[int], reps: int, seed: int) -> str:
    try:
        import relplot
    except ImportError:  # pragma: no cover - relplot is a test extra
        relplot = None
    rng = np.random.default_rng(seed)
    rows = [
        "| n | smece (ms) | relplot.smECE (ms) | speed-up | kde_ece (ms) | auc_euro grid (ms) "
        "| auc_euro exact (ms) | abs(smece - relplot) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        conf = rng.beta(5.0, 2.0, n)
        correct = rng.uniform(size=n) < conf**1.5
        t_sm, v_sm = _median_ms(lambda: metrics.smece(conf, correct), reps)
        t_kde, _ = _median_ms(lambda: metrics.kde_ece(conf, correct), reps)
        t_auc, _ = _median_ms(lambda: metrics.auc_euro(conf, correct), reps)
        t_exact, _ = _median_ms(lambda: metrics.auc_euro(conf, correct, exact=True), reps)
        if relplot is not None:
            labels = correct.astype(float)
            t_rp, v_rp = _median_ms(lambda: relplot.smECE(conf, labels), reps)
            rp, speed, diff = f"{t_rp:.1f}", f"{t_rp / t_sm:.1f}x", f"{abs(v_sm - v_rp):.1e}"
        else:
            rp = speed = diff = "n/a"
        rows.append(
            f"| {n:,} | {t_sm:.1f} | {rp} | {speed} | {t_kde:.1f} | {t_auc:.1f} "
            f"| {t_exact:.1f} | {diff} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.reps < 1 or any(n < 1 for n in args.sizes):
        parser.error("--reps and --sizes must be positive")
    print(run(args.sizes, args.reps, args.seed))


if __name__ == "__main__":
    main()
