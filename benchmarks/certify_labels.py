"""Which Learn-then-Test procedure certifies the most coverage validly, and how many labels it needs.

Usage:
    python benchmarks/certify_labels.py [--draws 1000] [--seed 0] [--backend-draws 200]
    python benchmarks/certify_labels.py --store STORE [--fwer F] [--n-estimators 100] [--draws 200]
    python benchmarks/certify_labels.py --predictions EVALUATION/predictions.csv [--fwer F] [--draws 200]

The comparison (no option): the five procedures of ``acute.metrics.certify`` (``fwer``:
bonferroni_holm, fixed_sequence, quantile_sequence, quantile_holm, split_sequence) and a negative
control, ``uncorrected`` (every grid threshold tested at delta, no correction: invalid), run on
the same ``--draws`` calibration sets per setting, drawn from models whose population precision
and coverage are known exactly (quadrature), so each draw's certified rule "trust iff c >= t" is
scored by the truth: "coverage" is P(c >= t) (0 for a draw that certifies nothing), "broken" the
share of draws whose certified t has population precision below 1 - alpha (the guarantee: at
most delta). The models (``benchmarks/certify_labels.md`` states them and the rule that picks
the default, written before this ran):

* synthetic, n in 200..5000, alpha in 0.05, 0.10, 0.20, delta 0.1: calibrated well-ranked
  (c = sigmoid(3 x), x ~ N(0, 1), P(correct | c) = c), calibrated weakly ranked (sigmoid(1.5 x)),
  overconfident with tied confidences (sigmoid(3 x + 1) rounded to 0.05, P(correct) = sigmoid(3
  x)), and a precision curve that is not monotone (the well-ranked model plus 2% of answers with
  c uniform in [0.97, 0.99], correct with probability 0.3);
* matched to each committed evaluation (``docs/results/evaluations/*/*/results.csv``: accuracy and
  AUROC of acute-pca10-stacked): calibrated c = sigmoid(a x + b) with (a, b) solved for them,
  n in 300, 500, 1000, alpha in 0.05, 0.10, 0.20, delta 0.1;
* the Q-style check: SmolLM2's built-in set matched the same way, n = 800, alpha 0.2, delta 0.05;
* added after the first run, whose negative control was never caught (validity only, outside the
  rule's mean coverage): a flat curve just below the target, P(correct) = 1 - alpha - 0.001 at
  every confidence, where every threshold is a null.

It prints the summary that applies the rule (valid: broken <= delta + 3 Monte-Carlo standard
errors in every setting; then the highest mean coverage), the default procedure through both
backends (``--backend-draws`` calibration sets per row, one ``certify_threshold`` call each),
the labels each procedure needs and one table per model. Vectorised
(``acute.metrics.certify.ltt_thresholds``, the binomial backend; the MAPIE backend places the
same candidates and, by tests, never certifies more).

Real records (``--store`` or ``--predictions``): the out-of-fold P(correct) of the default
estimator (acute-pca10-stacked), the best baseline (by out-of-fold auc-euro) and raw confidence,
either cross-fitted here on a store's records (5 stratified folds grouped by id, one repeat:
``acute.evaluation.crossval``) or read from the ``predictions.csv`` that ``acute evaluate``
writes (columns ``id, correct, <estimator>...``, out of fold). For each size n, ``--draws``
random subsamples of n records are the calibration set (``--fwer``, default the default
procedure; acute's exact binomial test vectorised: ``ltt_thresholds``) and the remaining records
the test set. Columns: the share of draws with a certificate, the test coverage of the certified
threshold (mean [p10, p90], 0 when none), the mean test error among the answers it trusts, the
share of certified draws whose test error exceeds alpha (test-set noise included: the records
are finite), and "empirical", ``coverage_at_error`` on all records: the coverage a threshold
chosen on the records themselves gives, with no guarantee.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acute.errors import InputError
from acute.metrics import auroc, ltt
from acute.metrics.certify import (
    DEFAULT_FWER,
    FWER_METHODS,
    certify_threshold,
    ltt_thresholds,
    min_calibration_records,
)
from acute.metrics.selective import coverage_at_error

ROOT = Path(__file__).resolve().parents[1]
SIZES = (200, 500, 1000, 2000, 5000)
REAL_MATCHED_SIZES = (300, 500, 1000)
ALPHAS = (0.05, 0.10, 0.20)
DELTA = 0.1
PROCEDURES = FWER_METHODS
CONTROL = "uncorrected"
SHORT = {"bonferroni_holm": "Holm (grid)", "fixed_sequence": "fixed seq. (grid)",
         "quantile_sequence": "quantile seq.", "quantile_holm": "quantile Holm",
         "split_sequence": "split seq.", CONTROL: "uncorrected (control)"}

_X = np.linspace(-10.0, 10.0, 400_001)
_W = norm.pdf(_X) / norm.pdf(_X).sum()


# ------------------------------------------------------------------------------ models
class Model(NamedTuple):
    """A confidence with a known truth: ``sample(rng, shape) -> (c, correct)``; the population
    as sorted confidence values ``v`` with the mass and the correct mass at or above each."""

    name: str
    sample: Callable
    v: np.ndarray
    mass_tail: np.ndarray
    good_tail: np.ndarray

    def population(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(coverage, precision) of "trust iff c >= t" for each t (t = inf: nothing, precision 1)."""
        i = np.searchsorted(self.v, t, side="left")
        mass, good = self.mass_tail[i], self.good_tail[i]
        with np.errstate(invalid="ignore", divide="ignore"):
            return mass, np.where(mass > 0, good / mass, 1.0)

    def auroc(self) -> float:
        """P(c of a correct answer > c of a wrong one), ties counted half (quadrature)."""
        pos = -np.diff(self.good_tail)
        neg = -np.diff(self.mass_tail) - pos
        _, first = np.unique(self.v, return_index=True)  # v is sorted: groups of equal values
        pos_g, neg_g = np.add.reduceat(pos, first), np.add.reduceat(neg, first)
        above = np.r_[np.cumsum(pos_g[::-1])[::-1][1:], 0.0]
        return float(np.sum(neg_g * (above + 0.5 * pos_g)) / (pos_g.sum() * neg_g.sum()))


def _model(name: str, sample: Callable, v: np.ndarray, w: np.ndarray, q: np.ndarray) -> Model:
    order = np.argsort(v, kind="stable")
    v, w, q = v[order], w[order], q[order]
    mass = np.r_[np.cumsum(w[::-1])[::-1], 0.0]
    good = np.r_[np.cumsum((w * q)[::-1])[::-1], 0.0]
    return Model(name, sample, v, mass / mass[0], good / mass[0])


def logistic(name: str, a: float, b: float = 0.0, round_to: float | None = None, shift: float = 0.0) -> Model:
    """c = sigmoid(a x + b + shift) (rounded to a multiple of ``round_to``), P(correct) = sigmoid(a x + b)."""
    def conf(x):
        c = expit(a * x + b + shift)
        return np.round(c / round_to) * round_to if round_to else c

    def sample(rng, shape):
        x = rng.standard_normal(shape)
        return conf(x), rng.uniform(size=shape) < expit(a * x + b)

    return _model(name, sample, conf(_X), _W, expit(a * _X + b))


def with_confident_errors(name: str, a: float, share: float, low: float, high: float, p_correct: float) -> Model:
    """The calibrated sigmoid(a x) model plus ``share`` of answers with c uniform in [low, high],
    correct with probability ``p_correct``: a precision curve that is not monotone."""
    def sample(rng, shape):
        x = rng.standard_normal(shape)
        odd = rng.uniform(size=shape) < share
        c = np.where(odd, rng.uniform(low, high, size=shape), expit(a * x))
        return c, rng.uniform(size=shape) < np.where(odd, p_correct, expit(a * x))

    band = np.linspace(low, high, 20_001)
    v = np.r_[expit(a * _X), band]
    w = np.r_[(1 - share) * _W, np.full(band.size, share / band.size)]
    q = np.r_[expit(a * _X), np.full(band.size, p_correct)]
    return _model(name, sample, v, w, q)


def flat(name: str, a: float, p_correct: float) -> Model:
    """c = sigmoid(a x), but P(correct) = ``p_correct`` whatever the confidence: below 1 - alpha,
    every threshold is a null and any certificate is broken (the case multiplicity is about)."""
    def sample(rng, shape):
        return expit(a * rng.standard_normal(shape)), rng.uniform(size=shape) < p_correct

    return _model(name, sample, expit(a * _X), _W, np.full(_X.size, p_correct))


@functools.cache
def matched(name: str, accuracy: float, target_auroc: float) -> Model:
    """The calibrated logistic-normal model with this accuracy and AUROC."""
    def residual(theta):
        m = logistic(name, math.exp(theta[0]), theta[1])
        return [float(m.good_tail[0]) - accuracy, m.auroc() - target_auroc]

    fit = least_squares(residual, x0=[0.5, math.log(accuracy / (1 - accuracy))], xtol=1e-10, ftol=1e-10)
    return logistic(name, math.exp(fit.x[0]), fit.x[1])


def synthetic_models() -> list[Model]:
    return [logistic("calibrated, well-ranked: c = sigmoid(3x)", 3.0),
            logistic("calibrated, weakly ranked: c = sigmoid(1.5x)", 1.5),
            logistic("overconfident, tied: c = sigmoid(3x + 1) rounded to 0.05, P(correct) = sigmoid(3x)",
                     3.0, round_to=0.05, shift=1.0),
            with_confident_errors("not monotone: sigmoid(3x) plus 2% confidently wrong (c in [0.97, 0.99], "
                                  "correct w.p. 0.3)", 3.0, 0.02, 0.97, 0.99, 0.3)]


def evaluations() -> list[tuple[str, int, float, float]]:
    """(model/task, records, accuracy, AUROC) of the default estimator in each committed evaluation."""
    out = []
    for path in sorted((ROOT / "docs" / "results" / "evaluations").glob("*/*/results.csv")):
        with path.open(newline="", encoding="utf-8") as f:
            row = next((r for r in csv.DictReader(f) if r["estimator"] == "acute-pca10-stacked"), None)
        if row is not None:
            out.append((f"{path.parent.parent.name} / {path.parent.name}", int(row["n"]),
                        float(row["accuracy"]), float(row["auroc"])))
    return out


# -------------------------------------------------------------------------- the comparison
def uncorrected(c: np.ndarray, y: np.ndarray, alpha: float, delta: float) -> np.ndarray:
    """The negative control: the lowest grid threshold whose own p-value <= delta (no correction)."""
    grid = np.arange(100)[::-1] / 100.0
    trusted, wrong = ltt.grid_counts(c, y.astype(np.int64), grid)
    passed = ltt.binomial_p(trusted, wrong, alpha) <= delta
    valid, j = ltt.lowest_rejected(np.broadcast_to(grid, passed.shape), passed)
    return np.where(valid, grid[j], np.nan)


class Cell(NamedTuple):
    certified: float  # share of draws with a certificate
    coverage: float  # mean population coverage of the certified rule (0 where none)
    broken: float  # share of draws whose certified rule has population precision < 1 - alpha


def setting(model: Model, n: int, alpha: float, delta: float, draws: int,
            rng: np.random.Generator) -> dict[str, Cell]:
    """Every procedure (and the control) on the same ``draws`` calibration sets of n records."""
    c, y = model.sample(rng, (draws, n))
    out = {}
    for proc in (*PROCEDURES, CONTROL):
        t = (uncorrected(c, y, alpha, delta) if proc == CONTROL
             else ltt_thresholds(c, y, alpha, delta, fwer=proc).threshold)
        certified = ~np.isnan(t)
        cov, prec = model.population(np.where(certified, t, np.inf))
        out[proc] = Cell(float(certified.mean()), float(cov.mean()),
                         float(np.mean(certified & (prec < 1 - alpha))))
    return out


def bound(delta: float, draws: int) -> float:
    """The rule's validity bound: delta + 3 Monte-Carlo standard errors."""
    return delta + 3 * math.sqrt(delta * (1 - delta) / draws)


def oracle(model: Model, alpha: float) -> float:
    """The most coverage any threshold has at population precision >= 1 - alpha."""
    ok = model.good_tail[:-1] >= (1 - alpha) * model.mass_tail[:-1] - 1e-15
    return float(model.mass_tail[:-1][ok].max()) if ok.any() else 0.0


def table(model: Model, rows: list[tuple[int, float, float, dict[str, Cell]]], draws: int) -> list[str]:
    procs = (*PROCEDURES, CONTROL)
    lines = [f"### {model.name} (AUROC {model.auroc():.3f}, accuracy {model.good_tail[0]:.3f})", "",
             "| n | alpha | delta | oracle | " + " | ".join(SHORT[p] for p in procs) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(procs)]
    for n, alpha, delta, cells in rows:
        over = bound(delta, draws)
        fmt = [f"{cells[p].coverage:.3f} · {cells[p].certified:.2f} · "
               + (f"**{cells[p].broken:.3f}**" if cells[p].broken > over else f"{cells[p].broken:.3f}")
               for p in procs]
        lines.append(f"| {n:,} | {alpha:.2f} | {delta:g} | {oracle(model, alpha):.3f} | " + " | ".join(fmt) + " |")
    return lines + [""]


def summary(results: list[tuple[str, Model, int, float, float, dict[str, Cell]]], draws: int) -> tuple[list[str], str]:
    """The rule of certify_labels.md applied: valid everywhere, then the highest mean coverage."""
    lines = ["| procedure | mean coverage, all settings | synthetic | matched to the evaluations "
             "| mean share certified | largest broken share | settings over the bound | flat (added): "
             "largest broken share, settings over the bound |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    stats = {}
    registered = [r for r in results if r[0] != "added"]
    added = [r for r in results if r[0] == "added"]
    for proc in (*PROCEDURES, CONTROL):
        cov = np.array([r[5][proc].coverage for r in registered])
        syn = np.array([r[0] == "synthetic" for r in registered])
        over = sum(r[5][proc].broken > bound(r[4], draws) for r in registered)
        worst = max(r[5][proc].broken for r in registered)
        over_added = sum(r[5][proc].broken > bound(r[4], draws) for r in added)
        worst_added = max((r[5][proc].broken for r in added), default=float("nan"))
        stats[proc] = (cov.mean(), over, over_added)
        lines.append(f"| {SHORT[proc]} | {cov.mean():.4f} | {cov[syn].mean():.4f} | {cov[~syn].mean():.4f} | "
                     f"{np.mean([r[5][proc].certified for r in registered]):.3f} | {worst:.3f} | {over} | "
                     f"{worst_added:.3f}, {over_added} |")
    valid = sorted((p for p in PROCEDURES if stats[p][1] == 0), key=lambda p: -stats[p][0])
    if not valid:
        return lines, "no procedure is valid in every setting"
    best = valid[0]
    close = [p for p in valid[1:] if stats[best][0] - stats[p][0] <= 0.005]
    verdict = (f"valid in every setting: {', '.join(valid)}; the most mean coverage: {best} "
               f"({stats[best][0]:.4f})")
    if close:
        verdict += (f"; within 0.005 of it: {', '.join(close)} (rule 3: the one needing fewer "
                    f"assumptions decides)")
    broken_added = [p for p in (*PROCEDURES, CONTROL) if stats[p][2]]
    verdict += (f". On the flat curves added after the first run, over the bound: "
                f"{', '.join(broken_added) if broken_added else 'none'}")
    return lines, verdict


def labels_needed(results, procs: tuple[str, ...]) -> list[str]:
    """The fewest calibration records (of the sizes run) that certify in at least half / 90% of
    draws, per synthetic model and alpha."""
    lines = ["| model | alpha | " + " | ".join(f"{SHORT[p]}: n for 50% / 90% certified" for p in procs) + " |",
             "|---|---:|" + "---:|" * len(procs)]
    groups: dict[tuple[str, float], list] = {}
    for kind, model, n, alpha, delta, cells in results:
        if kind == "synthetic":
            groups.setdefault((model.name.split(":")[0], alpha), []).append((n, cells))
    for (name, alpha), rows in groups.items():
        cell = []
        for p in procs:
            half = next((f"{n:,}" for n, c in rows if c[p].certified >= 0.5), f"> {rows[-1][0]:,}")
            most = next((f"{n:,}" for n, c in rows if c[p].certified >= 0.9), f"> {rows[-1][0]:,}")
            cell.append(f"{half} / {most}")
        lines.append(f"| {name} | {alpha:.2f} | " + " | ".join(cell) + " |")
    return lines


def backends(plan, draws: int, rng: np.random.Generator) -> list[str]:
    """The default procedure through both backends, one call per calibration set (MAPIE is not
    vectorised): MAPIE's p-value counts ceil(N * risk) errors, one too many when the float product
    lands an ulp above the count, and the sequence stops there."""
    wanted = [("calibrated, well-ranked", 500, 0.10, DELTA), ("calibrated, well-ranked", 2000, 0.05, DELTA),
              ("calibrated, weakly ranked", 1000, 0.20, DELTA),
              ("matched to qwen2.5-coder-1.5b-instruct / apigen", 500, 0.10, DELTA),
              ("Q-style check", 800, 0.20, 0.05)]
    lines = [f"| model | n | alpha | delta | {DEFAULT_FWER}, binomial: coverage · certified · broken | "
             f"{DEFAULT_FWER}, mapie: coverage · certified · broken |", "|---|---:|---:|---:|---:|---:|"]
    for prefix, n, alpha, delta in wanted:
        model = next(m for _, m, *_ in plan if m.name.startswith(prefix))
        c, y = model.sample(rng, (draws, n))
        cells = []
        for backend in ("binomial", "mapie"):
            t = np.array([np.nan if (cert := certify_threshold(c[i], y[i], alpha, delta, backend=backend)).threshold
                          is None else cert.threshold for i in range(draws)])
            cov, prec = model.population(np.where(np.isnan(t), np.inf, t))
            cells.append(f"{cov.mean():.3f} · {np.mean(~np.isnan(t)):.2f} · "
                         f"{np.mean(~np.isnan(t) & (prec < 1 - alpha)):.3f}")
        lines.append(f"| {model.name.split(':')[0].split(' (')[0]} | {n:,} | {alpha:.2f} | {delta:g} | "
                     + " | ".join(cells) + " |")
    return lines


def run(draws: int, seed: int, backend_draws: int = 200) -> str:
    rng = np.random.default_rng(seed)
    results, lines = [], []
    plan = [("synthetic", m, SIZES, ALPHAS, DELTA) for m in synthetic_models()]
    for name, records, acc, auc in evaluations():
        plan.append(("matched", matched(f"matched to {name} ({records:,} records)", acc, auc),
                     REAL_MATCHED_SIZES, ALPHAS, DELTA))
        if name == "smollm2-135m-instruct / default":
            plan.append(("matched", matched(f"Q-style check: matched to {name}", acc, auc), (800,), (0.2,), 0.05))
    # added after the first run, whose negative control was never caught: a curve flat just below
    # the target, where every threshold is a null (validity only; no coverage to be had)
    plan += [("added", flat(f"flat (added after the first run): P(correct) = {1 - a - 0.001:.3f} at every "
                            f"confidence c = sigmoid(3x), alpha {a:.2f}", 3.0, 1 - a - 0.001), SIZES, (a,), DELTA)
             for a in ALPHAS]
    for kind, model, sizes, alphas, delta in plan:
        rows = []
        for alpha in alphas:
            for n in sizes:
                start = time.perf_counter()
                cells = setting(model, n, alpha, delta, draws, rng)
                rows.append((n, alpha, delta, cells))
                results.append((kind, model, n, alpha, delta, cells))
                print(f"{model.name[:50]}: n {n}, alpha {alpha}: {time.perf_counter() - start:.1f} s",
                      file=sys.stderr)
        lines += table(model, rows, draws)
    head, verdict = summary(results, draws)
    start = time.perf_counter()
    backend_lines = backends(plan, backend_draws, rng) if backend_draws else []
    print(f"backends: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return "\n".join(["## Summary", "", *head, "", f"By the rule: {verdict}.", "",
                      f"## The default through each backend ({backend_draws} calibration sets per row)", "",
                      *backend_lines, "",
                      "## Labels needed (synthetic models)", "",
                      *labels_needed(results, PROCEDURES), "", "## Per setting", "",
                      "Each cell: mean coverage · share certified · share broken (bold: above the "
                      f"bound delta + 3 standard errors, {bound(DELTA, draws):.3f} at delta 0.1, "
                      f"{bound(0.05, draws):.3f} at 0.05).", "", *lines])


# ----------------------------------------------------------------------- real records
REAL_SIZES = (100, 200, 500, 1000, 1500)
REAL_ALPHAS = (0.05, 0.10)
MIN_TEST = 300  # records kept out of every calibration subsample, to measure test coverage

def read_predictions(path: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(correct, {estimator: out-of-fold P(correct)}) from an evaluation's predictions.csv, or a
    report's committed predictions.csv.gz (repeat 0)."""
    from acute.evaluation import read_predictions as read_evaluation
    from acute.evaluation.writer import COMMITTED_PREDICTIONS

    if Path(path).name not in ("predictions.csv", COMMITTED_PREDICTIONS):
        raise InputError(f"{path}: --predictions takes an evaluation's predictions.csv or the "
                         f"{COMMITTED_PREDICTIONS} a report keeps beside its tables (docs/results/evaluations)")
    _, y, preds = read_evaluation(Path(path).parent)
    return y > 0, {n: v[0] for n, v in preds.items()}


def store_predictions(path: str, n_estimators: int | None, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(correct, {estimator: out-of-fold P(correct)}) of the default and every baseline,
    cross-fitted on the store's records (5 folds, one repeat)."""
    from acute.estimators.baselines import BASELINES
    from acute.estimators.registry import DEFAULT_ESTIMATOR
    from acute.evaluation.crossval import cross_val_predictions, cv_folds, inputs_for
    from acute.store import open_store

    store = open_store(path)
    names = [DEFAULT_ESTIMATOR, *BASELINES]
    y = np.asarray(store.correct).astype(bool)
    folds = cv_folds(store.ids, y, 5, 1, seed)
    preds = cross_val_predictions(names, inputs_for(store, names), y, folds,
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


def subsample_rows(conf: np.ndarray, y: np.ndarray, sizes, draws: int, rng: np.random.Generator,
                   fwer: str = DEFAULT_FWER) -> list[str]:
    """One table row per (alpha, n): certified coverage and error on the held-out records."""
    lines = []
    for alpha in REAL_ALPHAS:
        empirical = coverage_at_error(conf, y, alpha)
        for n in sizes:
            need = min_calibration_records(alpha, DELTA, fwer=fwer)
            if n < need:
                lines.append(f"| {n:,} | {alpha:.2f} | too few (< {need}) | - | - | - | {empirical:.3f} |")
                continue
            perms = rng.permuted(np.tile(np.arange(y.size), (draws, 1)), axis=1)
            cal, test = perms[:, :n], perms[:, n:]
            res = ltt_thresholds(conf[cal], y[cal], alpha, DELTA, fwer=fwer)
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


def run_real(y: np.ndarray, preds: dict[str, np.ndarray], draws: int, seed: int, reference: str | None = None,
             fwer: str = DEFAULT_FWER) -> str:
    rng = np.random.default_rng(seed)
    sizes = [n for n in REAL_SIZES if n <= y.size - MIN_TEST] or [y.size // 2]
    lines = []
    for label, conf in shown_estimators(y, preds, reference).items():
        lines += [f"### {label}: AUROC {auroc(conf, y):.2f}, accuracy {y.mean():.2f}, {y.size:,} records", "",
                  "| calibration n | alpha | certified | test coverage mean [p10, p90] | test error "
                  "among trusted | test error > alpha | empirical coverage@alpha (all, no guarantee) |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += subsample_rows(conf, y, sizes, draws, rng, fwer)
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=None,
                        help="calibration sets per setting (default 1000; real records 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend-draws", type=int, default=200,
                        help="calibration sets per row of the MAPIE-versus-binomial table (0: skip it)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--store", default=None, help="cross-fit the default and the baselines on this store")
    source.add_argument("--predictions", default=None, help="an evaluation's predictions.csv, or predictions.csv.gz beside a report's tables (out of fold)")
    parser.add_argument("--n-estimators", type=int, default=None,
                        help="with --store: trees of the default's forests (default: the probe's)")
    parser.add_argument("--fwer", choices=PROCEDURES, default=DEFAULT_FWER,
                        help="with --store or --predictions: the procedure (default %(default)s)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.store or args.predictions:
        draws = 200 if args.draws is None else args.draws
        y, preds = (store_predictions(args.store, args.n_estimators, args.seed) if args.store
                    else read_predictions(args.predictions))
        print(f"delta = {DELTA}, {args.fwer} (acute's binomial test), {draws} subsamples per cell, "
              f"seed {args.seed}; source {args.store or args.predictions}"
              + (f", n_estimators {args.n_estimators}" if args.store and args.n_estimators else "") + "\n")
        print(run_real(y, preds, draws, args.seed,
                       evaluation_reference(args.predictions) if args.predictions else None, args.fwer))
        print(f"({time.perf_counter() - start:.0f} s)")
        return
    draws = 1000 if args.draws is None else args.draws
    print(f"{draws} calibration sets per setting, seed {args.seed}, acute's binomial backend; "
          f"min_calibration_records at delta 0.1, alpha 0.05 / 0.10 / 0.20: "
          + "; ".join(f"{p} " + " / ".join(str(min_calibration_records(a, DELTA, fwer=p)) for a in ALPHAS)
                      for p in PROCEDURES) + "\n")
    print(run(draws, args.seed, args.backend_draws))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
