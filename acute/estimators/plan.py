"""The planner: each source computed once per store, each shared fit once per set of records.

**Sources.** :func:`store_inputs` builds the :class:`acute.estimators.inputs.Inputs` of a store
for the sources a set of estimators declares (:func:`sources_of`): the raw confidence, the
hidden states of each pooling spec (read once, float32), the metadata, the texts and the visible
array. Folds take rows of it (:meth:`~acute.estimators.inputs.Inputs.take`).

**Shared fits.** The estimators of one evaluation fold are fitted on the same training records,
and many of them fit the same things: a plain probe and its stacked variant grow the same forest
on the same features, ``auto`` compares candidates whose forests those are and refits one of
them, and ``question-only`` and ``question+confidence`` read one forest. A **piece** is such a
thing, named by a key: two pieces with equal keys give equal results on the same records, bit for
bit (a forest's key holds its source, its features and every setting that decides its trees,
never ``n_jobs``; an unseeded piece has a key of its own).

An estimator that can share declares ``needs()``: the pieces its fit computes, known before
anything is fitted (e.g. :meth:`acute.estimators.probes.ActivationProbe.needs`: a forest on a
view, grown with its out-of-bag probabilities when the probe calibrates on them, or the fold
forests of its out-of-fold calibration). Its ``fit(X, y)`` takes every piece from
:func:`shared_pieces` of its records: the :class:`Pieces` that the inputs ``X`` keep for the
labels ``y``, which compute a piece the first time it is asked for and hand the same object to
every later request. A fit alone and a planned fit therefore run the same code; estimators
without ``needs`` (the baselines, the controls over records) share nothing.

:class:`FitPlan` is the planner of one set of training records ``(X, y)``: ``declare`` each
estimator, then ``fit`` each. Declaring first is what lets one computation serve every need: a
forest that one estimator needs plainly and another with out-of-bag probabilities is grown once,
with them (they change no tree); and a fitted estimator is itself shared (``auto``'s refit is the
named probe of the same settings).
"""

from __future__ import annotations

import hashlib
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from ..store.pooling import store_states
from ..validation import check_correct
from .controls import metadata_matrix
from .agreement import agreement_matrix, store_task
from .inputs import AGREEMENT, CONFIDENCE, METADATA, PROMPT_REPLY, QUESTION, VISIBLE, Inputs, is_states_source, source_pooling
from .visible import reply_texts, visible_inputs

__all__ = ["FitPlan", "Piece", "Pieces", "estimator_key", "needs", "shared_pieces", "sources_of", "store_inputs"]


# ------------------------------------------------------------------------------ sources
def sources_of(estimators: Iterable[Any]) -> tuple[str, ...]:
    """Every source the ``estimators`` read (their ``sources``), each once, in order."""
    return tuple(dict.fromkeys(s for est in estimators for s in est.sources))


def store_inputs(store: Any, sources: Sequence[str], metadata_fields: Sequence[str] | None = None) -> Inputs:
    """The :class:`Inputs` of every record of ``store`` holding ``sources``, each computed once: the
    raw confidence (``store.raw_confidence``), hidden states per pooling spec (float32, in
    memory; the store names a pooling it lacks), the ``[n, fields]`` metadata strings of
    ``metadata_fields``, the prompts, the prompts followed by the replies, the visible array
    (the store's records and token log-probs) and the agreement of the sampled answers."""
    where = str(getattr(store, "path", "the store"))
    out: dict[str, Any] = {}
    for s in dict.fromkeys(sources):
        if s == CONFIDENCE:
            out[s] = np.asarray(store.raw_confidence, dtype=np.float64)
        elif s == METADATA:
            out[s] = metadata_matrix(store.records, list(metadata_fields or ()), where=where)
        elif s == QUESTION:
            out[s] = np.asarray([r.get("prompt") for r in store.records], dtype=object)
        elif s == PROMPT_REPLY:
            out[s] = reply_texts(store.records, where=where)
        elif s == VISIBLE:
            out[s] = visible_inputs(store.records, getattr(store, "token_logprobs", None), where=where)
        elif is_states_source(s):
            out[s] = np.asarray(store_states(store, source_pooling(s)), dtype=np.float32)
        elif s == AGREEMENT:
            out[s] = agreement_matrix(store.records, store_task(store.manifest), where=where)
        else:  # not a source: Inputs refuses it, naming the sources there are
            out[s] = None
    return Inputs(out, n=len(store.ids))


# ------------------------------------------------------------------------------ pieces
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

    def compute(self, X: Inputs, y: np.ndarray) -> Any:
        """The piece fitted on the records' inputs ``X`` and labels ``y``."""
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
    """The pieces computed on one set of records (inputs ``X``, labels ``y``), each once."""

    def __init__(self, X: Inputs, y: np.ndarray):
        self.X, self.y = X, y
        self._results: dict[Hashable, Any] = {}
        self._declared: dict[Hashable, Piece] = {}
        self._fitted: dict[Hashable, Any] = {}

    def declare(self, pieces: Iterable[Piece]) -> None:
        """Record what estimators will need, before any is fitted (declaring again is harmless)."""
        for piece in pieces:
            family = piece.family()
            self._declared[family] = piece if family not in self._declared else piece.merge(self._declared[family])

    def get(self, piece: Piece) -> Any:
        """``piece`` computed on these records: the result computed earlier for its key, else
        computed now as its declarations ask."""
        key = piece.key()
        if key in self._results and piece.satisfied_by(self._results[key]):
            return self._results[key]
        declared = self._declared.get(piece.family())
        todo = piece if declared is None else piece.merge(declared)
        self._results[key] = todo.compute(self.X, self.y)
        return self._results[key]

    def fitted(self, estimator: Any) -> Any:
        """``estimator`` fitted on these records (``fit(X, y)``), or the estimator of the same key
        fitted on them earlier (:func:`estimator_key`)."""
        key = estimator_key(estimator)
        if key not in self._fitted:
            self._fitted[key] = estimator.fit(self.X, self.y)
        return self._fitted[key]


def _labels_key(y: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(y, dtype=np.int64).tobytes()).hexdigest()


def shared_pieces(X: Inputs, y: np.ndarray) -> Pieces:
    """The :class:`Pieces` of the records of ``X`` labelled ``y`` (checked 0/1 labels): kept by
    ``X`` (:meth:`acute.estimators.inputs.Inputs.shared`), one per labelling, so that every
    estimator fitted on the same inputs and labels shares them."""
    y = np.asarray(y)
    return X.shared(("pieces", _labels_key(y)), lambda: Pieces(X, y))


class FitPlan:
    """The planner of one set of training records, inputs ``X`` and labels ``y``: every estimator
    fitted on them declares its needs (:meth:`declare`), then each is fitted (:meth:`fit`)."""

    def __init__(self, X: Inputs, y: Any):
        self.X = X
        self.y = check_correct(y, len(X))
        self.pieces = shared_pieces(X, self.y)

    def declare(self, estimator: Any) -> None:
        self.pieces.declare(needs(estimator))

    def fit(self, estimator: Any) -> Any:
        """``estimator`` fitted on the plan's records (the estimator of the same key when one was
        fitted on them already)."""
        return self.pieces.fitted(estimator)
