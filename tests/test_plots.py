"""Tests for acute.plots: valid PNGs are written and bad input is rejected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acute import plots

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
