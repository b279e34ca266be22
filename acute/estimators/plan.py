"""Fits shared by a planner: each piece fitted once for every estimator that needs it.

The estimators of one evaluation fold are fitted on the same training records, and many of them
fit the same things: a plain probe and its stacked variant grow the same forest on the same
features, ``auto`` compares candidates whose forests those are and refits one of them, and
``question-only`` and ``question+confidence`` read one forest. A **piece** is such a thing, named
by a key: two pieces with equal keys give equal results on the same records, bit for bit (a
forest's key holds its features and every setting that decides its trees, never ``n_jobs``; an
unseeded piece has a key of its own).

An estimator that can share says so with two methods beside scikit-learn's plain
``fit(states, correct, confidence)``:

* ``needs()``: the pieces its fit computes, declared before anything is fitted (e.g.
  :meth:`acute.estimators.probes.ActivationProbe.needs`: a forest on a view, grown with its
  out-of-bag probabilities when the probe calibrates on them, or the fold forests of its
  out-of-fold calibration);
* ``fit_with(pieces, states, correct, confidence)``: its fit, taking every piece from
  :class:`Pieces`, which computes a piece the first time it is asked for and hands the same
  object to every later request.

Its ``fit`` is :func:`fit_alone`: the same fit from a :class:`Pieces` of its own needs only, so a
shared fit and a fit alone run the same code. Estimators without these methods (the baselines,
the controls over records) are fitted by their ``fit``.

:class:`FitPlan` is the planner of one set of training records (one fold): ``declare`` each
estimator with its input, then ``fit`` each; estimators that read the same input array (the same
object) share its pieces, and a fitted estimator is itself a piece (``auto``'s refit is the named
probe of the same settings). Declaring first is what lets one computation serve every need: a
forest that one estimator needs plainly and another with out-of-bag probabilities is grown once,
with them (they change no tree).
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable

__all__ = ["FitPlan", "Piece", "Pieces", "estimator_key", "fit_alone", "needs"]


class Piece:
    """Something fitted on a plan's training records that several estimators may need.

    Subclasses define :meth:`key` and :meth:`compute`; :meth:`family`, :meth:`merge` and
    :meth:`satisfied_by` let declarations of one piece in different forms meet (a forest declared
    with and without out-of-bag probabilities)."""

    def key(self) -> Hashable:
        """Equal keys: equal results on the same records."""
        raise NotImplementedError

    def family(self) -> Hashable:
        """What declarations merge by (default: the key); may be known before fitting where the
        key is not (a searched layer's forest, before the search)."""
        return self.key()

    def merge(self, declared: Piece) -> Piece:
        """This piece as it must be computed given a declaration of its family (default: as is)."""
        return self

    def satisfied_by(self, result: Any) -> bool:
        """Whether an already computed result of this key serves this request (default: yes)."""
        return True

    def compute(self, pieces: Pieces, states: Any, correct: Any, confidence: Any) -> Any:
        raise NotImplementedError


def needs(estimator: Any) -> tuple[Piece, ...]:
    """The pieces ``estimator`` declares (``estimator.needs()``), none for an estimator that
    shares nothing."""
    method = getattr(estimator, "needs", None)
    return tuple(method()) if method is not None else ()


def estimator_key(estimator: Any) -> Hashable:
    """What identifies a fit of ``estimator`` on given records: its class and its parameters but
    ``n_jobs`` (which changes no number); an unseeded estimator (``random_state=None``) is its
    own key."""
    params = estimator.get_params(deep=False)
    if "random_state" in params and params["random_state"] is None:
        return ("unseeded", id(estimator))
    params.pop("n_jobs", None)
    return (type(estimator).__module__, type(estimator).__qualname__, repr(sorted(params.items())))


class Pieces:
    """The pieces computed on one input of one set of training records, each once."""

    def __init__(self):
        self._results: dict[Hashable, Any] = {}
        self._declared: dict[Hashable, Piece] = {}
        self._fitted: dict[Hashable, Any] = {}

    def declare(self, pieces: Iterable[Piece]) -> None:
        """Record what estimators will need, before any is fitted."""
        for piece in pieces:
            family = piece.family()
            self._declared[family] = piece if family not in self._declared else piece.merge(self._declared[family])

    def get(self, piece: Piece, states: Any, correct: Any, confidence: Any) -> Any:
        """``piece`` computed on these records: the result computed earlier for its key, else
        computed now as its declarations ask."""
        key = piece.key()
        if key in self._results and piece.satisfied_by(self._results[key]):
            return self._results[key]
        declared = self._declared.get(piece.family())
        todo = piece if declared is None else piece.merge(declared)
        self._results[key] = todo.compute(self, states, correct, confidence)
        return self._results[key]

    def fitted(self, estimator: Any, states: Any, correct: Any, confidence: Any = None) -> Any:
        """``estimator`` fitted on these records, or the estimator of the same key fitted earlier
        (:func:`estimator_key`)."""
        key = estimator_key(estimator)
        if key not in self._fitted:
            method = getattr(estimator, "fit_with", None)
            self._fitted[key] = (method(self, states, correct, confidence) if method is not None
                                 else estimator.fit(states, correct, confidence=confidence))
        return self._fitted[key]


def fit_alone(estimator: Any, states: Any, correct: Any, confidence: Any = None) -> Any:
    """``estimator.fit_with`` from the pieces of its own needs: what its ``fit`` does."""
    pieces = Pieces()
    pieces.declare(needs(estimator))
    return estimator.fit_with(pieces, states, correct, confidence)


class FitPlan:
    """The planner of one set of training records: every estimator fitted on them declares its
    needs (:meth:`declare`), then each is fitted (:meth:`fit`) from the pieces of its input."""

    def __init__(self):
        self._inputs: list[tuple[Any, Pieces]] = []

    def pieces(self, states: Any) -> Pieces:
        """The pieces over the input ``states`` (one per input object)."""
        for given, pieces in self._inputs:
            if given is states:
                return pieces
        self._inputs.append((states, Pieces()))
        return self._inputs[-1][1]

    def declare(self, estimator: Any, states: Any) -> None:
        self.pieces(states).declare(needs(estimator))

    def fit(self, estimator: Any, states: Any, correct: Any, confidence: Any = None) -> Any:
        """``estimator`` fitted on the plan's records from ``states``'s pieces (the estimator of
        the same key when one was fitted on them already)."""
        return self.pieces(states).fitted(estimator, states, correct, confidence)
