"""How often `acute serve`'s drift signal crosses its threshold when nothing drifted, and when
something did (issue 45 item 3).

The signal (acute.metrics.drift) is the KS distance between the last `--drift-window` live
confidences and the percentiles of the probe's calibration confidences (probe.json's
`confidence_reference`). Under no drift both are samples of one distribution, and the distance
is sampling noise plus at most 0.01 from keeping percentiles only. This simulates it: reference
confidences (n records) and a live window drawn from the same distribution (null), or from a
shifted one, `--draws` times per setting, and reports the 99th / 99.9th percentile of the
distance under the null, the share of draws above the threshold (false alarms of one look at a
full window), and for two shifts the median distance and the share above it (detections).

Distributions: `beta` (Beta(2, 2), continuous) and `forest` (a 100-tree forest's vote share,
Binomial(100, p) / 100 with p ~ Beta(2, 2): the few values a probe's confidence takes); the
shifts move p to Beta(2, 3) (mean 0.5 -> 0.4, a mix of questions harder for the model; its
distance from Beta(2, 2) is about 0.2, the threshold itself) and to Beta(2, 4) (mean 0.33;
distance about 0.33).

    python benchmarks/drift_threshold.py --draws 2000 > benchmarks/drift_threshold.md
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from acute.metrics.drift import confidence_reference, drift_statistic


def sample(rng, kind: str, n: int, b: float) -> np.ndarray:
    p = rng.beta(2.0, b, n)
    return p if kind == "beta" else rng.binomial(100, p) / 100.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--threshold", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    print(f"# Drift signal: the KS distance under no drift and under a shift ({args.draws} draws per row)\n")
    print("Command: `python benchmarks/drift_threshold.py --draws %d` (seed %d, threshold %g)\n"
          % (args.draws, args.seed, args.threshold))
    t = args.threshold
    print(f"| distribution | reference n | window | null p99 | null p99.9 | null > {t:g} | Beta(2,3): median "
          f"| > {t:g} | Beta(2,4): median | > {t:g} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("beta", "forest"):
        for n in (200, 500, 2000):
            for window in (100, 500, 2000):
                d = {b: [] for b in (2.0, 3.0, 4.0)}
                for _ in range(args.draws):
                    ref = confidence_reference(sample(rng, kind, n, 2.0), "out-of-fold")
                    for b in d:
                        d[b].append(drift_statistic(sample(rng, kind, window, b), ref))
                null, moved, far = (np.array(d[b]) for b in (2.0, 3.0, 4.0))
                print(f"| {kind} | {n} | {window} | {np.quantile(null, 0.99):.3f} | {np.quantile(null, 0.999):.3f} "
                      f"| {np.mean(null > t):.4f} | {np.median(moved):.3f} | {np.mean(moved > t):.3f} "
                      f"| {np.median(far):.3f} | {np.mean(far > t):.3f} |")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
