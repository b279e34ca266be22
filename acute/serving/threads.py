"""Several batches at once: what the service shares between the batcher's workers when an engine
batches continuously itself (vLLM: ``acute serve --engine vllm`` or ``--upstream URL``).

A batch taken while others generate joins them in the engine at its next step, so the service
runs ``concurrent_batches`` of them, each in a worker thread of the
:class:`~acute.serving.batcher.Batcher`. They share the scorer: its probe (read-only), its
engine (thread-safe) and its tokenizer, which is not thread-safe (a fast tokenizer switches
settings such as ``split_special_tokens`` per call, :mod:`acute.serving.user_text`), so every
call of the tokenizer holds one lock (:class:`LockedTokenizer`). The transformers model runs
only given responses then, one batch at a time (:mod:`acute.serving.jobs`).
"""

from __future__ import annotations

import copy
import functools
import threading

from ..errors import InputError

__all__ = ["LockedTokenizer", "concurrent_scorer"]


class LockedTokenizer:
    """``tokenizer`` whose every call (itself, or one of its methods) holds one lock."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._lock = threading.RLock()

    def __getattr__(self, name):
        value = getattr(self._tokenizer, name)
        if not callable(value) or isinstance(value, type):
            return value

        @functools.wraps(value)
        def locked(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)
        return locked

    def __call__(self, *args, **kwargs):
        with self._lock:
            return self._tokenizer(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._tokenizer)


def concurrent_scorer(scorer, batches: int):
    """``scorer`` as ``batches`` batcher workers may share it: itself for one, else a shallow copy
    whose tokenizer is a :class:`LockedTokenizer`; :class:`InputError` for more than one without
    an engine (a transformers model runs one batch at a time)."""
    if batches == 1:
        return scorer
    if getattr(scorer, "engine", None) is None:
        raise InputError(f"concurrent_batches={batches} needs an engine that batches continuously (vLLM: "
                         "--engine vllm or --upstream URL); a transformers model runs one batch at a time")
    shared = copy.copy(scorer)
    shared.tokenizer = LockedTokenizer(scorer.tokenizer)
    return shared
