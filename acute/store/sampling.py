"""Sampling settings: how many answers a collection samples per question beside the greedy one,
and at which temperature and nucleus (top-p). A store collected with them records them in its
manifest's ``generation`` block (``"samples"``), so a resume with other settings is refused like
any other change of generation settings."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Mapping

import numpy as np

from ..errors import InputError

__all__ = ["SAMPLING_ENGINES", "SamplingSettings", "parse_sampling", "row_seed"]

#: The engines that draw samples: acute's transformers sampler (:mod:`acute.extraction.sampling`)
#: and a plain vLLM engine beside the recording one (:mod:`acute.engines.vllm_sampling`).
SAMPLING_ENGINES = ("transformers", "vllm")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """``k`` sampled answers per question (at least 2) at ``temperature`` (> 0) with nucleus
    ``top_p`` (in (0, 1]), each drawn from its own random stream seeded by ``seed``, the record
    id and the sample's index (:func:`row_seed`): a record's samples do not depend on which
    other records shared its batch, so a resumed collection draws what an uninterrupted one would.
    ``engine``: what draws them (:data:`SAMPLING_ENGINES`; the same seeds give other samples on
    another engine, so the manifest records it and a resume on another engine is refused; the
    default, ``"transformers"``, is left out of the JSON). Construct through
    :func:`parse_sampling` (or directly: the checks run either way)."""

    k: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    engine: str = "transformers"

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or self.k < 2:
            raise InputError(f"samples must be an int >= 2 (agreement needs at least two samples), got {self.k!r}")
        if not _number(self.temperature) or not np.isfinite(self.temperature) or self.temperature <= 0:
            raise InputError(f"temperature must be > 0 with samples (0 would repeat the greedy answer), "
                             f"got {self.temperature!r}")
        if not _number(self.top_p) or not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise InputError(f"seed must be an int, got {self.seed!r}")
        if self.engine not in SAMPLING_ENGINES:
            raise InputError(f"engine (what draws the samples) must be one of {', '.join(SAMPLING_ENGINES)}, "
                             f"got {self.engine!r}")
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))
        object.__setattr__(self, "seed", int(self.seed))

    def to_json(self) -> dict:
        """The manifest's ``generation["samples"]`` (``engine`` only when it is not transformers)."""
        out = dataclasses.asdict(self)
        if out["engine"] == "transformers":
            del out["engine"]
        return out


def parse_sampling(value: Any, where: str = "samples") -> SamplingSettings:
    """:class:`SamplingSettings` from a manifest's ``generation["samples"]`` (a mapping with
    ``k`` and optionally ``temperature``, ``top_p``, ``seed``) or from settings; InputError
    naming ``where`` otherwise."""
    if isinstance(value, SamplingSettings):
        return value
    if not isinstance(value, Mapping) or "k" not in value or set(value) - {"k", "temperature", "top_p", "seed",
                                                                           "engine"}:
        raise InputError(f"{where} must be a mapping with 'k' and optionally 'temperature', 'top_p', "
                         f"'seed' and 'engine', got {value!r}")
    try:
        return SamplingSettings(**dict(value))
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def row_seed(seed: int, record_id: Any, index: int) -> int:
    """The 63-bit seed of sample ``index`` of the record ``record_id``."""
    text = f"{seed}\x1f{record_id!r}\x1f{index}".encode("utf-8")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1
