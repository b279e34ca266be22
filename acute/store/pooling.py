"""The one vocabulary of recorded states: which answer positions the recorder pools (``pool``)
and which pooled states a record keeps (``pooling``), and their concatenations.

Positions (``pool``, :data:`POOLS`; a store manifest's and a probe's generation setting):
``"decoding"`` (default: the states the answer's tokens were decoded from) or ``"generated"``
(the states at the answer's own tokens); :mod:`acute.extraction` says exactly which.

Per record and per layer output (``L + 1`` rows of ``d`` values, indexed as the recorder does)
acute keeps three pooled states (:mod:`acute.extraction` says exactly which positions):

* ``"mean"``: the mean over the answer's pooled positions (ACUTE's design and the default);
* ``"last-prompt"``: the state at the prompt's last token, before the answer;
* ``"last-answer"``: the state at the answer's last pooled position (where the model emitted
  its final token).

A *pooling spec* names one of them or several joined by ``+`` (``"mean+last-answer"``): their
states concatenated along the hidden axis, ``[L + 1, k * d]``. Views that compare vectors (the
cosine view) treat each of the ``k`` blocks separately; the PCA and single-layer views read the
concatenated vector. A probe records its spec (``ActivationProbe(pooling=...)``, the estimator
name suffix ``@SPEC`` as in ``acute-cosine-stacked@last-answer``, ``probe.json``'s
``input.pooling``) and whoever feeds it (evaluation, ``Scorer``, ``acute serve``) reads those
states. Stores collected before acute kept the last two hold ``"mean"`` only;
``acute rerecord`` adds the others without regenerating.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["DEFAULT_POOLING", "POOLINGS", "POOLS", "PoolMode", "Concatenated", "generation_states", "parse_pooling",
           "pooling_blocks", "store_states"]

#: Which answer positions the recorder pools (see the module doc).
POOLS: tuple[str, ...] = ("decoding", "generated")
PoolMode = Literal["decoding", "generated"]

#: Which pooled states a record keeps, per layer output.
POOLINGS: tuple[str, ...] = ("mean", "last-prompt", "last-answer")
DEFAULT_POOLING = "mean"
# Generation attribute of each pooling
_ATTRS = {"mean": "layer_means", "last-prompt": "last_prompt", "last-answer": "last_answer"}


def parse_pooling(spec: Any) -> tuple[str, ...]:
    """The poolings of ``spec`` in order (``"mean+last-answer"`` -> ``("mean", "last-answer")``).

    Raises :class:`InputError` for an unknown or repeated pooling, naming the known ones."""
    if not isinstance(spec, str) or not spec:
        raise InputError(f"pooling must be a non-empty string such as 'mean' or 'mean+last-answer', got {spec!r}")
    parts = tuple(spec.split("+"))
    for p in parts:
        if p not in POOLINGS:
            raise InputError(f"unknown pooling {p!r} in {spec!r}; choose from {', '.join(POOLINGS)} "
                             "or join several with '+'")
    if len(set(parts)) != len(parts):
        raise InputError(f"pooling {spec!r} names a pooling twice")
    return parts


def pooling_blocks(spec: str) -> int:
    """How many pooled states ``spec`` concatenates."""
    return len(parse_pooling(spec))


class Concatenated:
    """Row access to several ``[n, L+1, d]`` arrays (e.g. a store's memory maps) as one
    ``[n, L+1, k*d]`` array, concatenated only for the rows read (``x[rows]``)."""

    def __init__(self, parts: Sequence[Any]):
        shapes = {tuple(p.shape) for p in parts}
        if len(parts) < 2 or len(shapes) != 1:
            raise InputError(f"Concatenated needs two or more arrays of one shape, got shapes {sorted(shapes)}")
        self.parts = list(parts)
        n, layers, d = next(iter(shapes))
        self.shape = (n, layers, d * len(parts))
        self.ndim = 3
        self.dtype = np.result_type(*[p.dtype for p in parts])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        return np.concatenate([np.asarray(p[rows]) for p in self.parts], axis=-1)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


def store_states(store: Any, spec: str = DEFAULT_POOLING):
    """A store's states for ``spec``: ``store.states(p)`` for one pooling (a memory map), a
    :class:`Concatenated` of them for several. The store names what it lacks."""
    parts = parse_pooling(spec)
    if parts == ("mean",):
        return store.layer_means
    arrays = [store.states(p) for p in parts]
    return arrays[0] if len(arrays) == 1 else Concatenated(arrays)


def generation_states(generations: Sequence[Any], spec: str = DEFAULT_POOLING) -> np.ndarray:
    """float32 ``[n, L+1, k*d]``: the ``spec`` states of recorded generations
    (:class:`acute.extraction.Generation`)."""
    parts = parse_pooling(spec)
    rows = []
    for g in generations:
        blocks = [getattr(g, _ATTRS[p], None) for p in parts]
        if any(b is None for b in blocks):
            missing = [p for p, b in zip(parts, blocks) if b is None]
            raise InputError(f"a generation has no {' or '.join(missing)} states (pooling {spec!r})")
        rows.append(blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=-1))
    return np.stack(rows).astype(np.float32, copy=False)
