"""Smaller searches for the tests whose assertions do not depend on their size (imported by them).

An evaluation's logistic controls (``platt+meta``, ``tfidf+platt``, ``answer-text``,
``answer-surface``: :func:`acute.estimators.controls.logistic_cv`) each choose their L2 strength
by an inner 5-fold search over 8 strengths, 40 logistic fits per fit; the stacks ``acute-all`` and
``visible-all`` fit each of their first-level estimators once per inner fold (5), so in a test
that evaluates a store with the default controls these fits take most of the time (the README's
example: three quarters). A test that checks what the rows are, what they read, that two
computations of the same thing agree or that files are written, and not which strength a search
picks or how a stack's inner folds are drawn, runs them over :data:`STRENGTHS` and :data:`FOLDS`
and the stacks over :data:`STACK_FOLDS` inner folds instead: the same code, a smaller grid. The
full searches stay tested by the controls' own tests (tests/evaluation/test_controls.py,
test_visible_control.py), the stacks' 5 inner folds by tests/estimators/test_stacks.py and
tests/evaluation/test_stack_rows.py (``small_searches(stacks=False)``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

#: the strengths searched (two of the eight of ``acute.estimators.controls._CS``) and the inner folds
STRENGTHS = np.logspace(-3, 2, 8)[[3, 5]]
FOLDS = 2
#: the inner folds of a stack built by name (``acute.estimators.stacks.INNER_SPLITS``: 5)
STACK_FOLDS = 2


@contextlib.contextmanager
def small_searches(stacks: bool = True):
    """The logistic controls search :data:`STRENGTHS` over :data:`FOLDS` inner folds while inside,
    and (``stacks``) a stack made without naming its inner folds draws :data:`STACK_FOLDS`."""
    import inspect

    from acute.estimators import controls
    from acute.estimators.stacks import INNER_SPLITS, StackEstimator

    assert len(controls._CS) == 8 and controls._INNER_CV == 5, "the searches changed: update tests/smaller.py"
    init = StackEstimator.__init__
    defaults = tuple(STACK_FOLDS if name == "n_splits" else p.default
                     for name, p in inspect.signature(init).parameters.items() if p.default is not p.empty)
    assert INNER_SPLITS in init.__defaults__ and len(defaults) == len(init.__defaults__)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(controls, "_CS", STRENGTHS)
        mp.setattr(controls, "_INNER_CV", FOLDS)
        if stacks:
            mp.setattr(init, "__defaults__", defaults)
        yield
