"""Exception classes for acute's domain errors.

Bad arguments raise ``ValueError`` and missing files ``FileNotFoundError``; everything else that
is specific to acute derives from :class:`AcuteError`, so callers (and the CLI) can catch one class
and print its message, which always says what went wrong and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "AcuteError",
    "ModelLoadError",
    "ModelFetchError",
    "ChecksumError",
    "UnknownModelCardError",
    "DataError",
    "StoreError",
]


class AcuteError(Exception):
    """Base class of every acute domain error."""


class ModelLoadError(AcuteError):
    """A model or tokenizer could not be loaded (wrong kind of model, unreadable file, offline hub)."""


class ModelFetchError(ModelLoadError):
    """Downloading a model card's weights failed; the message gives the command to run by hand."""


class ChecksumError(ModelFetchError):
    """Fetched weights do not match the sha256 pinned in the model card (nothing was cached)."""


class UnknownModelCardError(AcuteError, ValueError):
    """No model card has the requested name; the message lists the known cards."""


class DataError(AcuteError):
    """A data file (benchmark, JSONL, manifest) is malformed; the message names file and line."""


class StoreError(AcuteError):
    """An activation store is missing, incomplete or inconsistent."""
