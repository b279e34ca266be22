"""How many labelled calibration records does a certified trust threshold need?

Usage:
    python benchmarks/certify_labels.py [--draws 200] [--seed 0] [--backend mapie|binomial]

Simulates ``acute.metrics.certify.certify_threshold`` (delta = 0.1, the default grid 0.00..0.99) on
calibration sets of 100, 200, 500, 1000, 2000 and 5000 records at max_error (alpha) = 0.05 and
0.10, for two synthetic confidences, and prints Markdown tables of the certified coverage: the
fraction of *new* answers the certified threshold trusts, P(c >= threshold), computed exactly
from the model (0 for a draw that certifies nothing).

Synthetic model: x ~ N(0, 1); the confidence is c = sigmoid(a x) and P(correct | c) = c
(calibrated, accuracy 0.5). Only the spread a changes how well c ranks answers:

* well-ranked: a = 3 (AUROC 0.92);
* weakly ranked: a = 1.5 (AUROC 0.81).

Columns: the share of draws with a certificate, the mean certified coverage over all draws
with its 10th and 90th percentiles, for Holm (the default) and the fixed sequence; "oracle" is
the most coverage any threshold has at population precision >= 1 - alpha (what infinitely
many labels would give); "broken" the share of draws whose certified threshold has population
precision below 1 - alpha (at most delta = 0.1 by the guarantee). A count below
``min_calibration_records`` is refused by certify_threshold and shows as "too few (< n_min)".
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

from acute.metrics.certify import certify_threshold, min_calibration_records
from acute.errors import InputError
from acute.metrics import auroc

SIZES = (100, 200, 500, 1000, 2000, 5000)
ALPHAS = (0.05, 0.10)
DELTA = 0.1
MODELS = {"well-ranked (a = 3)": 3.0, "weakly ranked (a = 1.5)": 1.5}
FWERS = {"Holm": "bonferroni_holm", "fixed sequence": "fixed_sequence"}

_X = np.linspace(-10.0, 10.0, 400_001)
_W = norm.pdf(_X)


@functools.lru_cache(maxsize=None)
def population(a: float) -> tuple[np.ndarray, np.ndarray]:
    """(coverage, precision) of trusting c >= t for every t = sigmoid(a x) on the x grid."""
    mass = np.cumsum(_W[::-1])[::-1]
    good = np.cumsum((_W * expit(a * _X))[::-1])[::-1]
    return mass / mass[0], good / mass


@functools.lru_cache(maxsize=None)
def at_threshold(a: float, t: float) -> tuple[float, float]:
    """(population coverage, population precision) of the rule c >= t."""
    cov, prec = population(a)
    i = min(int(np.searchsorted(_X, logit(t) / a if t > 0 else -np.inf)), _X.size - 1)
    return float(cov[i]), float(prec[i])


def oracle_coverage(a: float, alpha: float) -> float:
    cov, prec = population(a)
    ok = prec >= 1 - alpha
    return float(cov[ok].max()) if ok.any() else 0.0


def simulate(a: float, n: int, alpha: float, fwer: str, draws: int, rng: np.random.Generator,
             backend: str) -> dict:
    coverage, broken, certified = [], 0, 0
    for _ in range(draws):
        x = rng.standard_normal(n)
        c, y = expit(a * x), rng.uniform(size=n) < expit(a * x)
        cert = certify_threshold(c, y, alpha, DELTA, fwer=fwer, backend=backend)
        if cert.valid:
            cov, prec = at_threshold(a, cert.threshold)
            certified += 1
            broken += prec < 1 - alpha
        else:
            cov = 0.0
        coverage.append(cov)
    cov = np.array(coverage)
    return {"certified": certified / draws, "mean": cov.mean(), "p10": np.percentile(cov, 10),
            "p90": np.percentile(cov, 90), "broken": broken / draws}


def run(draws: int, seed: int, backend: str) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for name, a in MODELS.items():
        x = rng.standard_normal(200_000)
        auc = auroc(expit(a * x), rng.uniform(size=x.size) < expit(a * x))
        lines += [f"### {name}: AUROC {auc:.2f}, accuracy 0.50", "",
                  "| n | alpha | oracle | Holm: certified | Holm: coverage mean [p10, p90] "
                  "| fixed seq.: certified | fixed seq.: coverage mean [p10, p90] "
                  "| broken (Holm / fixed seq.) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for alpha in ALPHAS:
            for n in SIZES:
                cells, broken = [], []
                for fwer in FWERS.values():
                    try:
                        r = simulate(a, n, alpha, fwer, draws, rng, backend)
                    except InputError:
                        need = min_calibration_records(alpha, DELTA, fwer=fwer)
                        cells += [f"too few (< {need})", "-"]
                        broken.append("-")
                        continue
                    cells += [f"{r['certified']:.2f}",
                              f"{r['mean']:.3f} [{r['p10']:.3f}, {r['p90']:.3f}]"]
                    broken.append(f"{r['broken']:.2f}")
                lines.append(f"| {n:,} | {alpha:.2f} | {oracle_coverage(a, alpha):.3f} | "
                             + " | ".join(cells) + f" | {' / '.join(broken)} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=200, help="calibration sets per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("mapie", "binomial"), default="mapie")
    args = parser.parse_args()
    start = time.perf_counter()
    table = run(args.draws, args.seed, args.backend)
    print(f"delta = {DELTA}, {args.draws} draws per cell, backend {args.backend}, seed "
          f"{args.seed}; min_calibration_records at delta 0.1: alpha 0.05 -> "
          f"{min_calibration_records(0.05, DELTA)} (Holm) / "
          f"{min_calibration_records(0.05, DELTA, fwer='fixed_sequence')} (fixed sequence), "
          f"alpha 0.10 -> {min_calibration_records(0.10, DELTA)} / "
          f"{min_calibration_records(0.10, DELTA, fwer='fixed_sequence')}\n")
    print(table)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
