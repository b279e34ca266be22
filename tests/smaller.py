"""Smaller searches for the tests whose assertions do not depend on their size (imported by them).

An evaluation's logistic controls (``platt+meta``, ``tfidf+platt``, ``answer-text``,
``answer-surface``: :func:`acute.estimators.controls.logistic_cv`) each choose their L2 strength
by an inner 5-fold search over 8 strengths, 40 logistic fits per fit; the stacks ``acute-all`` and
``visible-all`` fit each of them once per inner fold, so in a test that evaluates a store with
the default controls these searches take most of the time (the README's example: three quarters).
A test that checks what the rows are, what they read, that two computations of the same thing
agree or that files are written, and not which strength a search picks, runs them over
:data:`STRENGTHS` and :data:`FOLDS` instead: the same code, a smaller grid. The searches
themselves are tested at full size (tests/evaluation/test_controls.py, test_visible_control.py).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

#: the strengths searched (two of the eight of ``acute.estimators.controls._CS``) and the inner folds
STRENGTHS = np.logspace(-3, 2, 8)[[3, 5]]
FOLDS = 2


@contextlib.contextmanager
def small_searches():
    """The logistic controls search :data:`STRENGTHS` over :data:`FOLDS` inner folds while inside."""
    from acute.estimators import controls

    assert len(controls._CS) == 8 and controls._INNER_CV == 5, "the searches changed: update tests/smaller.py"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(controls, "_CS", STRENGTHS)
        mp.setattr(controls, "_INNER_CV", FOLDS)
        yield
