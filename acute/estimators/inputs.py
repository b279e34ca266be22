"""The inputs of every estimator: one object of named per-record sources.

Every estimator, baseline and control of acute is a scikit-learn classifier
``fit(X, y, sample_weight=None)`` / ``predict_proba(X)`` whose ``X`` is one :class:`Inputs`:
arrays by source name, one row per record, all of the same length. Nothing travels beside
``X``: the raw confidence is one of its sources.

Sources (the names are the constants below):

* ``confidence`` (:data:`CONFIDENCE`): float64 ``[n]`` in [0, 1], the raw confidence (product of
  the generated tokens' probabilities);
* ``states@POOLING`` (:func:`states_source`): pooled hidden states ``[n, L+1, w]`` of a pooling
  spec of :mod:`acute.store.pooling`: ``states@mean`` (the answer's mean), ``states@last-answer``,
  ``states@last-prompt`` (the prompt's last token, before any answer), ``states@mean+last-answer``
  (two concatenated along the hidden axis);
* ``metadata`` (:data:`METADATA`): object ``[n, fields]``, the task metadata strings
  (:func:`acute.estimators.controls.metadata_matrix`);
* ``question`` (:data:`QUESTION`): object ``[n]``, the prompt text as the model saw it;
* ``prompt+reply`` (:data:`PROMPT_REPLY`): object ``[n]``, the prompt, a newline, the reply
  (:func:`acute.estimators.visible.reply_texts`);
* ``visible`` (:data:`VISIBLE`): object ``[n, k]``, the token log-probs' statistics, the reply's
  surface (length, finish reason, parse status, structure) and the question and reply texts
  (:func:`acute.estimators.visible.visible_inputs`);
* ``logprob-stats`` (:data:`LOGPROB_STATS`): float64 ``[n, 2]``, the generated tokens' mean
  log-prob and their lowest mean over sliding windows of a few tokens, DeepConf's signal
  (:func:`acute.estimators.prefix_controls.logprob_stats`; of the first ``k`` tokens in a prefix
  evaluation);
* ``agreement`` (:data:`AGREEMENT`): float64 ``[n, 3]``, the agreement of the record's sampled
  answers (:func:`acute.estimators.agreement.agreement_matrix`);
* ``groups`` (:data:`GROUPS`): object ``[n]``, the group of each record that folds must keep on
  one side of a split (e.g. its tool set). Not a signal: no estimator predicts from it; an
  estimator that draws folds of its own (a stack's inner folds) honours it when present, and
  treats every record as its own group without it. The evaluation adds it when its folds are
  grouped. It is scikit-learn's ``groups`` routed as a side input in ``X`` rather than in
  ``fit``'s signature.

**Declaring.** Each estimator names the sources it reads in ``sources`` (a class attribute, as
LM-Polygraph's ``stats_dependencies``; a property where its parameters decide, as a probe's
pooling). :func:`check_inputs` is the one check of ``X`` against an estimator: a missing
source is an :class:`~acute.errors.InputError` naming the estimator and the source.

**Checking.** An :class:`Inputs` checks its sources once, when it is built: every source has one
row per record; the confidence is :func:`acute.validation.check_confidence`'s and hidden states
:func:`~acute.validation.check_states`'s (a NaN or inf is refused naming the source and the
record's row); text and record arrays are taken as they are. Rows taken from a checked
:class:`Inputs` (:meth:`Inputs.take`) are not checked again.

**Planning.** :mod:`acute.estimators.plan` computes each source an evaluation needs once from a
store (:func:`acute.estimators.plan.store_inputs`) and each fit estimators share once per set of
training records; what it shares lives on the :class:`Inputs` of those records
(:meth:`Inputs.shared`), so it lives as long as they do.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping

import numpy as np

from ..errors import InputError
from ..store.pooling import DEFAULT_POOLING, parse_pooling
from ..validation import check_confidence, check_states

__all__ = ["AGREEMENT", "CONFIDENCE", "GROUPS", "LOGPROB_STATS", "METADATA", "PROMPT_REPLY", "QUESTION", "RECORD_SOURCES", "STATES_PREFIX", "VISIBLE",
           "Inputs", "check_inputs", "check_no_weights", "is_states_source", "source_pooling", "states_source"]

CONFIDENCE = "confidence"
METADATA = "metadata"
QUESTION = "question"
PROMPT_REPLY = "prompt+reply"
VISIBLE = "visible"
AGREEMENT = "agreement"
LOGPROB_STATS = "logprob-stats"
GROUPS = "groups"
#: The sources of the record itself (texts, metadata, the visible array): object arrays.
RECORD_SOURCES: tuple[str, ...] = (METADATA, QUESTION, PROMPT_REPLY, VISIBLE)
#: What every hidden-states source's name starts with; the pooling spec follows.
STATES_PREFIX = "states@"


def states_source(pooling: str = DEFAULT_POOLING) -> str:
    """The source name of the pooled states ``pooling`` (a spec of :mod:`acute.store.pooling`,
    checked): ``states@mean``, ``states@last-prompt``, ``states@mean+last-answer``, ..."""
    parse_pooling(pooling)
    return STATES_PREFIX + pooling


def is_states_source(name: str) -> bool:
    """Whether ``name`` names hidden states (``states@POOLING``)."""
    return isinstance(name, str) and name.startswith(STATES_PREFIX)


def source_pooling(name: str) -> str:
    """The pooling spec of a hidden-states source name (``states@last-prompt`` -> ``last-prompt``)."""
    if not is_states_source(name):
        raise InputError(f"{name!r} is not a hidden-states source (states@POOLING)")
    spec = name[len(STATES_PREFIX):]
    parse_pooling(spec)
    return spec


def _check_name(name: Any) -> str:
    if name in (CONFIDENCE, AGREEMENT, LOGPROB_STATS, GROUPS) or name in RECORD_SOURCES:
        return name
    if is_states_source(name):
        source_pooling(name)
        return name
    raise InputError(f"unknown source {name!r}; the sources are {CONFIDENCE!r}, {AGREEMENT!r}, {LOGPROB_STATS!r}, "
                     f"{GROUPS!r}, "
                     f"{', '.join(repr(s) for s in RECORD_SOURCES)} and 'states@POOLING' "
                     "(e.g. 'states@mean', 'states@last-prompt')")


def _check_source(name: str, values: Any) -> np.ndarray:
    where = f"the {name!r} source"
    if name == CONFIDENCE:  # the one confidence rule, its message as everywhere else
        return check_confidence(values, name=CONFIDENCE, allow_empty=True)
    if is_states_source(name):
        return check_states(values, name=where)
    if name in (AGREEMENT, LOGPROB_STATS):
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim != 2:
            raise InputError(f"{where} must be [n, signals], got shape {arr.shape}")
        bad = ~np.isfinite(arr).all(axis=1)
        if bad.any():
            raise InputError(f"{where} has a non-finite value in row {int(np.argmax(bad))}")
        return arr
    if name == GROUPS:
        arr = np.asarray([str(g) for g in values], dtype=object)
        if arr.ndim != 1:
            raise InputError(f"{where} must be one value per record ([n]), got shape {arr.shape}")
        return arr
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.ndim not in (1, 2):
        raise InputError(f"{where} must be an array of one row per record ([n] or [n, k]), got shape {arr.shape}")
    return arr


class Inputs:
    """Named per-record sources, all of ``n`` rows: the ``X`` of every estimator (module doc).

    ``Inputs({source: array, ...}, n=None)`` checks each source (names, lengths, finite numbers);
    ``n`` is needed only without sources (an estimator that reads none, ``constant``, still
    predicts ``n`` records). :meth:`of` builds the common case from states and a confidence.
    ``X[source]`` is an array, ``source in X`` asks, :attr:`sources` lists them, ``len(X)`` is
    the number of records and :meth:`take` the rows of some records.
    """

    def __init__(self, sources: Mapping[str, Any] | None = None, *, n: int | None = None):
        checked: dict[str, np.ndarray] = {}
        for name, values in dict(sources or {}).items():
            checked[_check_name(name)] = _check_source(name, values)
        self._init(checked, n)

    def _init(self, sources: dict[str, np.ndarray], n: int | None) -> None:
        lengths = {name: int(a.shape[0]) for name, a in sources.items()}
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise InputError(f"n must be a number of records (an int >= 0), got {n!r}")
            lengths = {"n": int(n), **lengths}
        if len(set(lengths.values())) > 1:
            raise InputError("the sources hold different numbers of records: "
                             + ", ".join(f"{k} {v}" for k, v in lengths.items()))
        if not lengths:
            raise InputError("Inputs without sources need n, the number of records")
        self._sources = sources
        self._n = next(iter(lengths.values()))
        self._shared: dict[Hashable, Any] = {}

    @classmethod
    def of(cls, states: Any = None, confidence: Any = None, *, pooling: str = DEFAULT_POOLING,
           n: int | None = None) -> Inputs:
        """The inputs of hidden ``states`` (pooled by ``pooling``) and a raw ``confidence``, each
        left out when None."""
        sources: dict[str, Any] = {}
        if states is not None:
            sources[states_source(pooling)] = states
        if confidence is not None:
            sources[CONFIDENCE] = confidence
        return cls(sources, n=n)

    @property
    def sources(self) -> tuple[str, ...]:
        """The names of the sources, in the order given."""
        return tuple(self._sources)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._sources

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._sources[name]
        except KeyError:
            raise InputError(f"no {name!r} source in these inputs (they hold: "
                             f"{', '.join(self._sources) or 'none'})") from None

    def get(self, name: str, default: Any = None) -> Any:
        return self._sources.get(name, default)

    def __repr__(self) -> str:
        return f"Inputs(n={self._n}, sources={list(self._sources)})"

    def take(self, index: Any) -> Inputs:
        """The rows ``index`` (integer indices, a boolean mask or a slice) of every source, as a new
        :class:`Inputs` with nothing shared (in memory, dtypes kept)."""
        rows = {name: np.asarray(a[index]) for name, a in self._sources.items()}
        out = object.__new__(Inputs)
        n = len(range(self._n)[index]) if isinstance(index, slice) else None
        if n is None and not rows:
            idx = np.asarray(index)
            n = int(idx.sum()) if idx.dtype == np.bool_ else int(idx.size)
        out._init(rows, n if not rows else None)
        return out

    def select(self, names: Iterable[str]) -> Inputs:
        """These inputs with only the sources ``names`` (each must be here), nothing shared."""
        out = object.__new__(Inputs)
        out._init({name: self[name] for name in names}, self._n)
        return out

    def with_source(self, name: str, values: Any) -> Inputs:
        """These inputs plus the source ``name`` (checked; the others are not checked again),
        nothing shared."""
        name = _check_name(name)
        out = object.__new__(Inputs)
        out._init({**self._sources, name: _check_source(name, values)}, self._n)
        return out

    def shared(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """What was made under ``key`` on these inputs, made now by ``make()`` the first time: the
        planner's memory of what estimators fitted on these records share
        (:mod:`acute.estimators.plan`)."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]


def check_inputs(X: Any, estimator: Any, sources: Iterable[str] | None = None) -> Inputs:
    """``X`` as the :class:`Inputs` ``estimator`` reads: an :class:`Inputs`, or a mapping of
    sources (checked into one), holding every source of ``sources`` (default
    ``estimator.sources``). Anything else, or a missing source, is an :class:`InputError` naming
    the estimator and the source."""
    what = " ".join(repr(estimator).split())
    if isinstance(X, Mapping):
        X = Inputs(X)
    elif not isinstance(X, Inputs):
        raise InputError(f"{what} reads an acute.estimators.inputs.Inputs of named sources, got "
                         f"{type(X).__name__}; build one with Inputs.of(states, confidence) or "
                         "Inputs({source: array, ...})")
    for name in (estimator.sources if sources is None else sources):
        if name not in X:
            raise InputError(f"{what} reads the {name!r} source, which these inputs lack (they hold: "
                             f"{', '.join(X.sources) or 'none'})")
    return X


def check_no_weights(estimator: Any, sample_weight: Any) -> None:
    """Refuse ``sample_weight`` for an estimator whose fit is unweighted, naming it."""
    if sample_weight is not None:
        raise InputError(f"{type(estimator).__name__} takes no sample_weight: its fit is unweighted")
