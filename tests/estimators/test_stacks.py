"""The stacks ``acute-all`` and ``visible-all``: the second level against scikit-learn on hand-built
out-of-fold logits, grouped inner folds, the sources each reads, first-level estimators dropped
where their source is missing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logit
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

from acute.estimators import make_estimator
from acute.estimators.inputs import GROUPS, METADATA, is_states_source
from acute.estimators.stacks import STACK_MEMBERS

from smaller import small_searches  # tests/smaller.py
from test_shared_fits import SMALL, planted


def test_visible_all_reads_no_hidden_states():
    stack = make_estimator("visible-all", probe_params=SMALL)
    assert not any(is_states_source(s) for s in stack.sources)
    assert [n for n, _ in stack.estimators] == list(STACK_MEMBERS["visible-all"])
    assert any(is_states_source(s) for s in make_estimator("acute-all", probe_params=SMALL).sources)
    assert set(STACK_MEMBERS["acute-all"]) - set(STACK_MEMBERS["visible-all"]) == {"acute-pca10", "question-only"}


def hand_stack(X, y, members, inner):
    """The second level fitted by hand: each member out of fold over ``inner`` (fitted on each
    inner training part alone), logits clipped at 1e-4, scikit-learn's LogisticRegression(C=1)."""
    oof = np.full((y.size, len(members)), np.nan)
    for j, est in enumerate(members):
        for tr, te in inner:
            fitted = clone(est).fit(X.select(est.sources).take(tr), y[tr])
            oof[te, j] = fitted.predict_proba(X.select(est.sources).take(te))[:, 1]
    return LogisticRegression(C=1.0).fit(logit(np.clip(oof, 1e-4, 1 - 1e-4)), y), oof


@pytest.fixture
def small_grid():
    """The members' logistic searches over a smaller grid (the stacks keep their 5 inner folds):
    these tests compare a stack with the same fits made by hand, or check its folds."""
    with small_searches(stacks=False):
        yield


def test_the_second_level_is_a_logistic_regression_on_hand_built_out_of_fold_logits(small_grid):
    _, y, _, X = planted(n=80)
    stack = make_estimator("visible-all", probe_params=SMALL, random_state=0).fit(X, y)
    inner = list(StratifiedKFold(5, shuffle=True, random_state=0).split(np.zeros(y.size), y))
    for (tr, te), (str_, ste) in zip(inner, stack.folds_):
        assert np.array_equal(tr, str_) and np.array_equal(te, ste)
    members = [est for _, est in make_estimator("visible-all", probe_params=SMALL).estimators]
    want, oof = hand_stack(X, y, members, inner)
    np.testing.assert_allclose(stack.oof_, oof, atol=1e-12)
    np.testing.assert_allclose(stack.final_estimator_.coef_, want.coef_, atol=1e-8)
    np.testing.assert_allclose(stack.final_estimator_.intercept_, want.intercept_, atol=1e-8)
    # new records: the members refitted on every training record, then the same second level
    refits = np.column_stack([clone(e).fit(X.select(e.sources), y).predict_proba(X.select(e.sources))[:, 1]
                              for e in members])
    np.testing.assert_allclose(stack.predict_proba(X)[:, 1],
                               want.predict_proba(logit(np.clip(refits, 1e-4, 1 - 1e-4)))[:, 1], atol=1e-8)


def test_grouped_inner_folds_never_split_a_group(small_grid):
    _, y, _, X = planted(n=90)
    groups = np.array([f"g{i % 17}" for i in range(y.size)])
    stack = make_estimator("acute-all", probe_params=SMALL).fit(X.with_source(GROUPS, groups), y)
    assert len(stack.folds_) == 5
    for tr, te in stack.folds_:
        assert not set(groups[tr]) & set(groups[te])
    codes = np.unique(groups, return_inverse=True)[1]
    want = list(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(np.zeros(y.size), y, codes))
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(want, stack.folds_))


def test_a_member_whose_source_is_missing_is_dropped_in_both_stacks(small_grid):
    _, y, _, X = planted(n=80)
    without = X.select([s for s in X.sources if s != METADATA])
    for name in STACK_MEMBERS:
        stack = make_estimator(name, probe_params=SMALL).fit(without, y)
        assert stack.estimators_used_ == [m for m in STACK_MEMBERS[name] if m != "platt+meta"]
        assert stack.predict_proba(without).shape == (y.size, 2)


def test_two_stacks_share_their_members_inner_fits_and_refits(monkeypatch, small_grid):
    from acute.estimators.controls import TextPlatt

    _, y, _, X = planted(n=80)
    a = make_estimator("acute-all", probe_params=SMALL).fit(X, y)
    fits = []
    original = TextPlatt.fit
    monkeypatch.setattr(TextPlatt, "fit", lambda self, *args, **kw: fits.append(self) or original(self, *args, **kw))
    v = make_estimator("visible-all", probe_params=SMALL).fit(X, y)
    assert fits == []  # tfidf+platt and answer-text: every inner fit and the refit came from acute-all's
    np.testing.assert_array_equal(np.column_stack([a.oof_[:, a.estimators_used_.index(m)] for m in v.estimators_used_]),
                                  v.oof_)
