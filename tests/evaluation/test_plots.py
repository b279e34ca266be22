"""Tests for acute.evaluation.plots: valid PNGs are written and bad input is rejected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acute.evaluation import plots
from acute.evaluation.curves import binned_reliability
from acute.metrics import smooth_reliability

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    conf = rng.beta(4, 2, 600)
    correct = rng.uniform(size=conf.size) < conf**1.5
    return conf, correct


def _assert_png(path: Path, min_bytes: int = 10_000) -> np.ndarray:
    raw = path.read_bytes()
    assert raw[:8] == PNG_SIGNATURE
    assert len(raw) > min_bytes
    import matplotlib.image as mpimg

    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
    assert float(image[..., :3].std()) > 0.05  # not a blank canvas
    return image


def test_reliability_diagram_writes_png(tmp_path, data):
    out = tmp_path / "nested" / "rel.png"
    result = plots.reliability_diagram(*data, out, title="a title")
    assert result == out
    _assert_png(out)


def test_reliability_diagram_draws_the_data(tmp_path, data):
    conf, correct = data
    a = _assert_png(plots.reliability_diagram(conf, correct, tmp_path / "a.png"))
    b = _assert_png(plots.reliability_diagram(1 - conf, correct, tmp_path / "b.png"))
    assert a.shape == b.shape
    assert np.abs(a - b).mean() > 1e-3


@pytest.mark.parametrize("label", [0, 1])
def test_reliability_diagram_single_class_and_tiny_input(tmp_path, label):
    _assert_png(plots.reliability_diagram([0.3, 0.9], [label, label], str(tmp_path / "s.png")))
    _assert_png(plots.reliability_diagram([1.0], [1], tmp_path / "one.png"))


def test_euro_curves_writes_png(tmp_path, data):
    conf, correct = data
    estimators = {
        "raw": conf,
        "oracle": correct.astype(float),
        "constant": np.full(conf.size, correct.mean()),
    }
    out = plots.euro_curves(estimators, correct, str(tmp_path / "euro.png"), title="euro")
    assert out == tmp_path / "euro.png"
    _assert_png(out)
    one = plots.euro_curves({"raw": conf}, correct.astype(int), tmp_path / "one.png")
    _assert_png(one)


def test_risk_coverage_plot_draws_the_curves(tmp_path, data):
    conf, correct = data
    a = _assert_png(plots.risk_coverage_plot({"raw": conf, "constant": np.full(conf.size, 0.5)}, correct,
                                             tmp_path / "rc.png"))
    b = _assert_png(plots.risk_coverage_plot({"raw": 1 - conf, "constant": np.full(conf.size, 0.5)}, correct,
                                             tmp_path / "rc2.png"))
    assert np.abs(a - b).mean() > 1e-3  # a reversed ranking is another picture
    with pytest.raises(ValueError, match="png"):
        plots.risk_coverage_plot({"raw": conf}, correct, tmp_path / "rc.jpg")


@pytest.mark.parametrize(
    "conf,correct,message",
    [
        ([], [], "confidence: is empty"),
        ([0.2, 0.4], [1], "same length"),
        ([0.2, np.nan], [1, 0], "confidence: contains NaN"),
        ([0.2, 1.4], [1, 0], "confidence: values must lie"),
        ([0.2, 0.4], [1, 3], "correct: labels must be 0/1"),
    ],
)
def test_reliability_diagram_rejects_bad_input(tmp_path, conf, correct, message):
    out = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=message):
        plots.reliability_diagram(conf, correct, out)
    assert not out.exists()


def test_bad_paths_are_rejected(tmp_path, data):
    conf, correct = data
    with pytest.raises(ValueError, match="path: .*png"):
        plots.reliability_diagram(conf, correct, tmp_path / "rel.jpg")
    with pytest.raises(ValueError, match="path: .*png"):
        plots.euro_curves({"raw": conf}, correct, tmp_path / "euro")
    folder = tmp_path / "folder.png"
    folder.mkdir()
    with pytest.raises(ValueError, match="directory"):
        plots.reliability_diagram(conf, correct, folder)
    with pytest.raises(ValueError, match="path"):
        plots.reliability_diagram(conf, correct, 3)


def test_euro_curves_rejects_bad_input(tmp_path, data):
    conf, correct = data
    out = tmp_path / "euro.png"
    with pytest.raises(ValueError, match="non-empty mapping"):
        plots.euro_curves({}, correct, out)
    with pytest.raises(ValueError, match="non-empty mapping"):
        plots.euro_curves([conf], correct, out)
    with pytest.raises(ValueError, match="names must be non-empty strings"):
        plots.euro_curves({1: conf}, correct, out)
    bad = conf.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"confidences\['probe'\]: contains NaN"):
        plots.euro_curves({"raw": conf, "probe": bad}, correct, out)
    with pytest.raises(ValueError, match=r"confidences\['raw'\] and correct must have the same"):
        plots.euro_curves({"raw": conf[:-1]}, correct, out)
    with pytest.raises(ValueError, match="correct: labels"):
        plots.euro_curves({"raw": conf}, np.full(conf.size, 2), out)
    assert not out.exists()


# ----------------------------------------------------------------- what the figures show


@pytest.fixture
def figures(monkeypatch):
    """The Figure objects the plotting functions write (each is still saved as a PNG)."""
    drawn = []
    save = plots._save

    def spy(fig, out):
        drawn.append(fig)
        return save(fig, out)

    monkeypatch.setattr(plots, "_save", spy)
    return drawn


def _labels(ax) -> list[str]:
    legend = ax.get_legend() or ax.figure.legends[0]
    return [t.get_text() for t in legend.get_texts()]


def test_reliability_axes_follow_the_data(tmp_path, figures):
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.001, 0.04, 3000)
    correct = rng.random(conf.size) < 3 * conf
    _assert_png(plots.reliability_diagram(conf, correct, tmp_path / "low.png", title="low"))
    ax = figures[-1].axes[0]
    lo, hi = ax.get_xlim()
    assert lo <= conf.min() and conf.max() <= hi < 0.05  # not the whole [0, 1]
    bins = binned_reliability(conf, correct)
    ylo, yhi = ax.get_ylim()
    assert ylo <= bins.low.min() and bins.high.max() <= yhi < 0.5
    # the drawn points are the equal-mass bins, and the histogram below counts every record
    (points,) = [c for c in ax.containers]
    np.testing.assert_allclose(points.lines[0].get_xdata(), bins.mean_confidence)
    np.testing.assert_allclose(points.lines[0].get_ydata(), bins.accuracy)
    assert bins.count.size == 10
    hist = figures[-1].axes[1]
    counts = np.histogram(conf, bins=np.linspace(conf.min(), conf.max(), 31))[0]
    assert max(p.get_path().vertices[:, 1].max() for p in hist.patches) == counts.max()
    assert hist.get_ylabel() == "records"
    assert hist.get_xlabel() == f"confidence (n = {conf.size} records)"
    assert ax.get_ylabel() and ax.get_title() == "low"


def test_reliability_two_estimators_on_one_axes(tmp_path, data, figures):
    conf, correct = data
    platt = np.clip(0.3 + 0.2 * conf, 0, 1)
    out = plots.reliability_diagram({"acute-cosine-stacked": conf, "platt": platt}, correct,
                                    tmp_path / "two.png", title="default vs best baseline")
    _assert_png(out)
    ax = figures[-1].axes[0]
    labels = _labels(ax)
    for name, c in (("acute-cosine-stacked", conf), ("platt", platt)):
        smece = smooth_reliability(c, correct).smece
        assert any(t.startswith(f"{name}: smoothed (smECE {smece:.3f}") for t in labels)
        assert any(t.startswith(f"{name}: 10 equal-mass bins") for t in labels)
    assert len(ax.containers) == 2
    lo, hi = ax.get_xlim()
    assert lo <= min(conf.min(), platt.min()) and hi >= max(conf.max(), platt.max())
    # each smoothed curve stays over its own estimator's confidences, their central 98%
    curves = [line for line in ax.lines if line.get_label().endswith(")") and "smoothed" in line.get_label()]
    assert len(curves) == 2
    assert curves[1].get_xdata().min() == pytest.approx(np.quantile(platt, 0.01))
    assert curves[1].get_xdata().max() == pytest.approx(np.quantile(platt, 0.99))
    assert platt.min() < curves[1].get_xdata().min() and curves[1].get_xdata().max() < platt.max()
    # a long title is wrapped so it fits the figure's width
    plots.reliability_diagram({"platt": platt}, correct, tmp_path / "long.png", title="word " * 30)
    assert "\n" in figures[-1].axes[0].get_title()
    with pytest.raises(ValueError, match=r"confidences\['platt'\]: contains NaN"):
        plots.reliability_diagram({"raw": conf, "platt": np.full(conf.size, np.nan)}, correct,
                                  tmp_path / "bad.png")
    with pytest.raises(ValueError, match="non-empty mapping"):
        plots.reliability_diagram({}, correct, tmp_path / "bad.png")


def test_euro_curves_draw_the_constant_predictor(tmp_path, figures):
    y = np.array([1, 1, 1, 0])
    conf = np.array([0.9, 0.8, 0.4, 0.3])
    _assert_png(plots.euro_curves({"probe": conf}, y, tmp_path / "euro.png"), min_bytes=5_000)
    ax = figures[-1].axes[0]
    (const,) = [line for line in ax.lines if line.get_label().startswith("constant (base rate)")]
    u, curve = const.get_xdata(), const.get_ydata()
    # by hand: accuracy 3/4, base rate 0.75; trust all below it, none from it on
    den = (1 - u) * 0.75 + u * 0.25
    np.testing.assert_allclose(curve, np.where(u < 0.75, (1 - u) * 0.75, u * 0.25) / den)
    assert curve[499] == pytest.approx(0.75) and curve[799] == pytest.approx(0.2 / 0.35)
    assert "c = 0.750" in const.get_label()
    assert ax.get_ylim()[0] <= curve.min()
    # a training base rate moves the kink; constant=False leaves the line out
    plots.euro_curves({"probe": conf}, y, tmp_path / "rate.png", base_rate=0.9)
    (const,) = [line for line in figures[-1].axes[0].lines if line.get_label().startswith("constant")]
    assert const.get_ydata()[799] == pytest.approx(0.2 * 0.75 / 0.35)
    plots.euro_curves({"probe": conf}, y, tmp_path / "none.png", constant=False)
    assert not [line for line in figures[-1].axes[0].lines if line.get_label().startswith("constant")]
    with pytest.raises(ValueError, match="base_rate"):
        plots.euro_curves({"probe": conf}, y, tmp_path / "bad.png", base_rate=2.0)


def test_euro_difference_curve(tmp_path, data, figures):
    from acute.evaluation.curves import euro_difference

    conf, correct = data
    res = euro_difference(conf, np.clip(0.3 + 0.2 * conf, 0, 1), correct, n_bootstrap=100)
    out = plots.euro_difference_curve(*res[:4], tmp_path / "diff.png", title="default - best baseline")
    _assert_png(out)
    ax = figures[-1].axes[0]
    assert ax.get_xlim() == (res.risk_levels[0], res.risk_levels[-1])
    ylo, yhi = ax.get_ylim()
    assert ylo <= min(0.0, res.low.min()) and yhi >= max(0.0, res.high.max())
    assert any(line.get_label() == "no difference" and set(line.get_ydata()) == {0.0} for line in ax.lines)
    (diff,) = [line for line in ax.lines if "(mean " in line.get_label()]
    np.testing.assert_allclose(diff.get_ydata(), res.diff)
    assert diff.get_label().startswith("default − best baseline (mean ")
    assert ax.get_title() == "default - best baseline"
    # a NaN band is left out; names label the axis
    low = res.low.copy()
    low[:10] = np.nan
    plots.euro_difference_curve(res.risk_levels, res.diff, low, res.high, tmp_path / "nan.png",
                                names=("a", "b"))
    assert figures[-1].axes[0].get_ylabel() == "euro difference (a − b)"
    with pytest.raises(ValueError, match="diff: expected 999 values"):
        plots.euro_difference_curve(res.risk_levels, res.diff[:-1], res.low, res.high, tmp_path / "x.png")
    with pytest.raises(ValueError, match="risk_levels: expected increasing"):
        plots.euro_difference_curve(res.risk_levels[::-1], res.diff, res.low, res.high, tmp_path / "x.png")
    with pytest.raises(ValueError, match="diff: contains a non-finite"):
        plots.euro_difference_curve(res.risk_levels, res.diff * np.nan, res.low, res.high, tmp_path / "x.png")
    with pytest.raises(ValueError, match="path: .*png"):
        plots.euro_difference_curve(*res[:4], tmp_path / "x.svg")


def _series(sizes, rng):
    k = len(sizes)
    mean = np.linspace(0.70, 0.80, k)
    sm = np.linspace(0.10, 0.02, k)
    return {"auc_euro_all": {"platt": (mean, mean - 0.03, mean + 0.02),
                             "acute-cosine-stacked": (mean + 0.05, mean + 0.03, mean + 0.07)},
            "smece": {"platt": (sm, np.clip(sm - 0.05, 0, 1), sm + 0.04),
                      "acute-cosine-stacked": (sm, np.full(k, np.nan), np.full(k, np.nan))}}


def test_learning_curves_title_ticks_and_limits(tmp_path, figures):
    sizes = [50, 100, 200, 400, 800, 1600, 3200, 6400, 16032]
    out = plots.learning_curves(sizes, _series(sizes, None), tmp_path / "lc.png",
                                title="9,000 records", model="Qwen2.5-1.5B-Instruct", task="triviaqa")
    _assert_png(out)
    fig = figures[-1]
    heading = fig._suptitle.get_text()
    assert "Qwen2.5-1.5B-Instruct" in heading and "triviaqa" in heading and "9,000 records" in heading
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        texts = [t.get_text() for t in labels]
        assert texts[0] == "50" and texts[-1] == "16,032" and 3 <= len(texts) <= 7
        assert all(t.replace(",", "").isdigit() for t in texts)
        assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for left, right in zip(boxes, boxes[1:]):
            assert left.x1 < right.x0  # no two labels touch
        lo, hi = ax.get_xlim()
        assert 40 < lo < 50 and 16032 < hi < 20000
        assert ax.get_xscale() == "log" and ax.get_xlabel() and ax.get_ylabel()
        ylo, yhi = ax.get_ylim()
        assert -0.01 <= ylo and yhi <= 1.01
    auc, sm = fig.axes
    assert auc.get_ylim()[0] > 0.6  # drawn where the data is, not from 0
    assert sm.get_ylim()[0] >= -0.01
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["platt", "acute-cosine-stacked"]


def test_learning_curves_optional_names_and_bad_input(tmp_path, figures):
    sizes = [30, 60]
    plots.learning_curves(sizes, _series(sizes, None), tmp_path / "a.png")
    assert figures[-1]._suptitle.get_text() == "Learning curve"
    plots.learning_curves(sizes, _series(sizes, None), tmp_path / "b.png", task="sciq")
    assert figures[-1]._suptitle.get_text() == "Learning curve: task sciq"
    texts = [t.get_text() for t in figures[-1].axes[0].get_xticklabels() if t.get_text()]
    assert texts == ["30", "60"]
    with pytest.raises(ValueError, match="model: expected a non-empty string"):
        plots.learning_curves(sizes, _series(sizes, None), tmp_path / "c.png", model=3)
    with pytest.raises(ValueError, match=r"series\['auc_euro_all'\]\['platt'\]: expected \(mean, low, high\)"):
        plots.learning_curves([30, 60, 90], _series(sizes, None), tmp_path / "c.png")
    with pytest.raises(ValueError, match="sizes: expected"):
        plots.learning_curves([0, 60], _series(sizes, None), tmp_path / "c.png")
