"""PNG figures for calibration and selective trust: reliability diagrams and euro curves.

Figures are drawn with matplotlib's Agg canvas directly (no pyplot, no global backend
switch), so they work headless and do not disturb an interactive session.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from acute.metrics import (
    BANDS,
    EURO_GRID,
    auc_euro,
    euro_curve,
    smooth_reliability,
    validate_inputs,
)
from .errors import InputError

__all__ = ["euro_curves", "learning_curves", "reliability_diagram"]

_BAND_COLOURS = {"low": "#d9f0d3", "med": "#fff2cc", "high": "#f4cccc"}
_BAND_LABELS = {"low": "low risk", "med": "medium risk", "high": "high risk"}


def _png_path(path: str | Path) -> Path:
    """``path`` as a Path ending in .png whose parent folder exists (created if needed)."""
    if not isinstance(path, (str, Path)):
        raise InputError(f"path: expected a str or Path, got {type(path).__name__}")
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise InputError(f"path: figures are written as PNG; expected a .png file, got {out}")
    if out.exists() and out.is_dir():
        raise InputError(f"path: {out} is a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _save(fig: Figure, out: Path) -> Path:
    from acute._util import atomic_path

    FigureCanvasAgg(fig)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return out


def reliability_diagram(
    confidence: ArrayLike,
    correct: ArrayLike,
    path: str | Path,
    title: str | None = None,
) -> Path:
    """Smoothed reliability diagram (relplot style) written as a PNG to ``path``.

    Draws the smoothed calibration curve E[correct | confidence] at the smooth-ECE bandwidth
    sigma* (:func:`acute.metrics.smooth_reliability`), the diagonal of perfect calibration, and
    the kernel density of the confidences shaded along the bottom, plus a rug of up to 200
    records (correct above the axis, wrong below). The legend gives smECE, sigma* and n.

    Returns the written path (a ``Path``). Raises ``ValueError`` for bad ``confidence`` /
    ``correct`` (see :func:`acute.metrics.validate_inputs`) or a ``path`` not ending in .png;
    the parent folder is created if missing.
    """
    conf, y = validate_inputs(confidence, correct)
    out = _png_path(path)
    rel = smooth_reliability(conf, y, grid=400)

    fig = Figure(figsize=(5.5, 5.5))
    ax = fig.add_subplot()
    t = rel.grid
    ax.plot([0, 1], [0, 1], "k--", lw=1, alpha=0.4, label="perfect calibration")
    height = 0.25 * rel.density / max(float(rel.density.max()), 1e-12)
    ax.fill_between(t, 0.0, height, color="grey", alpha=0.3, lw=0, label="confidence density")
    ax.plot(
        t,
        np.clip(rel.curve, 0.0, 1.0),
        color="tab:red",
        lw=2.2,
        label=f"smoothed (smECE {rel.smece:.3f}, $\\sigma^*$ {rel.sigma:.3f}, n={conf.size})",
    )
    idx = np.random.default_rng(0).permutation(conf.size)[:200]
    ax.vlines(conf[idx][y[idx]], 0.0, 0.02, color="black", lw=0.6)
    ax.vlines(conf[idx][~y[idx]], -0.02, 0.0, color="black", lw=0.6, clip_on=False)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_aspect("equal")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy (smoothed)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small", frameon=False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return _save(fig, out)


def euro_curves(
    confidences: Mapping[str, ArrayLike],
    correct: ArrayLike,
    path: str | Path,
    title: str | None = None,
) -> Path:
    """euro over the risk level u_ca for several estimators on one figure, written as a PNG.

    ``confidences`` maps a display name to that estimator's confidences on the same records
    (same order as ``correct``). Each curve is :func:`acute.metrics.euro_curve` on
    :data:`acute.metrics.EURO_GRID`; the low / medium / high risk bands are shaded, and the
    legend gives each estimator's auc-euro (grid version, all risk levels).

    Returns the written path. Raises ``ValueError`` for an empty mapping, a non-string name,
    bad confidences (named ``confidences[<name>]``), bad ``correct`` or a ``path`` not ending in
    .png.
    """
    if not isinstance(confidences, Mapping) or len(confidences) == 0:
        raise InputError("confidences: expected a non-empty mapping {name: confidence array}")
    checked: dict[str, np.ndarray] = {}
    y = None
    for name, conf in confidences.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"confidences: names must be non-empty strings, got {name!r}")
        checked[name], y = validate_inputs(conf, correct, f"confidences[{name!r}]")
    out = _png_path(path)

    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    for band, colour in _BAND_COLOURS.items():
        lo, hi = BANDS[band][1]
        ax.axvspan(lo, hi, color=colour, alpha=0.6, lw=0)
        ax.text((lo + hi) / 2, 0.02, _BAND_LABELS[band], ha="center", va="bottom",
                fontsize="small", color="0.35")
    for name, conf in checked.items():
        curve = euro_curve(conf, y)
        score = auc_euro(conf, y)
        ax.plot(EURO_GRID, curve, lw=1.8, label=f"{name} (auc-euro {score:.3f})")
    ax.axhline(1.0, color="k", ls=":", lw=1, alpha=0.5)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("risk level $u_{ca}$ (trust iff confidence > $u_{ca}$)")
    ax.set_ylabel("euro (oracle-normalised utility)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 0.08), fontsize="small", framealpha=0.9)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return _save(fig, out)


def learning_curves(sizes, series: Mapping[str, Mapping[str, tuple]], path: str | Path,
                    title: str | None = None) -> Path:
    """Learning curves as a PNG: one panel per metric, training records on a log x axis.

    ``series[metric][estimator] = (mean, low, high)``, each an array over ``sizes``; the band
    between ``low`` and ``high`` (e.g. a 95% interval over repeats) is shaded. Metric names
    ``auc_euro_all`` and ``smece`` get their usual labels.
    """
    out = _png_path(path)
    labels = {"auc_euro_all": "auc-euro (all) ↑", "smece": "smECE ↓"}
    x = np.asarray(sizes, dtype=np.float64)
    fig = Figure(figsize=(5.0 * len(series), 4.0))
    for i, (metric, by_name) in enumerate(series.items()):
        ax = fig.add_subplot(1, len(series), i + 1)
        for name, (mean, low, high) in by_name.items():
            line = ax.plot(x, mean, marker="o", label=name)[0]
            low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
            if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15)
        ax.set_xscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([str(int(v)) for v in x])
        ax.set_xlabel("training records")
        ax.set_ylabel(labels.get(metric, metric))
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out)
