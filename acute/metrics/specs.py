"""What every results table reports: one spec per column (its direction included), and the one
rule that says which estimator is best."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .binned import auroc, brier
from .utility import AUC_EURO_BANDS
from .selective import aurc, coverage_at_10pct, coverage_at_5pct, e_aurc
from .smooth import smece

__all__ = ["METRICS", "METRIC_SPECS", "RANKING", "MetricSpec", "best_of", "best_value", "ranked", "ranking_key"]

class MetricSpec(NamedTuple):
    """One column of acute's results tables: ``name`` (the key in metric rows), ``header``
    (table heading, with its arrow), ``direction`` (+1 higher is better, -1 lower is better,
    0 neither), ``fn`` (``fn(confidence, correct) -> float``; None for ``accuracy``, which is
    the mean of ``correct``), ``digits`` for :meth:`format`; ``interval``: tables give it a
    bootstrap interval; ``paired``: tables give every row its paired difference to the
    reference row (``diff_<name>`` with intervals); ``table``: ``"calibration"`` (the main
    results table) or ``"selective"`` (the selective-prediction table beside it)."""

    name: str
    header: str
    direction: int
    fn: Callable[[np.ndarray, np.ndarray], float] | None
    digits: int = 3
    interval: bool = False
    paired: bool = False
    table: str = "calibration"

    def format(self, value: float | None) -> str:
        """``value`` with ``digits`` decimals, or ``n/a`` when missing or not finite."""
        if value is None or not np.isfinite(value):
            return "n/a"
        return f"{value:.{self.digits}f}"



#: The columns of every results table (evaluation, reproduction report, ``acute train``), in order:
#: calibration and expected utility first, then selective prediction (Geifman et al. 2019; E-AURC's
#: difference between two rows equals AURC's, so only AURC is paired).
METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("accuracy", "Accuracy", 0, None),
    MetricSpec("smece", "smECE ↓", -1, smece, interval=True, paired=True),
    MetricSpec("auc_euro_low", "auc-euro low ↑", +1, AUC_EURO_BANDS["low"]),
    MetricSpec("auc_euro_med", "auc-euro med ↑", +1, AUC_EURO_BANDS["med"]),
    MetricSpec("auc_euro_high", "auc-euro high ↑", +1, AUC_EURO_BANDS["high"]),
    MetricSpec("auc_euro_all", "auc-euro all ↑", +1, AUC_EURO_BANDS["all"], interval=True, paired=True),
    MetricSpec("brier", "Brier ↓", -1, brier, interval=True),
    MetricSpec("auroc", "AUROC ↑", +1, auroc, interval=True),
    MetricSpec("aurc", "AURC ↓", -1, aurc, interval=True, paired=True, table="selective"),
    MetricSpec("e_aurc", "E-AURC ↓", -1, e_aurc, interval=True, table="selective"),
    MetricSpec("coverage_05", "coverage at 5% error ↑", +1, coverage_at_5pct, interval=True, paired=True,
               table="selective"),
    MetricSpec("coverage_10", "coverage at 10% error ↑", +1, coverage_at_10pct, interval=True, paired=True,
               table="selective"),
)
METRICS: dict[str, MetricSpec] = {m.name: m for m in METRIC_SPECS}

#: The rule behind every "best" acute names (the best baseline of an evaluation, ``auto``'s pick,
#: the learning curve's best baseline, the report's best estimators): the highest auc-euro over
#: all risk levels, ties broken by the lower smECE (each metric read in its spec's direction).
RANKING: tuple[str, ...] = ("auc_euro_all", "smece")


def ranking_key(scores: Mapping[str, float], digits: int | None = None) -> tuple[float, ...]:
    """``scores`` (metric name -> value) as a key under which a better estimator is larger:
    each metric of :data:`RANKING` times its spec's ``direction``. With ``digits`` the first
    metric is rounded first, so values equal to that precision tie and the next one decides.
    A missing tie-breaker counts as 0."""
    key = []
    for i, name in enumerate(RANKING):
        value = float(scores[name]) if i == 0 else float(scores.get(name, 0.0))
        if i == 0 and digits is not None:
            value = round(value, digits)
        key.append(METRICS[name].direction * value)
    return tuple(key)


def ranked(names: Sequence[str], scores: Callable[[str], Mapping[str, float]],
           digits: int | None = None) -> list[str]:
    """``names`` best first by :func:`ranking_key` of ``scores(name)`` (ties keep their order)."""
    return sorted(names, key=lambda n: ranking_key(scores(n), digits), reverse=True)


def best_of(names: Sequence[str], scores: Callable[[str], Mapping[str, float]]) -> str:
    """The best of ``names`` by :func:`ranking_key` of ``scores(name)`` (the first of equals)."""
    return max(names, key=lambda n: ranking_key(scores(n)))


def best_value(values: Sequence[float], direction: int) -> float | None:
    """The best of ``values`` in ``direction`` (+1: the largest, -1: the smallest); None when
    the column has no direction or no value (what a results table prints in bold)."""
    values = [v for v in values if v is not None and np.isfinite(v)]
    if not direction or not values:
        return None
    return max(values) if direction > 0 else min(values)
