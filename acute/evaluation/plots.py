"""PNG figures for calibration and selective trust: reliability diagrams, euro curves, the euro
difference of two estimators, risk-coverage curves and learning curves.

Figures are drawn with matplotlib's Agg canvas directly (no pyplot, no global backend
switch), so they work headless and do not disturb an interactive session. The numbers come
from :mod:`acute.metrics` and :mod:`acute.evaluation.curves`; this module only draws. Each public function
validates, computes, builds the figure in a private ``_*_figure`` function and writes it; axes
span the data (with a margin), not a fixed range.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, StrMethodFormatter
from numpy.typing import ArrayLike

from ..metrics import BANDS, EURO_GRID, euro_curve, smooth_reliability
from ..metrics.common import validate_inputs

from ..metrics.selective import aurc, risk_coverage_curve
from .curves import binned_reliability, constant_euro_curve
from ..errors import InputError
from ..fileio import atomic_path

__all__ = ["euro_curves", "euro_difference_curve", "learning_curves", "prefix_curves", "reliability_diagram",
           "risk_coverage_plot"]

_BAND_COLOURS = {"low": "#d9f0d3", "med": "#fff2cc", "high": "#f4cccc"}
_BAND_LABELS = {"low": "low risk", "med": "medium risk", "high": "high risk"}
# the first estimator of a reliability diagram (the default) in red, the next (the best baseline) in blue
_COLOURS = ("tab:red", "tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown")
_MIN_SMOOTHED = 10  # records below which a smoothed reliability curve is not drawn (too few to read)
_METRIC_LABELS = {"auc_euro_all": "auc-euro (all) ↑", "smece": "smECE ↓"}
_METRIC_RANGES = {"auc_euro_all": (0.0, 1.0), "smece": (0.0, 1.0)}


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
    FigureCanvasAgg(fig)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return out


def _limits(values, bounds: tuple[float, float], margin: float = 0.05,
            min_width: float = 0.02) -> tuple[float, float]:
    """Axis limits spanning the finite ``values`` plus ``margin`` of their range on each side,
    at least ``min_width`` wide, kept inside ``bounds``."""
    v = np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in values])
    v = v[np.isfinite(v)]
    if v.size == 0:
        return bounds if np.all(np.isfinite(bounds)) else (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if hi - lo < min_width:
        mid = (lo + hi) / 2.0
        lo, hi = mid - min_width / 2.0, mid + min_width / 2.0
    pad = margin * (hi - lo)
    return max(lo - pad, bounds[0]), min(hi + pad, bounds[1])


def _check_name(value, name: str) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise InputError(f"{name}: expected a non-empty string or None, got {value!r}")
    return value


def _checked_mapping(confidences: Mapping, correct: ArrayLike) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Validated ``{name: float64 confidences}`` (each named ``confidences[<name>]`` in errors)
    and the bool labels."""
    if not isinstance(confidences, Mapping) or len(confidences) == 0:
        raise InputError("confidences: expected a non-empty mapping {name: confidence array}")
    checked: dict[str, np.ndarray] = {}
    y = None
    for name, conf in confidences.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"confidences: names must be non-empty strings, got {name!r}")
        checked[name], y = validate_inputs(conf, correct, f"confidences[{name!r}]")
    return checked, y


def _shade_risk_bands(ax) -> None:
    """The low / medium / high risk bands of :data:`acute.metrics.BANDS`, labelled at the bottom."""
    for band, colour in _BAND_COLOURS.items():
        lo, hi = BANDS[band][1]
        ax.axvspan(lo, hi, color=colour, alpha=0.6, lw=0)
        ax.text((lo + hi) / 2, 0.02, _BAND_LABELS[band], ha="center", va="bottom",
                fontsize="small", color="0.35", transform=ax.get_xaxis_transform())


# ------------------------------------------------------------------------ reliability diagram


def reliability_diagram(
    confidence: ArrayLike | Mapping[str, ArrayLike],
    correct: ArrayLike,
    path: str | Path,
    title: str | None = None,
    *,
    n_bins: int = 10,
) -> Path:
    """Reliability diagram written as a PNG to ``path``: accuracy against confidence over the
    range the confidences cover.

    ``confidence`` is one array, or a mapping ``{name: array}`` to draw several estimators on
    the same records on one axes (e.g. ``{"acute-cosine-stacked": ..., "platt": ...}``: the
    default against the best baseline; the first is drawn in red, the second in blue). For each
    estimator it draws ``n_bins`` equal-mass bins (mean confidence, accuracy and its 95% Wilson
    interval, :func:`acute.evaluation.curves.binned_reliability`) and the smoothed curve E[correct |
    confidence] at the smooth-ECE bandwidth sigma* (:func:`acute.metrics.smooth_reliability`)
    over that estimator's own confidence range; the legend gives each smECE. A histogram of the
    confidences (records per bin) lies below. The x limits are the data's range with a 5%
    margin (a model whose confidences all lie below 0.05 gets an axis to about 0.05, not to 1);
    the y limits cover the bins, their intervals, the curve and the diagonal there.

    Returns the written path (a ``Path``). Raises ``ValueError`` for bad ``confidence`` /
    ``correct`` (see :func:`acute.metrics.common.validate_inputs`; mapping entries are named
    ``confidences[<name>]``), an empty mapping or a ``path`` not ending in .png; the parent
    folder is created if missing.
    """
    if isinstance(confidence, Mapping):
        checked, y = _checked_mapping(confidence, correct)
    else:
        conf, y = validate_inputs(confidence, correct)
        checked = {None: conf}
    out = _png_path(path)
    return _save(_reliability_figure(checked, y, title, n_bins), out)


def _wrapped(title: str, width: int = 70) -> str:
    """A figure title broken into lines that fit the figure's width."""
    return textwrap.fill(title, width)


#: the share of records on each side that the smoothed reliability curve leaves to the bins alone
_CURVE_TAIL = 0.01


def _reliability_figure(checked: Mapping[str | None, np.ndarray], y: np.ndarray,
                        title: str | None, n_bins: int) -> Figure:
    fig = Figure(figsize=(6.0, 7.0 + 0.4 * len(checked)), layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=(4, 1))
    ax = fig.add_subplot(grid[0])
    hist = fig.add_subplot(grid[1], sharex=ax)
    confs = list(checked.values())
    data_lo = min(float(c.min()) for c in confs)
    data_hi = max(float(c.max()) for c in confs)
    xlim = _limits([data_lo, data_hi], bounds=(-0.01, 1.01))
    diag = np.array([max(xlim[0], 0.0), min(xlim[1], 1.0)])
    ax.plot(diag, diag, "k--", lw=1, alpha=0.5, label="perfect calibration")
    y_values: list = [diag]
    edges = np.linspace(data_lo, data_hi, 31) if data_hi > data_lo else np.array([data_lo - 0.005, data_lo + 0.005])
    for i, (name, conf) in enumerate(checked.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        prefix = f"{name}: " if name is not None else ""
        bins = binned_reliability(conf, y, n_bins=n_bins)
        # the smoothed curve where the data are: its central 98% (a few extreme records leave a
        # kernel estimate that swings on nothing); the binned points cover the rest
        lo_c, hi_c = (float(v) for v in np.quantile(conf, [_CURVE_TAIL, 1.0 - _CURVE_TAIL]))
        rel = smooth_reliability(conf, y, grid=np.linspace(lo_c, hi_c, 300))
        if hi_c > lo_c and conf.size >= _MIN_SMOOTHED:
            curve = np.clip(rel.curve, 0.0, 1.0)
            ax.plot(rel.grid, curve, color=colour, lw=2.0,
                    label=f"{prefix}smoothed (smECE {rel.smece:.3f}, $\\sigma^*$ {rel.sigma:.3f})")
            y_values.append(curve)
        else:
            prefix = f"{prefix}smECE {rel.smece:.3f}, "
        ax.errorbar(bins.mean_confidence, bins.accuracy,
                    yerr=[bins.accuracy - bins.low, bins.high - bins.accuracy],
                    fmt="o", ms=5, color=colour, ecolor=colour, elinewidth=1, capsize=2,
                    alpha=0.9, label=f"{prefix}{bins.count.size} equal-mass bin{'s' if bins.count.size > 1 else ''} "
                    "(95% Wilson interval)")
        y_values += [bins.low, bins.high]
        hist.hist(conf, bins=edges, color=colour, alpha=0.35 if len(checked) > 1 else 0.5,
                  histtype="stepfilled", lw=0)
        hist.hist(conf, bins=edges, color=colour, histtype="step", lw=1.2)
    ax.set_xlim(*xlim)
    ax.set_ylim(*_limits(y_values, bounds=(-0.01, 1.01)))
    ax.set_ylabel("accuracy (fraction correct)")
    ax.tick_params(labelbottom=False)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", fontsize="small", frameon=False,
               ncol=1)
    hist.set_xlabel(f"confidence (n = {y.size} records)")
    hist.set_ylabel("records")
    hist.grid(alpha=0.3)
    if title:
        ax.set_title(_wrapped(title))
    return fig


# ------------------------------------------------------------------------ euro curves


def euro_curves(
    confidences: Mapping[str, ArrayLike],
    correct: ArrayLike,
    path: str | Path,
    title: str | None = None,
    *,
    constant: bool = True,
    base_rate: float | None = None,
) -> Path:
    """euro over the risk level u_ca for several estimators on one figure, written as a PNG.

    ``confidences`` maps a display name to that estimator's confidences on the same records
    (same order as ``correct``). Each curve is :func:`acute.metrics.euro_curve` on
    :data:`acute.metrics.EURO_GRID`; the low / medium / high risk bands are shaded, and the
    legend gives each estimator's auc-euro (grid version, all risk levels, the curve's mean).
    With ``constant`` (default) the dashed grey line "constant (base rate)" is the constant
    predictor that gives every record the confidence ``base_rate`` (default: the fraction of
    ``correct`` that is correct; pass the training set's rate for a held-out test set),
    :func:`acute.evaluation.curves.constant_euro_curve`: an estimator below it does worse than ignoring
    the inputs. The y axis starts just below the lowest curve.

    Returns the written path. Raises ``ValueError`` for an empty mapping, a non-string name,
    bad confidences (named ``confidences[<name>]``), bad ``correct``, a ``base_rate`` outside
    [0, 1] or a ``path`` not ending in .png.
    """
    checked, y = _checked_mapping(confidences, correct)
    curves = {name: euro_curve(conf, y) for name, conf in checked.items()}
    const = None
    if constant:
        rate = float(y.mean()) if base_rate is None else base_rate
        const = (float(rate), constant_euro_curve(y, rate))
    out = _png_path(path)
    return _save(_euro_figure(curves, const, title), out)


def _euro_figure(curves: Mapping[str, np.ndarray], const: tuple[float, np.ndarray] | None,
                 title: str | None) -> Figure:
    fig = Figure(figsize=(7.5, 5.2 + 0.2 * ((len(curves) + 2) // 2)), layout="constrained")
    ax = fig.add_subplot()
    _shade_risk_bands(ax)
    for name, curve in curves.items():
        ax.plot(EURO_GRID, curve, lw=1.8, label=f"{name} (auc-euro {curve.mean():.3f})")
    lows = [float(c.min()) for c in curves.values()]
    if const is not None:
        rate, curve = const
        ax.plot(EURO_GRID, curve, color="0.3", ls="--", lw=1.4,
                label=f"constant (base rate), c = {rate:.3f} (auc-euro {curve.mean():.3f})")
        lows.append(float(curve.min()))
    ax.axhline(1.0, color="k", ls=":", lw=1, alpha=0.5, label="oracle")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(max(0.0, min(lows) - 0.08), 1.02)
    ax.set_xlabel("risk level $u_{ca}$ (trust iff confidence > $u_{ca}$)")
    ax.set_ylabel("euro (oracle-normalised utility)")
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2,
               fontsize="small", frameon=False)
    if title:
        ax.set_title(_wrapped(title))
    return fig


# --------------------------------------------------------------------- risk-coverage curves


def risk_coverage_plot(
    confidences: Mapping[str, ArrayLike],
    correct: ArrayLike,
    path: str | Path,
    title: str | None = None,
    *,
    targets: Sequence[float] = (0.05, 0.10),
) -> Path:
    """The risk-coverage curves (:func:`acute.metrics.selective.risk_coverage_curve`) of several
    estimators on one figure, written as a PNG: the error rate among the trusted answers against
    the fraction trusted, as the trust threshold slides down. The legend gives each estimator's
    AURC; dotted horizontal lines mark the target error rates ``targets`` (where the coverage at
    that error is read), the dashed line the error rate of trusting everything. The y axis spans
    the curves' own range (drawn only where there is data).

    Returns the written path. Raises ``InputError`` as :func:`euro_curves` does.
    """
    checked, y = _checked_mapping(confidences, correct)
    curves = {name: risk_coverage_curve(conf, y) for name, conf in checked.items()}
    out = _png_path(path)
    fig = Figure(figsize=(7.5, 5.2 + 0.2 * ((len(curves) + 2) // 2)), layout="constrained")
    ax = fig.add_subplot()
    top = 0.0
    for name, rc in curves.items():
        # a step curve: every coverage level inside a tied run takes the run's risk
        x = np.concatenate([[0.0], rc.coverage])
        r = np.concatenate([[rc.risk[0]], rc.risk])
        ax.step(x, r, where="pre", lw=1.8, label=f"{name} (AURC {aurc(checked[name], y):.3f})")
        top = max(top, float(r.max()))
    error = 1.0 - float(y.mean())
    ax.axhline(error, color="0.3", ls="--", lw=1.2, label=f"trust everything (error {error:.3f})")
    for t in targets:
        ax.axhline(t, color="0.5", ls=":", lw=1, label=f"target error {t:g}")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, min(1.0, max(top, error, *targets) * 1.08 + 0.01))
    ax.set_xlabel("coverage (fraction of answers trusted)")
    ax.set_ylabel("selective risk (error rate among trusted answers)")
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2,
               fontsize="small", frameon=False)
    ax.set_title(_wrapped(title or "risk-coverage curves"))
    return _save(fig, out)


def _curve_arrays(risk_levels, diff, low, high) -> tuple[np.ndarray, ...]:
    """The four arrays of :func:`euro_difference_curve`, checked: 1-D, equal length, risk
    levels increasing in (0, 1), ``diff`` finite; ``low`` / ``high`` may hold NaN (no band)."""
    arrays = []
    for name, a in (("risk_levels", risk_levels), ("diff", diff), ("low", low), ("high", high)):
        try:
            a = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{name}: expected numbers") from None
        if a.ndim != 1 or a.size == 0:
            raise InputError(f"{name}: expected a non-empty 1-D array, got shape {a.shape}")
        if arrays and a.size != arrays[0].size:
            raise InputError(f"{name}: expected {arrays[0].size} values (one per risk level), got {a.size}")
        arrays.append(a)
    u, d = arrays[0], arrays[1]
    if not np.all((u > 0.0) & (u < 1.0)) or np.any(np.diff(u) <= 0):
        raise InputError("risk_levels: expected increasing risk levels strictly between 0 and 1")
    if not np.all(np.isfinite(d)):
        raise InputError("diff: contains a non-finite value")
    return tuple(arrays)


def euro_difference_curve(
    risk_levels: ArrayLike,
    diff: ArrayLike,
    low: ArrayLike,
    high: ArrayLike,
    path: str | Path,
    title: str | None = None,
    *,
    names: tuple[str, str] = ("default", "best baseline"),
    band_label: str = "95% paired bootstrap band",
) -> Path:
    """euro of one estimator minus another's over the risk level, with its band and a zero
    line, written as a PNG to ``path``.

    The arrays come from :func:`acute.evaluation.curves.euro_difference` (``euro_difference_curve(
    *euro_difference(a, b, y)[:4], path)``); ``names`` are the two estimators (a, b) for the
    labels. The band is shaded where ``low`` and ``high`` are finite; the risk bands are shaded
    as in :func:`euro_curves`; the legend gives the mean difference over the plotted risk
    levels (the auc-euro (all) difference on :data:`acute.metrics.EURO_GRID`). The y axis spans
    the curve, the band and 0.

    Returns the written path. Raises ``ValueError`` for arrays that are not 1-D of one length,
    risk levels not increasing in (0, 1), a non-finite ``diff``, bad ``names`` or a ``path``
    not ending in .png.
    """
    u, d, lo, hi = _curve_arrays(risk_levels, diff, low, high)
    if not (isinstance(names, (tuple, list)) and len(names) == 2
            and all(isinstance(n, str) and n for n in names)):
        raise InputError(f"names: expected two non-empty strings (a, b), got {names!r}")
    out = _png_path(path)
    return _save(_difference_figure(u, d, lo, hi, title, tuple(names), band_label), out)


def _difference_figure(u, d, lo, hi, title, names, band_label) -> Figure:
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    _shade_risk_bands(ax)
    band = np.isfinite(lo) & np.isfinite(hi)
    if band.any():
        ax.fill_between(u, lo, hi, where=band, color="tab:purple", alpha=0.25, lw=0, label=band_label)
    ax.plot(u, d, color="tab:purple", lw=1.8, label=f"{names[0]} − {names[1]} (mean {d.mean():+.4f})")
    ax.axhline(0.0, color="k", lw=1, alpha=0.7, label="no difference")
    ax.set_xlim(float(u[0]), float(u[-1]))
    ax.set_ylim(*_limits([d, lo[band], hi[band], [0.0]], bounds=(-1.02, 1.02), margin=0.08, min_width=0.01))
    ax.set_xlabel("risk level $u_{ca}$ (trust iff confidence > $u_{ca}$)")
    ax.set_ylabel(f"euro difference ({names[0]} − {names[1]})")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", framealpha=0.9)
    if title:
        ax.set_title(_wrapped(title))
    return fig


# ------------------------------------------------------------------------ learning curves


_LOG_PAD = 1.15  # the x axis of a learning curve runs from the smallest size / 1.15 to the largest * 1.15


def _log_ticks(x: np.ndarray, max_ticks: int = 6) -> list[float]:
    """At most ``max_ticks + 1`` of the sizes ``x`` as tick positions on a log axis, the first
    and the last always, neighbours at least 1/``max_ticks`` of the axis's log span apart (so
    their labels never overlap)."""
    xs = np.unique(x[np.isfinite(x) & (x > 0)])
    if xs.size <= 1:
        return xs.tolist()
    logs = np.log10(xs)
    gap = (logs[-1] - logs[0] + 2 * np.log10(_LOG_PAD)) / max_ticks
    ticks = [xs[0]]
    for v, lv in zip(xs[1:-1], logs[1:-1]):
        if lv - np.log10(ticks[-1]) >= gap and logs[-1] - lv >= gap:
            ticks.append(v)
    return [float(t) for t in ticks + [xs[-1]]]


def _heading(kind: str, model: str | None, task: str | None, title: str | None) -> str:
    """``"<kind>: <model> on <task>"`` (the parts given), then ``title`` on a second line."""
    who = " on ".join(p for p in (model, task) if p)
    if model and not task:
        who = f"model {model}"
    elif task and not model:
        who = f"task {task}"
    head = f"{kind}: {who}" if who else kind
    return f"{head}\n{title}" if title else head


def learning_curves(sizes, series: Mapping[str, Mapping[str, tuple]], path: str | Path,
                    title: str | None = None, *, model: str | None = None,
                    task: str | None = None) -> Path:
    """Learning curves as a PNG: one panel per metric, training records on a log x axis.

    ``series[metric][estimator] = (mean, low, high)``, each an array over ``sizes``; the band
    between ``low`` and ``high`` (the interval of :mod:`acute.evaluation.learning_curve`) is shaded where
    both are finite, NaN means are left out. Metric names ``auc_euro_all`` and ``smece`` get
    their usual labels and their y axes stay within [0, 1]. The figure title names ``model``
    and ``task`` ("Learning curve: <model> on <task>", either may be None), ``title`` follows on
    a second line. x ticks are a few of the sizes, labelled as plain integers with thousands
    separators ("1,600"); the axes span the data with a margin.

    Returns the written path. Raises ``ValueError`` for sizes that are not positive numbers,
    a series whose arrays do not match ``sizes``, a non-string ``model`` / ``task`` or a
    ``path`` not ending in .png.
    """
    x = np.asarray(sizes, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x) & (x > 0)):
        raise InputError(f"sizes: expected a non-empty 1-D array of positive training-set sizes, got {sizes!r}")
    if not isinstance(series, Mapping) or not series:
        raise InputError("series: expected a non-empty mapping {metric: {estimator: (mean, low, high)}}")
    checked: dict[str, dict[str, tuple[np.ndarray, ...]]] = {}
    for metric, by_name in series.items():
        checked[metric] = {}
        for name, arrays in by_name.items():
            arrays = tuple(np.asarray(a, dtype=np.float64) for a in arrays)
            if len(arrays) != 3 or any(a.shape != x.shape for a in arrays):
                raise InputError(f"series[{metric!r}][{name!r}]: expected (mean, low, high), each "
                                 f"{x.size} values (one per size)")
            checked[metric][name] = arrays
    heading = _heading("Learning curve", _check_name(model, "model"), _check_name(task, "task"), title)
    out = _png_path(path)
    return _save(_learning_figure(x, checked, heading), out)


def _learning_figure(x: np.ndarray, series: Mapping[str, Mapping[str, tuple]], heading: str) -> Figure:
    fig = Figure(figsize=(5.2 * len(series), 4.8), layout="constrained")
    ticks = _log_ticks(x)
    handles: dict[str, object] = {}
    for i, (metric, by_name) in enumerate(series.items()):
        ax = fig.add_subplot(1, len(series), i + 1)
        y_values = []
        for j, (name, (mean, low, high)) in enumerate(by_name.items()):
            ok = np.isfinite(mean)
            line = ax.plot(x[ok], mean[ok], marker="o", ms=4, color=f"C{j}", label=name)[0]
            handles.setdefault(name, line)
            band = np.isfinite(low) & np.isfinite(high)
            if band.any():
                ax.fill_between(x, low, high, where=band, color=line.get_color(), alpha=0.15, lw=0)
            y_values += [mean[ok], low[band], high[band]]
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(float(x.min()) / _LOG_PAD, float(x.max()) * _LOG_PAD)
        lo, hi = _METRIC_RANGES.get(metric, (-np.inf, np.inf))
        ax.set_ylim(*_limits(y_values, bounds=(lo - 0.01, hi + 0.01), margin=0.08, min_width=0.01))
        ax.set_xlabel("training records (log scale)")
        ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncol=min(len(handles), 4), fontsize="small", frameon=False)
    fig.suptitle(heading)
    return fig


def prefix_curves(rows: Sequence[Mapping[str, Any]], path: str | Path, *, model: str | None = None,
                  task: str | None = None, title: str | None = None) -> Path:
    """Prefix probes as a PNG (:mod:`acute.evaluation.prefix`): auc-euro and AUROC against the
    generated tokens a gate has read (log x axis), one line per row name over its checkpoints
    ``k >= 1``; the ``question-only`` row (k = 0) and the ``final`` row as horizontal lines. Only
    finite values are drawn. Returns the written path."""
    if not rows:
        raise InputError("rows: no prefix rows to draw")
    heading = _heading("Prefix probes", _check_name(model, "model"), _check_name(task, "task"), title)
    out = _png_path(path)
    fig = Figure(figsize=(10.4, 4.6), layout="constrained")
    for i, (metric, label) in enumerate((("auc_euro", "auc-euro (all risk levels)"), ("auroc", "AUROC"))):
        ax = fig.add_subplot(1, 2, i + 1)
        names = list(dict.fromkeys(r["row"] for r in rows if r["k"]))
        for j, name in enumerate(names):
            pts = sorted((r["k"], r[metric]) for r in rows if r["row"] == name and r["k"]
                         and np.isfinite(r[metric]))
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=4, color=f"C{j}", label=name)
        for j, (name, style) in enumerate((("question-only", ":"), ("final", "--"))):
            values = [r[metric] for r in rows if r["row"] == name and np.isfinite(r[metric])]
            if values:
                ax.axhline(values[0], color="0.3", linestyle=style, lw=1,
                           label=f"{name} ({'k = 0' if name == 'question-only' else 'whole answer'})")
        ax.set_xscale("log", base=2)
        ks = sorted({r["k"] for r in rows if r["k"]})
        ax.xaxis.set_major_locator(FixedLocator(ks))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("generated tokens read (k)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(heading, fontsize=10)
    return _save(fig, out)
