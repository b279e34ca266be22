"""Prefix checkpoints: the layer means over the first ``k`` generated tokens, kept at a schedule
of ``k`` while the answer is written.

A schedule (the store manifest's ``checkpoints``, ``{"first": [4, 8, 16, 32, 64], "every": 32}``
by default) names the token counts at which the recorder snapshots its running layer means:
every count in ``first``, then every ``every`` tokens past the largest of them. A record keeps
the snapshots at the schedule's counts below its answer's length and one at the final token,
so its last checkpoint equals its ``"mean"`` states. In a store they are one ragged tensor per
shard (``checkpoint_means`` ``[C, L+1, d]``, ``checkpoint_tokens`` int64 ``[C]`` and
``checkpoint_offsets`` int64 ``[n+1]``); :meth:`acute.store.Store.prefix_states` reads the states
a prefix probe sees after ``k`` tokens.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError

__all__ = ["DEFAULT_CHECKPOINTS", "REMEDY", "Schedule", "checkpoint_counts", "parse_schedule", "prefix_rows"]

#: The default schedule: 4, 8, 16, 32, 64, then every 32 tokens (96, 128, ...).
DEFAULT_CHECKPOINTS: dict = {"first": [4, 8, 16, 32, 64], "every": 32}
#: How a store without checkpoints gets them (named by every error about their absence).
REMEDY = ("collect the task again into a new store with `acute collect` (new collections keep "
          "them for every record)")


class Schedule:
    """A parsed checkpoint schedule (see the module docstring); ``to_json()`` is the manifest's value."""

    def __init__(self, first: tuple[int, ...], every: int):
        self.first = first
        self.every = every

    def __contains__(self, k: int) -> bool:
        if k in self.first:
            return True
        top = self.first[-1] if self.first else 0
        return k > top and (k - top) % self.every == 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and (self.first, self.every) == (other.first, other.every)

    def __repr__(self) -> str:
        return f"Schedule(first={list(self.first)}, every={self.every})"

    def to_json(self) -> dict:
        return {"first": list(self.first), "every": self.every}


def parse_schedule(value: Any, where: str = "checkpoints") -> Schedule:
    """A :class:`Schedule` from a manifest value (a dict with ``first``: increasing positive ints
    and ``every``: a positive int) or a Schedule; InputError naming ``where`` otherwise."""
    if isinstance(value, Schedule):
        return value
    if not isinstance(value, Mapping) or set(value) != {"first", "every"}:
        raise InputError(f"{where} must be a mapping with the keys 'first' and 'every' "
                         f"(e.g. {DEFAULT_CHECKPOINTS}), got {value!r}")
    first, every = value["first"], value["every"]

    def positive(x: Any) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1

    if not isinstance(first, (list, tuple)) or not all(positive(k) for k in first) \
            or any(b <= a for a, b in zip(first, first[1:])):
        raise InputError(f"{where}['first'] must be a list of increasing positive token counts, got {first!r}")
    if not positive(every):
        raise InputError(f"{where}['every'] must be a positive token count, got {every!r}")
    return Schedule(tuple(int(k) for k in first), int(every))


def checkpoint_counts(n_tokens: int, schedule: Schedule) -> np.ndarray:
    """int64: the token counts a record of ``n_tokens`` generated tokens keeps: the schedule's
    counts below ``n_tokens``, then ``n_tokens`` itself (nothing for an empty answer)."""
    if n_tokens < 1:
        return np.zeros(0, dtype=np.int64)
    counts = [k for k in schedule.first if k < n_tokens]
    top = schedule.first[-1] if schedule.first else 0
    counts += range(top + schedule.every, n_tokens, schedule.every)
    return np.asarray(counts + [n_tokens], dtype=np.int64)


def prefix_rows(tokens: np.ndarray, offsets: np.ndarray, k: int) -> np.ndarray:
    """Index into a ragged checkpoint tensor, per record, of the checkpoint a gate reads after
    ``k`` generated tokens: the last one at or below ``k`` tokens (the final one when the answer
    ended before ``k``). ``tokens`` int64 [C], ``offsets`` int64 [n+1]; InputError when ``k``
    falls before a record's first checkpoint."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k (generated tokens) must be a positive int, got {k!r}")
    out = np.empty(len(offsets) - 1, dtype=np.int64)
    for i in range(len(out)):
        own = tokens[offsets[i]:offsets[i + 1]]
        j = int(np.searchsorted(own, k, side="right")) - 1
        if j < 0:
            raise InputError(f"record {i} has no checkpoint at or below {k} tokens (its first is "
                             f"at {int(own[0]) if own.size else 'none'})")
        out[i] = offsets[i] + j
    return out
