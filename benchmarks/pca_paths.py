#!/usr/bin/env python
"""The PCA views' two paths on a real store: the n x n Gram matrix (taken when a fold has fewer
training records than dimensions) against the d x d covariance, both for the default probe on
one outer fold (issue 28). Prints the largest difference of the test predictions and each fit's
seconds.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/pca_paths.py --store runs/evidence/qwen2.5-coder-1.5b-instruct/triviaqa/store
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from acute.estimators.inputs import Inputs  # noqa: E402 (after the path: this checkout's acute)


def covariance_components(x: np.ndarray, m: int):
    """The covariance path of :func:`acute.estimators.features.top_components`, whatever n."""
    from scipy.linalg import eigh

    mean = x.mean(axis=0)
    xc = x - mean
    cov = xc.T @ xc / max(len(x) - 1, 1)
    d = x.shape[1]
    w, v = eigh(cov, subset_by_index=[d - m, d - 1])
    w, v = w[::-1], v[:, ::-1].T.copy()
    v *= np.where(v[np.arange(m), np.abs(v).argmax(axis=1)] < 0, -1.0, 1.0)[:, None]
    return mean, v, np.clip(w, 0.0, None) / float(np.trace(cov))


def main(argv=None) -> int:
    import acute.estimators.features as features
    from acute.estimators import DEFAULT_ESTIMATOR, make_estimator
    from acute.evaluation.crossval import cv_folds
    from acute.store import open_store

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    store = open_store(args.store)
    X = np.asarray(store.layer_means, dtype=np.float32)
    y = np.asarray(store.correct).astype(np.int64)
    c = np.asarray(store.raw_confidence, dtype=np.float64)
    tr, te = cv_folds(store.ids, y, n_splits=5, n_repeats=1, seed=args.seed)[0][0]

    def fit():
        t0 = time.perf_counter()
        est = make_estimator(DEFAULT_ESTIMATOR, n_jobs=1).fit(Inputs.of(X[tr], c[tr]), y[tr])
        return est.predict_proba(Inputs.of(X[te], c[te]))[:, 1], time.perf_counter() - t0

    gram, t_gram = fit()
    features.top_components = covariance_components
    cov, t_cov = fit()
    print(f"{args.store}: {len(tr)} training / {len(te)} test records of {X.shape[1]} layers x {X.shape[2]} "
          f"dimensions; {DEFAULT_ESTIMATOR}: max |P(Gram) - P(covariance)| = {np.abs(gram - cov).max():.2e}; "
          f"fit and predict {t_gram:.1f} s (Gram) vs {t_cov:.1f} s (covariance), one thread")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
