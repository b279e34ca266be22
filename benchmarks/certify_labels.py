"""How many labelled calibration records does a certified trust threshold need?

Usage:
    python benchmarks/certify_labels.py [--draws 200] [--seed 0] [--backend mapie|binomial]
    python benchmarks/certify_labels.py --store STORE [--n-estimators 100] [--draws 200]
    python benchmarks/certify_labels.py --predictions EVALUATION/predictions.csv [--draws 200]

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

Real records (``--store`` or ``--predictions``): the out-of-fold P(correct) of the default
estimator (acute-pca10-stacked), the best baseline (by out-of-fold auc-euro) and raw confidence,
either cross-fitted here on a store's records (5 stratified folds grouped by id, one repeat:
``acute.evaluation.crossval``) or read from the ``predictions.csv`` that ``acute evaluate``
writes (columns ``id, correct, <estimator>...``, out of fold). For each size n, ``--draws``
random subsamples of n records are the calibration set (Holm, acute's exact binomial test
vectorised: ``ltt_thresholds``) and the remaining records the test set. Columns: the share of
draws with a certificate, the test coverage of the certified threshold (mean [p10, p90], 0
when none), the mean test error among the answers it trusts, the share of certified draws whose
test error exceeds alpha (test-set noise included: the records are finite), and "empirical",
``coverage_at_error`` on all records: the coverage a threshold chosen on the records themselves
gives, with no guarantee.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.metrics.certify import certify_threshold, ltt_thresholds, min_calibration_records  # noqa: E402
from acute.errors import InputError
from acute.metrics import auroc
from acute.metrics.selective import coverage_at_error

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


# ----------------------------------------------------------------------- real records
REAL_SIZES = (100, 200, 500, 1000, 1500)
MIN_TEST = 300  # records kept out of every calibration subsample, to measure test coverage


def read_predictions(path: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(correct, {estimator: out-of-fold P(correct)}) from an evaluation's predictions.csv (repeat 0)."""
    from acute.evaluation import read_predictions as read_evaluation

    if Path(path).name != "predictions.csv":
        raise InputError(f"{path}: --predictions takes an evaluation's predictions.csv")
    _, y, preds = read_evaluation(Path(path).parent)
    return y > 0, {n: v[0] for n, v in preds.items()}


def store_predictions(path: str, n_estimators: int | None, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(correct, {estimator: out-of-fold P(correct)}) of the default and every baseline,
    cross-fitted on the store's records (5 folds, one repeat)."""
    from acute.estimators.baselines import BASELINES
    from acute.estimators.registry import DEFAULT_ESTIMATOR
    from acute.evaluation.crossval import cross_val_predictions, cv_folds, states_for
    from acute.store import open_store

    store = open_store(path)
    names = [DEFAULT_ESTIMATOR, *BASELINES]
    y = np.asarray(store.correct).astype(bool)
    folds = cv_folds(store.ids, y, 5, 1, seed)
    preds = cross_val_predictions(names, states_for(store, names), y, store.raw_confidence, folds,
                                  random_state=seed, probe_params={"n_estimators": n_estimators})
    return y, {n: p[0] for n, p in preds.items()}


def evaluation_reference(predictions_path: str) -> str | None:
    """The best baseline the evaluation itself named (``reference`` of the results.json beside
    ``predictions.csv``: means over its repeats), so every table of a pair names the same one."""
    import json

    path = Path(predictions_path).with_name("results.json")
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("reference")
    except (OSError, ValueError):
        return None


def shown_estimators(y: np.ndarray, preds: dict[str, np.ndarray], reference: str | None = None) -> dict[str, np.ndarray]:
    """The default, the best baseline (``reference`` when given and present, else the baseline
    with the highest out-of-fold auc-euro here) and raw, where present."""
    from acute.estimators.baselines import BASELINES
    from acute.estimators.registry import DEFAULT_ESTIMATOR
    from acute.metrics import METRICS

    score = METRICS["auc_euro_all"].fn
    baselines = [n for n in BASELINES if n in preds]
    best = reference if reference in preds else (max(baselines, key=lambda n: score(preds[n], y)) if baselines else None)
    out, seen = {}, set()
    for label, name in ((f"default ({DEFAULT_ESTIMATOR})", DEFAULT_ESTIMATOR),
                        (f"best baseline ({best})", best), ("raw", "raw")):
        if name in preds and name not in seen:
            out[label] = np.clip(preds[name], 0.0, 1.0)
            seen.add(name)
    return out


def subsample_rows(conf: np.ndarray, y: np.ndarray, sizes, draws: int, rng: np.random.Generator) -> list[str]:
    """One table row per (alpha, n): certified coverage and error on the held-out records."""
    lines = []
    for alpha in ALPHAS:
        empirical = coverage_at_error(conf, y, alpha)
        for n in sizes:
            need = min_calibration_records(alpha, DELTA)
            if n < need:
                lines.append(f"| {n:,} | {alpha:.2f} | too few (< {need}) | - | - | - | {empirical:.3f} |")
                continue
            perms = rng.permuted(np.tile(np.arange(y.size), (draws, 1)), axis=1)
            cal, test = perms[:, :n], perms[:, n:]
            res = ltt_thresholds(conf[cal], y[cal], alpha, DELTA)
            t = np.where(res.valid, res.threshold, np.inf)[:, None]
            trusted = conf[test] >= t
            cov = trusted.mean(axis=1)
            k = trusted.sum(axis=1)
            err = np.where(k > 0, (trusted & ~y[test]).sum(axis=1) / np.maximum(k, 1), np.nan)
            ok = res.valid & (k > 0)
            mean_err = f"{np.nanmean(err[ok]):.3f}" if ok.any() else "-"
            broken = f"{np.mean(err[ok] > alpha):.2f}" if ok.any() else "-"
            lines.append(f"| {n:,} | {alpha:.2f} | {res.valid.mean():.2f} | {cov.mean():.3f} "
                         f"[{np.percentile(cov, 10):.3f}, {np.percentile(cov, 90):.3f}] | {mean_err} | "
                         f"{broken} | {empirical:.3f} |")
    return lines


def run_real(y: np.ndarray, preds: dict[str, np.ndarray], draws: int, seed: int, reference: str | None = None) -> str:
    rng = np.random.default_rng(seed)
    sizes = [n for n in REAL_SIZES if n <= y.size - MIN_TEST] or [y.size // 2]
    lines = []
    for label, conf in shown_estimators(y, preds, reference).items():
        lines += [f"### {label}: AUROC {auroc(conf, y):.2f}, accuracy {y.mean():.2f}, {y.size:,} records", "",
                  "| calibration n | alpha | certified | test coverage mean [p10, p90] | test error "
                  "among trusted | test error > alpha | empirical coverage@alpha (all, no guarantee) |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += subsample_rows(conf, y, sizes, draws, rng)
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=200, help="calibration sets per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("mapie", "binomial"), default="mapie",
                        help="the simulation's backend (real records: binomial, vectorised)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--store", default=None, help="cross-fit the default and the baselines on this store")
    source.add_argument("--predictions", default=None, help="an evaluation's predictions.csv (out of fold)")
    parser.add_argument("--n-estimators", type=int, default=None,
                        help="with --store: trees of the default's forests (default: the probe's)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.store or args.predictions:
        y, preds = (store_predictions(args.store, args.n_estimators, args.seed) if args.store
                    else read_predictions(args.predictions))
        print(f"delta = {DELTA}, Holm over the default grid (acute's binomial test), {args.draws} "
              f"subsamples per cell, seed {args.seed}; source {args.store or args.predictions}"
              + (f", n_estimators {args.n_estimators}" if args.store and args.n_estimators else "") + "\n")
        print(run_real(y, preds, args.draws, args.seed,
                       evaluation_reference(args.predictions) if args.predictions else None))
        print(f"({time.perf_counter() - start:.0f} s)")
        return
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
