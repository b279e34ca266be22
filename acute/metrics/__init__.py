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
``smooth`` (smECE), ``kde`` (KDE-ECE), ``utility`` (euro, auc-euro: the selective-trust utility),
``resampling`` (bootstrap, intervals of draws), ``specs`` (the results tables' columns and the
ranking rule), ``intervals`` (bias-shifted intervals, the corrected resampled t-test, Holm),
``selective`` (risk-coverage, AURC), ``certify`` (Learn-then-Test thresholds), ``ltt`` (its
procedures in numpy), ``certify_mapie`` (its MAPIE backend).

The names below are the package's public API (docs/api.md); the helpers the evaluation builds on
(``percentile_interval``, the ranking rule, the paired tests) are imported from their module.
"""

from __future__ import annotations

from .binned import auroc, brier, ece, ks_cal, nll
from .kde import kde_ece, kde_ece_bandwidth
from .resampling import (DEFAULT_N_BOOTSTRAP, Interval, bootstrap, bootstrap_indices, metric_over_resamples,
                         paired_bootstrap, resample_indices)
from .smooth import SmoothReliability, smece, smece_bandwidth, smooth_reliability
from .specs import METRIC_SPECS, METRICS, MetricSpec
from .utility import BANDS, EURO_GRID, auc_euro, euro, euro_curve

__all__ = [
    "BANDS",
    "DEFAULT_N_BOOTSTRAP",
    "EURO_GRID",
    "Interval",
    "METRICS",
    "METRIC_SPECS",
    "MetricSpec",
    "SmoothReliability",
    "auc_euro",
    "auroc",
    "bootstrap",
    "bootstrap_indices",
    "brier",
    "ece",
    "euro",
    "euro_curve",
    "kde_ece",
    "kde_ece_bandwidth",
    "ks_cal",
    "metric_over_resamples",
    "nll",
    "paired_bootstrap",
    "resample_indices",
    "smece",
    "smece_bandwidth",
    "smooth_reliability",
]
