"""Held-out evaluation of every calibration estimator: the paper-style results table.

``evaluate_store`` fits the six baselines (on raw confidence) and the six ACUTE variants (on
``layer_means`` plus raw confidence) on a training split, predicts the test split, and writes:

* ``results.md``   Markdown table: rows = estimators; accuracy, smECE, auc-euro low/med/high/all,
                   Brier, AUROC; bootstrap 95% intervals shown as ``0.812 [0.790, 0.830]``.
* ``results.csv``  the same numbers (and intervals) one row per estimator.
* ``results.json`` everything, with the split (seed, test fraction, sizes, id hashes) and
                   ``"complete": true``; it is moved into place last, so it never describes a run
                   that crashed.
* ``split.json``   the train and test ids.
* ``predictions.csv`` id, correct (0/1) and every estimator's confidence on the test records.
* ``euro_curves.png`` (every estimator) and ``reliability_<estimator>.png`` (every estimator, or
  only raw and the best baseline and ACUTE variant with ``reliability="best"``).

``evaluate_predictions`` computes the metric rows from confidences alone (no fitting, no files).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .baselines import BASELINES, check_confidence, check_correct, make_baseline

__all__ = [
    "ACUTE_VARIANTS",
    "ESTIMATORS",
    "EvaluationResult",
    "evaluate_predictions",
    "evaluate_store",
    "best_estimators",
    "make_estimator",
    "results_markdown",
    "split_ids",
]

# name -> ActivationProbe keyword arguments
_VARIANTS: dict[str, dict[str, Any]] = {
    "acute-early": {"view": "mean", "layer": "early"},
    "acute-mid": {"view": "mean", "layer": "mid"},
    "acute-late": {"view": "mean", "layer": "late"},
    "acute-cosine": {"view": "cosine"},
    "acute-pca10": {"view": "pca10"},
    "acute-pca20": {"view": "pca20"},
}
ACUTE_VARIANTS: tuple[str, ...] = tuple(_VARIANTS)
ESTIMATORS: tuple[str, ...] = BASELINES + ACUTE_VARIANTS

# sklearn's default number of cross-validation folds, used when a probe does not say otherwise
_DEFAULT_CV = 5

# (column key, table header, direction: +1 higher is better, -1 lower is better, 0 neither)
TABLE_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("accuracy", "Accuracy", 0),
    ("smece", "smECE ↓", -1),
    ("auc_euro_low", "auc-euro low ↑", +1),
    ("auc_euro_med", "auc-euro med ↑", +1),
    ("auc_euro_high", "auc-euro high ↑", +1),
    ("auc_euro_all", "auc-euro all ↑", +1),
    ("brier", "Brier ↓", -1),
    ("auroc", "AUROC ↑", +1),
)
# metrics with bootstrap intervals
_INTERVAL_KEYS: tuple[str, ...] = ("smece", "auc_euro_all", "brier", "auroc")


# ----------------------------------------------------------------------------- split
def _unit_hash(seed: int, record_id: Any) -> float:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_ids(ids: Sequence[Any], test_fraction: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic train/test split by record id.

    A record is in the test split when ``sha256(f"{seed}:{id}")`` read as a number in [0, 1) is
    below ``test_fraction``. Its side therefore depends only on its own id and the seed: not on the
    order of ``ids``, nor on which other records exist (a store that grows keeps its old split). The
    test share is ``test_fraction`` in expectation (binomial spread around it).

    Returns ``(train_mask, test_mask)``, complementary boolean arrays aligned with ``ids``.
    ``test_fraction`` must be in [0, 1); ids must be unique (``ValueError`` otherwise).
    """
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= float(test_fraction) < 1.0):
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    ids = list(ids)
    if len(set(map(str, ids))) != len(ids):
        seen: set[str] = set()
        dup = next(str(i) for i in ids if str(i) in seen or seen.add(str(i)))
        raise ValueError(f"ids must be unique to split by id; {dup!r} occurs more than once")
    u = np.array([_unit_hash(seed, i) for i in ids], dtype=np.float64)
    test = u < float(test_fraction)
    return ~test, test


def _ids_digest(ids: Iterable[Any]) -> str:
    """sha256 of the sorted ids (one per line): identifies a split's records regardless of order."""
    return hashlib.sha256("\n".join(sorted(map(str, ids))).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- metrics rows
def _as_float(x) -> float:
    return float(np.asarray(x, dtype=np.float64))


def _auc_euro_band(band: str):
    from . import metrics

    def f(conf, correct):
        return metrics.auc_euro(conf, correct, band=band)

    f.__name__ = f"auc_euro_{band}"
    return f


def evaluate_predictions(confidences: Mapping[str, np.ndarray], correct, n_bootstrap: int = 1000,
                         seed: int = 0) -> list[dict]:
    """Metric rows for already-computed confidences on one labelled set (pure: no fitting, no files).

    Returns one dict per entry of ``confidences`` (in its order) with ``estimator``, ``n``,
    ``accuracy`` (of ``correct``; the same for every row), ``smece``, ``auc_euro_low``,
    ``auc_euro_med``, ``auc_euro_high``, ``auc_euro_all``, ``brier``, ``auroc``, and, when
    ``n_bootstrap > 0``, 95% bootstrap intervals ``<metric>_ci_low`` / ``<metric>_ci_high`` for
    ``smece``, ``auc_euro_all``, ``brier`` and ``auroc`` (``acute.metrics.bootstrap`` with the same
    ``seed`` for every estimator, so all rows see the same resamples). Metrics that are undefined
    on the data (e.g. AUROC with one class) are NaN.
    """
    from . import metrics

    if not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be a non-negative int, got {n_bootstrap!r}")
    if not confidences:
        raise ValueError("confidences is empty: nothing to evaluate")
    y = np.asarray(correct)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"correct must be a non-empty 1-d array, got shape {y.shape}")
    y = check_correct(y, y.size)
    fns = {
        "smece": metrics.smece,
        "auc_euro_low": _auc_euro_band("low"),
        "auc_euro_med": _auc_euro_band("med"),
        "auc_euro_high": _auc_euro_band("high"),
        "auc_euro_all": _auc_euro_band("all"),
        "brier": metrics.brier,
        "auroc": metrics.auroc,
    }
    rows = []
    for name, conf in confidences.items():
        c = check_confidence(conf, name=f"confidences[{name!r}]")
        if c.size != y.size:
            raise ValueError(f"confidences[{name!r}] has {c.size} entries but correct has {y.size}")
        row: dict[str, Any] = {"estimator": str(name), "n": int(y.size), "accuracy": float(y.mean())}
        for key, fn in fns.items():
            row[key] = _safe(fn, c, y)
        if n_bootstrap > 0:
            for key in _INTERVAL_KEYS:
                if not math.isfinite(row[key]):
                    row[f"{key}_ci_low"] = row[f"{key}_ci_high"] = float("nan")
                    continue
                iv = metrics.bootstrap(fns[key], c, y, n=int(n_bootstrap), seed=seed)
                row[f"{key}_ci_low"], row[f"{key}_ci_high"] = _as_float(iv.low), _as_float(iv.high)
        rows.append(row)
    return rows


def _safe(fn, conf, y) -> float:
    """``fn(conf, y)`` as a float; NaN where the metric is undefined (a single class for AUROC)."""
    if fn.__name__ == "auroc" and y.min() == y.max():
        return float("nan")
    return _as_float(fn(conf, y))


# ----------------------------------------------------------------------------- estimators
def make_estimator(name: str, *, seed: int = 0, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None):
    """An unfitted estimator by name: a baseline (``BASELINES``) or an ACUTE variant
    (``ACUTE_VARIANTS``: ``ActivationProbe`` with the variant's view/layer, ``random_state=seed``,
    ``n_jobs`` and ``probe_params``; ``None`` values in ``probe_params`` mean "probe default")."""
    if name in BASELINES:
        return make_baseline(name)
    if name not in _VARIANTS:
        raise ValueError(f"unknown estimator {name!r}; choose from {', '.join(ESTIMATORS)}")
    from .probes import ActivationProbe

    kw: dict[str, Any] = dict(_VARIANTS[name])
    kw["random_state"] = seed
    if n_jobs is not None:
        kw["n_jobs"] = n_jobs
    for k, v in (probe_params or {}).items():
        if k in ("view", "layer"):
            raise ValueError(f"probe_params may not set {k!r}: it is fixed by the variant name")
        if v is not None:
            kw[k] = v
    return ActivationProbe(**kw)


def _cv_folds(estimator) -> int:
    cv = estimator.get_params().get("cv", None) if hasattr(estimator, "get_params") else None
    if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
        return int(cv)
    n_splits = getattr(cv, "n_splits", None)
    return int(n_splits) if isinstance(n_splits, (int, np.integer)) else _DEFAULT_CV


def _chosen_layer(probe) -> int | None:
    for attr in ("layer_", "chosen_layer_", "selected_layer_"):
        v = getattr(probe, attr, None)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
    return None


# ----------------------------------------------------------------------------- data
@dataclass
class _Split:
    ids: list
    correct: np.ndarray
    confidence: np.ndarray
    store: Any
    index: np.ndarray

    def layer_means(self) -> np.ndarray:
        return np.asarray(self.store.layer_means[self.index], dtype=np.float32)


def _store_arrays(store, label: str) -> tuple[list, np.ndarray, np.ndarray]:
    ids = list(store.ids)
    n = len(ids)
    if n == 0:
        raise ValueError(f"{label} has no records")
    try:
        correct = check_correct(np.asarray(store.correct), n, name=f"{label}.correct")
        conf = check_confidence(store.raw_confidence, name=f"{label}.raw_confidence")
    except ValueError as e:
        raise ValueError(f"{label}: {e}") from None
    if conf.size != n:
        raise ValueError(f"{label}.raw_confidence has {conf.size} entries but {label}.ids has {n}")
    return ids, correct, conf


def _check_layer_means(store, n: int, label: str) -> tuple[int, ...]:
    shape = tuple(store.layer_means.shape)
    if len(shape) != 3 or shape[0] != n:
        raise ValueError(f"{label}.layer_means must have shape [n={n}, L+1, d], got {shape}")
    return shape[1:]


def _check_probe_inputs(names: Sequence[str], store, test_store, n_store: int, n_test: int,
                        train_correct: np.ndarray, *, seed: int, n_jobs: int | None,
                        probe_params: Mapping[str, Any] | None) -> None:
    """Fail before any fitting when the ACUTE variants cannot run: layer_means of the wrong shape
    (or differing between the stores), fewer training records than CV folds, too few records of a
    class for the stratified layer search, or more PCA components than the hidden size allows."""
    n_train = int(train_correct.size)
    shape = _check_layer_means(store, n_store, "store")
    if test_store is not None:
        t_shape = _check_layer_means(test_store, n_test, "test_store")
        if t_shape != shape:
            raise ValueError(f"store.layer_means is [n, {shape[0]}, {shape[1]}] but test_store's is "
                             f"[n, {t_shape[0]}, {t_shape[1]}]: different models or layers")
    folds = max(_cv_folds(make_estimator(n, seed=seed, n_jobs=n_jobs, probe_params=probe_params))
                for n in names if n in _VARIANTS)
    if n_train < folds:
        raise ValueError(f"the training split has {n_train} records, fewer than the probes' "
                         f"{folds} cross-validation folds; collect more records")
    n_minority = int(min(train_correct.sum(), n_train - train_correct.sum()))
    searched = [n for n in names if _VARIANTS.get(n, {}).get("layer") in ("early", "mid", "late")]
    if searched and n_minority < folds:
        raise ValueError(f"{', '.join(searched)} pick their layer by stratified {folds}-fold "
                         f"cross-validation, which needs at least {folds} correct and {folds} wrong "
                         f"training records; the training split has only {n_minority} of one class")
    hidden = shape[1]
    for n in names:
        k = _VARIANTS.get(n, {}).get("view", "")
        if k.startswith("pca") and int(k[3:]) > min(hidden, n_train):
            raise ValueError(f"{n} needs {k[3:]} principal components but the hidden size is {hidden} "
                             f"and the training split has {n_train} records; leave {n} out of estimators")


# ----------------------------------------------------------------------------- result
@dataclass
class EvaluationResult:
    """What ``evaluate_store`` computed and wrote.

    ``rows``: one metrics dict per estimator (see :func:`evaluate_predictions`, plus ``layer`` and
    ``fit_seconds``); ``predictions``: test-set confidence per estimator; ``test_ids``,
    ``test_correct``; ``split``: seed, test fraction, sizes and id hashes; ``files``: name -> path.
    """

    rows: list[dict]
    predictions: dict[str, np.ndarray]
    test_ids: list
    test_correct: np.ndarray
    split: dict
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)

    def row(self, estimator: str) -> dict:
        """The metrics row of one estimator (``KeyError`` if it was not evaluated)."""
        for r in self.rows:
            if r["estimator"] == estimator:
                return r
        raise KeyError(estimator)

    def to_markdown(self) -> str:
        return results_markdown(self.rows)


def _fmt(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None or not math.isfinite(v):
        return "n/a"
    lo, hi = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
    return f"{v:.3f}"


def results_markdown(rows: Sequence[dict]) -> str:
    """The paper-style Markdown table of metric rows (best value per column in bold; ties bold too).

    Intervals are 95% bootstrap intervals, shown as ``estimate [low, high]``. ACUTE rows with a
    chosen layer show it after the name, e.g. ``acute-late (layer 5)``."""
    header = "| Estimator | " + " | ".join(h for _, h, _ in TABLE_COLUMNS) + " |"
    sep = "|---|" + "|".join("---:" for _ in TABLE_COLUMNS) + "|"
    best: dict[str, float] = {}
    for key, _, direction in TABLE_COLUMNS:
        vals = [r[key] for r in rows if r.get(key) is not None and math.isfinite(r[key])]
        if direction and vals:
            best[key] = max(vals) if direction > 0 else min(vals)
    lines = [header, sep]
    for r in rows:
        name = r["estimator"] + (f" (layer {r['layer']})" if r.get("layer") is not None else "")
        cells = []
        for key, _, _ in TABLE_COLUMNS:
            s = _fmt(r, key)
            if key in best and r.get(key) is not None and round(r[key], 3) == round(best[key], 3):
                s = f"**{s}**"
            cells.append(s)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def best_estimators(rows: Sequence[dict]) -> dict[str, str]:
    """The best baseline and the best ACUTE variant among metric rows: highest ``auc_euro_all``,
    ties broken by lower ``smece``. Returns ``{"baseline": name, "acute": name}`` with only the
    groups that have rows with a finite ``auc_euro_all``."""
    out = {}
    for group, members in (("baseline", BASELINES), ("acute", ACUTE_VARIANTS)):
        cand = [r for r in rows if r["estimator"] in members and math.isfinite(r.get("auc_euro_all", math.nan))]
        if cand:
            best = max(cand, key=lambda r: (r["auc_euro_all"], -r.get("smece", 0.0)))
            out[group] = best["estimator"]
    return out


def _json_clean(x):
    if isinstance(x, dict):
        return {str(k): _json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_clean(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.ndarray):
        return _json_clean(x.tolist())
    if isinstance(x, Path):
        return str(x)
    if x is None or isinstance(x, (str, int, bool)):
        return x
    return str(x)


# ----------------------------------------------------------------------------- main entry
def evaluate_store(store, test_store=None, out_dir: str | os.PathLike | None = None, *,
                   out: str | os.PathLike | None = None,
                   estimators: Sequence[str] | None = None, test_fraction: float = 0.3, seed: int = 0,
                   n_bootstrap: int = 1000, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None, progress: bool = True,
                   reliability: str | Sequence[str] = "all") -> EvaluationResult:
    """Fit every estimator on the training records, predict the test records, report and write.

    ``store`` (and ``test_store``) need ``.ids``, ``.correct``, ``.raw_confidence``,
    ``.layer_means`` [n, L+1, d] and optionally ``.manifest`` (as :class:`acute.store.Store`).
    Without ``test_store`` the records of ``store`` are split by :func:`split_ids`
    (``test_fraction``, ``seed``); with it, all of ``store`` trains and all of ``test_store`` tests.
    ``estimators``: names from ``ESTIMATORS`` (default all twelve). ``probe_params`` go to every
    ``ActivationProbe`` (e.g. ``{"n_estimators": 20}``), ``n_jobs`` too; ``random_state=seed``.
    ``out_dir`` (alias ``out``) receives the files listed in the module docstring;
    ``reliability`` says which estimators get a ``reliability_<name>.png``: ``"all"`` (default),
    ``"best"`` (raw, the best baseline and the best ACUTE variant, see :func:`best_estimators`) or
    a list of names.

    Raises ``ValueError`` when the training split has a single class, has fewer records than the
    probes' cross-validation folds, the test split is empty, or inputs are malformed.
    Returns an :class:`EvaluationResult`.
    """
    from tqdm.auto import tqdm

    if out_dir is None:
        out_dir = out
    elif out is not None and Path(out) != Path(out_dir):
        raise ValueError(f"give out_dir or out, not two different paths ({out_dir!s}, {out!s})")
    if out_dir is None:
        raise ValueError("out_dir is required: where results.md/.csv/.json and plots go")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be a non-negative int, got {n_bootstrap!r}")
    out_dir = Path(out_dir)
    names = list(ESTIMATORS if estimators is None else estimators)
    if not names:
        raise ValueError("estimators is empty: nothing to evaluate")
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"estimators contains duplicates: {names}")
    uses_probes = any(n in _VARIANTS for n in names)
    if isinstance(reliability, str):
        if reliability not in ("all", "best"):
            raise ValueError(f"reliability must be 'all', 'best' or a list of estimator names, got {reliability!r}")
    else:
        reliability = list(reliability)
        missing = [n for n in reliability if n not in names]
        if missing:
            raise ValueError(f"reliability names {missing} are not among the evaluated estimators {names}")

    ids, correct, conf = _store_arrays(store, "store")
    if test_store is None:
        train_mask, test_mask = split_ids(ids, test_fraction=test_fraction, seed=seed)
        idx_tr, idx_te = np.flatnonzero(train_mask), np.flatnonzero(test_mask)
        train = _Split([ids[i] for i in idx_tr], correct[idx_tr], conf[idx_tr], store, idx_tr)
        test = _Split([ids[i] for i in idx_te], correct[idx_te], conf[idx_te], store, idx_te)
        mode = "split"
    else:
        t_ids, t_correct, t_conf = _store_arrays(test_store, "test_store")
        train = _Split(ids, correct, conf, store, np.arange(len(ids)))
        test = _Split(t_ids, t_correct, t_conf, test_store, np.arange(len(t_ids)))
        mode = "test_store"
    n_train, n_test = len(train.ids), len(test.ids)

    if n_test == 0:
        raise ValueError(f"the test split is empty (n={len(ids)}, test_fraction={test_fraction}, "
                         f"seed={seed}); use more records or a larger test_fraction")
    if n_train == 0:
        raise ValueError("the training split is empty")
    if train.correct.min() == train.correct.max():
        raise ValueError(f"the training split has a single class (all {n_train} records "
                         f"{'correct' if train.correct[0] else 'incorrect'}); calibrators need both")
    if uses_probes:
        _check_probe_inputs(names, store, test_store, len(ids), n_test, train.correct,
                            seed=seed, n_jobs=n_jobs, probe_params=probe_params)

    overlap = len(set(map(str, train.ids)) & set(map(str, test.ids)))
    split_info = {
        "mode": mode, "seed": int(seed), "test_fraction": float(test_fraction) if mode == "split" else None,
        "n_train": n_train, "n_test": n_test, "n_overlap_ids": overlap,
        "accuracy_train": float(train.correct.mean()), "accuracy_test": float(test.correct.mean()),
        "train_ids_sha256": _ids_digest(train.ids), "test_ids_sha256": _ids_digest(test.ids),
        "ids_file": "split.json",
    }
    if overlap:
        print(f"warning: {overlap} id(s) occur in both the training and the test records", file=sys.stderr)

    predictions: dict[str, np.ndarray] = {}
    extra: dict[str, dict] = {}
    lm_train = lm_test = None
    bar = tqdm(names, desc="estimators", disable=not progress, file=sys.stderr)
    for name in bar:
        bar.set_postfix_str(name)
        est = make_estimator(name, seed=seed, n_jobs=n_jobs, probe_params=probe_params)
        t0 = time.perf_counter()
        if name in _VARIANTS:
            if lm_train is None:
                lm_train, lm_test = train.layer_means(), test.layer_means()
            est.fit(lm_train, train.correct.astype(bool), confidence=train.confidence)
            p = est.predict_proba(lm_test, confidence=test.confidence)[:, 1]
            layer = _chosen_layer(est) if name in ("acute-early", "acute-mid", "acute-late") else None
        else:
            est.fit(train.confidence, train.correct)
            p = est.predict_proba(test.confidence)[:, 1]
            layer = None
        predictions[name] = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
        extra[name] = {"layer": layer, "fit_seconds": time.perf_counter() - t0}
    bar.close()

    rows = evaluate_predictions(predictions, test.correct, n_bootstrap=n_bootstrap, seed=seed)
    for r in rows:
        r.update(extra[r["estimator"]])

    result = EvaluationResult(rows=rows, predictions=predictions, test_ids=test.ids,
                              test_correct=test.correct.astype(bool), split=split_info, out_dir=out_dir)
    params = {"estimators": names, "n_bootstrap": int(n_bootstrap), "n_jobs": n_jobs,
              "probe_params": dict(probe_params or {}), "interval": "95% percentile bootstrap"}
    manifest = getattr(store, "manifest", None)
    test_manifest = getattr(test_store, "manifest", None) if test_store is not None else None
    if reliability == "all":
        plot_names = names
    elif reliability == "best":
        plot_names = [n for n in names if n in best_estimators(rows).values() or n == "raw"]
    else:
        plot_names = reliability
    result.files = _write_outputs(result, train.ids, params, manifest, test_manifest, plot_names)
    print(f"evaluation of {len(names)} estimators ({n_train} train / {n_test} test records) "
          f"written to {out_dir.resolve()}")
    return result


# ----------------------------------------------------------------------------- writing
def _write_outputs(res: EvaluationResult, train_ids: list, params: dict, manifest, test_manifest,
                   plot_names: Sequence[str]) -> dict[str, Path]:
    """Write every output into a staging folder inside ``out_dir``, then move the files into place
    with ``results.json`` last (an older results.json is removed first), so a crash never leaves a
    results.json that describes files of another run."""
    from .plots import euro_curves, reliability_diagram

    out_dir = res.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = out_dir / f".partial-{uuid.uuid4().hex[:12]}"
    stage.mkdir()
    try:
        names = list(res.predictions)
        y = res.test_correct.astype(int)
        (stage / "results.md").write_text(
            f"Held-out evaluation: {res.split['n_train']} training / {res.split['n_test']} test records "
            f"(test accuracy {res.split['accuracy_test']:.3f}); 95% percentile-bootstrap intervals in brackets "
            "(resampling inflates smECE, so its interval can lie above the estimate).\n\n"
            + res.to_markdown(), encoding="utf-8")
        _write_csv(stage / "results.csv", res.rows)
        with open(stage / "predictions.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["id", "correct", *names])
            for i, rid in enumerate(res.test_ids):
                w.writerow([rid, int(y[i]), *(repr(float(res.predictions[n][i])) for n in names)])
        (stage / "split.json").write_text(json.dumps(_json_clean(
            {**{k: res.split[k] for k in ("mode", "seed", "test_fraction")},
             "train": train_ids, "test": res.test_ids})), encoding="utf-8")
        euro_curves(res.predictions, y, stage / "euro_curves.png",
                    title=f"euro curves ({res.split['n_test']} test records)")
        for n in plot_names:
            reliability_diagram(res.predictions[n], y, stage / f"reliability_{n}.png", title=n)
        files = sorted(p.name for p in stage.iterdir())
        payload = {
            "complete": True,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "split": res.split,
            "params": params,
            "store_manifest": manifest,
            "test_store_manifest": test_manifest,
            "best": best_estimators(res.rows),
            "results": res.rows,
            "files": files + ["results.json"],
        }
        (stage / "results.json").write_text(json.dumps(_json_clean(payload), indent=2), encoding="utf-8")

        final = out_dir / "results.json"
        if final.exists():
            final.unlink()
        for name in files:
            os.replace(stage / name, out_dir / name)
        os.replace(stage / "results.json", final)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {name: out_dir / name for name in files + ["results.json"]}


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else (repr(r[k]) if isinstance(r[k], float) else r[k]))
                        for k in keys})
