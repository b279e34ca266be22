"""Certified early stopping: first stops and thresholds by hand, the binomial test against
scipy, and validity by simulation (the realised share of right, trusted answers stopped on new
answers exceeds epsilon in at most about delta of the calibration draws)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from acute.errors import InputError
from acute.metrics.stopping import certify_stopping, first_stop, stopped_share

NAN = np.nan


def test_first_stop_by_hand():
    scores = [[0.9, 0.4, 0.1], [0.2, NAN, NAN], [0.8, 0.7, NAN], [0.5, 0.6, 0.3]]
    assert first_stop(scores, 0.5).tolist() == [1, 0, -1, 2]
    assert first_stop(scores, 0.0).tolist() == [-1, -1, -1, -1]
    assert first_stop(scores, 0.95).tolist() == [0, 0, 0, 0]
    assert stopped_share(scores, [1, 1, 1, 0], [1, 0, 1, 1], 0.5) == 0.5  # answers 0 and 2: 0 stopped


def test_the_certified_threshold_by_hand():
    # 60 trusted and right answers whose lowest prefix score is i / 100 (i = 0..59), 40 others
    rng = np.random.default_rng(0)
    low = np.arange(60) / 100
    scores = np.column_stack([low + 0.3, low, np.full(60, NAN)])
    other = rng.uniform(0, 1, (40, 3))
    s = np.vstack([scores, other])
    trusted = np.r_[np.ones(60, bool), rng.uniform(size=40) < 0.5]
    correct = np.r_[np.ones(60, bool), np.zeros(40, bool)]
    rule = certify_stopping(s, trusted, correct, epsilon=0.1, delta=0.1)
    # at t, the stopped protected answers are those with i / 100 < t; K_t = ceil(100 t)
    p = [binom.cdf(int(np.ceil(round(100 * t, 6))), 60, 0.1) for t in np.arange(100) / 100]
    want = max(j for j in range(100) if all(pk <= 0.1 for pk in p[:j + 1])) / 100
    assert rule.threshold == pytest.approx(want) and rule.n_protected == 60
    assert rule.stopped == (first_stop(s[:60], rule.threshold) >= 0).sum()
    assert rule.p_value == pytest.approx(binom.cdf(rule.stopped, 60, 0.1))


def test_too_few_protected_answers_certify_never_stopping():
    rule = certify_stopping([[0.5], [0.6]], [1, 1], [1, 1], epsilon=0.05, delta=0.1)
    assert rule.threshold == 0.0 or rule.stopped == 0
    assert certify_stopping([[0.5]], [0], [0], epsilon=0.05).threshold == 0.0  # no protected answer


@pytest.mark.parametrize("bad, match", [(([[1.5]], [1], [1], 0.1), "not a probability"),
                                        (([[0.5]], [1], [1], 0.0), "epsilon"),
                                        (([[0.5], [0.2]], [1], [1, 1], 0.1), "one row per answer")])
def test_bad_input_is_named(bad, match):
    with pytest.raises(InputError, match=match):
        certify_stopping(*bad)


def test_valid_by_simulation():
    """New answers from the same distribution: the realised cost exceeds epsilon in at most about
    delta of the calibration draws (binomial slack for 300 draws)."""
    rng = np.random.default_rng(1)

    def draw(n):
        quality = rng.uniform(size=n)
        correct = rng.uniform(size=n) < quality
        trusted = quality + rng.normal(0, 0.1, n) > 0.5
        scores = np.clip(quality[:, None] + rng.normal(0, 0.2, (n, 4)), 0, 1)
        ended = rng.integers(1, 5, n)  # answers end after 1..4 checkpoints
        scores[np.arange(4)[None, :] >= ended[:, None]] = np.nan
        return scores, trusted, correct

    test = draw(200_000)
    misses, certified = 0, 0
    for _ in range(300):
        rule = certify_stopping(*draw(500), epsilon=0.05, delta=0.1)
        certified += rule.threshold > 0
        misses += stopped_share(*test, rule.threshold) > 0.05
    assert certified > 250  # the rule does certify something here
    assert misses / 300 <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / 300)
