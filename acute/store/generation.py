"""How answers are generated and recorded: :class:`GenerationSettings`, built once where the
settings enter (a command's flags, a run's config, a probe's recorded settings) and passed on to
collection, extraction, the engines, the scorer and the service's job grouping. A store
manifest's ``generation`` block is its JSON (:meth:`GenerationSettings.to_json`); a probe
carries the block of its training store (``training_summary.generation``).

Its siblings: the sampled answers a collection draws beside the greedy one
(:class:`~acute.store.sampling.SamplingSettings`) are a field, ``samples``, since the manifest
records them inside the ``generation`` block and they are drawn with the same answer length and
stop strings; the prefix checkpoints (:mod:`acute.store.checkpoints`) are not: they are what a
store keeps of every record (its manifest's top-level ``checkpoints``, decided by the store and
checked on resume like its poolings), whoever generated the answers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..validation import check_count
from .format import DEFAULT_STORE_DTYPE, STORAGE_DTYPES
from .identity import DEFAULT_ENGINE
from .pooling import POOLS
from .sampling import SamplingSettings, parse_sampling

__all__ = ["BATCH_SIZE", "GenerationSettings"]

#: Prompts generated (or recorded) together in one batch unless asked otherwise: faster than 8 on
#: short and long answers, where 32 loses on long unique prompts (SmolLM2, one CPU thread;
#: benchmarks/batch_default.md).
BATCH_SIZE = 16


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """How answers are generated and recorded.

    ``max_new_tokens``: the longest answer in tokens (None: the task's for a collection, the
    probe's for a scorer; None in a manifest: responses not generated here). ``stop_strings``:
    where an answer stops besides EOS (None: the task's or the probe's). ``pool``: the positions
    pooled (``"decoding"``: those that decoded each answer token, ``"generated"``: the answer
    tokens themselves; :data:`acute.store.pooling.POOLS`). ``chat``: the chat template or plain
    prompts (None: the template when the tokenizer has one). ``batch_size``: prompts per batch.
    ``dtype``: the storage dtype of a store's pooled states. ``engine``: what generates
    (``"transformers"``, ``"vllm"``, or a started engine such as
    :class:`acute.engines.vllm.VllmEngine`). ``samples``: the answers sampled beside the greedy
    one (:class:`~acute.store.sampling.SamplingSettings`, None: none).

    Every field is checked when the settings are built (:class:`InputError` naming it), so a bad
    flag fails before a model is loaded. Frozen and hashable: the service groups jobs by them.
    """

    max_new_tokens: int | None = None
    stop_strings: tuple[str, ...] | None = None
    pool: str = "decoding"
    chat: bool | None = None
    batch_size: int = BATCH_SIZE
    dtype: str = DEFAULT_STORE_DTYPE
    engine: Any = DEFAULT_ENGINE
    samples: SamplingSettings | None = None

    def __post_init__(self):
        if self.max_new_tokens is not None:
            object.__setattr__(self, "max_new_tokens", check_count(self.max_new_tokens, "max_new_tokens"))
        if self.stop_strings is not None:
            object.__setattr__(self, "stop_strings", _strings(self.stop_strings, "stop_strings"))
        if self.pool not in POOLS:
            raise InputError(f"pool must be one of {POOLS}, got {self.pool!r}")
        if self.chat is not None and not isinstance(self.chat, bool):
            raise InputError(f"chat must be True, False or None (the tokenizer decides), got {self.chat!r}")
        object.__setattr__(self, "batch_size", check_count(self.batch_size, "batch_size"))
        if self.dtype not in STORAGE_DTYPES:
            raise InputError(f"dtype must be one of {', '.join(map(repr, STORAGE_DTYPES))}, got {self.dtype!r}")
        if not isinstance(self.engine, str) and not callable(getattr(self.engine, "generate", None)):
            raise InputError(f"engine must be an engine's name or a started engine, got {self.engine!r}")
        if self.samples is not None:
            object.__setattr__(self, "samples", parse_sampling(self.samples, "samples"))

    # -------------------------------------------------------------------------- resolving
    def for_task(self, task) -> "GenerationSettings":
        """These settings with the answer length and stop strings left unset taken from ``task``
        (its ``max_new_tokens`` and ``stop_strings``; none for no task)."""
        return dataclasses.replace(
            self,
            max_new_tokens=self.max_new_tokens if self.max_new_tokens is not None
            else getattr(task, "max_new_tokens", None),
            stop_strings=self.stop_strings if self.stop_strings is not None
            else tuple(getattr(task, "stop_strings", ()) or ()))

    def over(self, base: "GenerationSettings") -> "GenerationSettings":
        """``base`` with the answer length, stop strings and chat flag these settings set (not
        None) and their batch size: what a caller asks for over what a probe was trained with."""
        return dataclasses.replace(
            base,
            max_new_tokens=base.max_new_tokens if self.max_new_tokens is None else self.max_new_tokens,
            stop_strings=base.stop_strings if self.stop_strings is None else self.stop_strings,
            chat=base.chat if self.chat is None else self.chat, batch_size=self.batch_size)

    # -------------------------------------------------------------------------- JSON
    def to_json(self) -> dict:
        """The manifest's ``generation`` block: ``do_sample`` (False: the recorded answer is the
        greedy one), ``max_new_tokens``, ``stop_strings``, ``pool``, ``chat`` and, with samples,
        ``samples``. The batch size, the storage dtype and the engine are not in it (the
        manifest records the last two at its top level)."""
        out = {"do_sample": False, "max_new_tokens": self.max_new_tokens,
               "stop_strings": list(self.stop_strings or ()), "pool": self.pool, "chat": self.chat}
        if self.samples is not None:
            out["samples"] = self.samples.to_json()
        return out

    @classmethod
    def from_json(cls, block: Mapping | None, **fields: Any) -> "GenerationSettings":
        """The settings of a ``generation`` block (a store manifest's, a probe's training
        store's; None or empty: unknown, the defaults), with ``fields`` set beside it. A block
        from before a key was recorded reads it as unset (``pool``: ``"decoding"``)."""
        gen = block if isinstance(block, Mapping) else {}
        return cls(max_new_tokens=gen.get("max_new_tokens"), stop_strings=gen.get("stop_strings"),
                   pool=gen.get("pool") or "decoding", chat=gen.get("chat"), samples=gen.get("samples"), **fields)

    @classmethod
    def from_manifest(cls, manifest: Mapping) -> "GenerationSettings":
        """The settings a store was collected with: its ``generation`` block, its storage
        ``dtype`` and its engine (``"transformers"`` for a manifest without one)."""
        return cls.from_json(manifest.get("generation"), dtype=manifest.get("dtype") or DEFAULT_STORE_DTYPE,
                             engine=manifest.get("engine") or DEFAULT_ENGINE)


def _strings(values: Any, name: str) -> tuple[str, ...]:
    if isinstance(values, str):
        raise InputError(f"{name} must be a list of strings, not a single string")
    if not isinstance(values, Sequence):
        raise InputError(f"{name} must be a list of strings, got {values!r}")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InputError(f"{name}[{i}] must be a str, got {type(v).__name__}")
    return tuple(values)
