"""Calibration and selective-trust metrics over ``(confidence, correct)`` arrays.

Every metric is a plain function of two 1-D arrays of the same length:

* ``confidence``: floats in ``[0, 1]`` (the estimated probability that the answer is correct);
* ``correct``: booleans or 0/1 numbers (whether the answer was actually correct).

Bad input (empty arrays, different lengths, NaN, confidences outside ``[0, 1]``, labels other
than 0/1, arrays that are not 1-D) raises a ``ValueError`` naming the offending argument.

Metrics
-------
``ece``            binned expected calibration error (equal-width bins).
``smece``          smooth ECE of Blasiok & Nakkiran (2023); ``smece_bandwidth`` gives its sigma*,
                   ``smooth_reliability`` the smoothed reliability curve and density behind it.
``kde_ece``        KDE-based ECE of Zhang, Kailkhura & Han (2020, Mix-n-Match), binary case.
``ks_cal``         Kolmogorov-Smirnov calibration error of Gupta et al. (2021).
``brier``, ``nll`` proper scoring rules; ``auroc`` ranking of correct above wrong answers.
``euro``           oracle-normalised expected utility at risk level ``u_ca`` (ACUTE);
                   ``euro_curve`` over a grid of risk levels, ``auc_euro`` its mean over a band.
``bootstrap``, ``paired_bootstrap``  percentile intervals for any of the above;
                   ``metric_over_resamples`` a metric on many resamples at once.

Modules: ``common`` (input checks, binning helpers), ``binned`` (ECE, KS-Cal, Brier, NLL, AUROC),
``smooth`` (smECE), ``kde`` (KDE-ECE), ``euro`` (euro, auc-euro), ``resampling`` (bootstrap,
intervals of draws), ``specs`` (the results tables' columns and the ranking rule), ``intervals``
(bias-shifted intervals, the corrected resampled t-test, Holm), ``selective`` (risk-coverage,
AURC), ``certify`` (Learn-then-Test thresholds).
"""

from __future__ import annotations

from .binned import NLL_EPS, auroc, brier, ece, ks_cal, nll
from .common import validate_inputs
from .euro import BANDS, EURO_GRID, auc_euro, euro, euro_curve
from .intervals import TTest, bias_shifted_interval, bootstrap_p_value, corrected_t_test, fold_differences, holm
from .kde import kde_ece, kde_ece_bandwidth
from .resampling import (DEFAULT_N_BOOTSTRAP, Interval, bootstrap, bootstrap_indices, cluster_bootstrap_indices, metric_over_resamples,
                         paired_bootstrap, percentile_interval, resample_indices)
from .smooth import SmoothReliability, smece, smece_bandwidth, smooth_reliability
from .specs import METRIC_SPECS, METRICS, RANKING, MetricSpec, best_of, best_value, ranked, ranking_key

__all__ = [
    "BANDS",
    "DEFAULT_N_BOOTSTRAP",
    "EURO_GRID",
    "NLL_EPS",
    "Interval",
    "METRICS",
    "METRIC_SPECS",
    "MetricSpec",
    "RANKING",
    "SmoothReliability",
    "TTest",
    "auc_euro",
    "auroc",
    "best_of",
    "best_value",
    "bias_shifted_interval",
    "bootstrap",
    "bootstrap_indices",
    "bootstrap_p_value",
    "brier",
    "cluster_bootstrap_indices",
    "corrected_t_test",
    "ece",
    "euro",
    "euro_curve",
    "fold_differences",
    "holm",
    "kde_ece",
    "kde_ece_bandwidth",
    "ks_cal",
    "metric_over_resamples",
    "nll",
    "paired_bootstrap",
    "percentile_interval",
    "resample_indices",
    "ranked",
    "ranking_key",
    "smece",
    "smece_bandwidth",
    "smooth_reliability",
    "validate_inputs",
]
