"""Every exception class of acute's domain errors, in one place.

Each is an :class:`AcuteError`, so callers (and the CLI, which maps them to a one-line message
and exit status 2) can catch one class; anything else is a bug and shows its traceback. Errors
about values the user passed are also ``ValueError`` (so ``except ValueError`` keeps working);
messages say what went wrong, name the argument, file, line or record, and what to do.
"""

from __future__ import annotations

__all__ = [
    "AcuteError",
    "ChecksumError",
    "CorruptStoreError",
    "DataError",
    "EngineError",
    "IncompatibleStoreError",
    "InputError",
    "ModelFetchError",
    "ModelLoadError",
    "ModelMismatchError",
    "ProbeFormatError",
    "StoreError",
    "TaskDataError",
    "UnknownEstimatorError",
    "UnknownModelCardError",
    "UnsupportedArchitectureError",
]


class AcuteError(Exception):
    """Base class of every acute domain error."""


class InputError(AcuteError, ValueError):
    """An argument or input value is not acceptable (the message names it and says why)."""


# ------------------------------------------------------------------------------ models
class ModelLoadError(AcuteError):
    """A model or tokenizer could not be loaded (wrong kind of model, unreadable file, offline hub)."""


class ModelFetchError(ModelLoadError):
    """Downloading a model card's weights failed; the message gives the command to run by hand."""


class ChecksumError(ModelFetchError):
    """Fetched weights do not match the sha256 pinned in the model card (nothing was cached)."""


class UnknownModelCardError(AcuteError, ValueError):
    """No model card has the requested name; the message lists the known cards."""


class UnsupportedArchitectureError(AcuteError, ValueError):
    """The decoder layers / final norm of a model could not be located."""


# -------------------------------------------------------------------------------- data
class DataError(AcuteError):
    """A data file (benchmark, JSONL, manifest) is malformed; the message names file and line."""


class TaskDataError(DataError, ValueError):
    """A benchmark file is malformed; the message names the file and (where known) the line."""


# ------------------------------------------------------------------------------- store
class StoreError(AcuteError, ValueError):
    """A store on disk cannot be used as asked."""


class CorruptStoreError(StoreError):
    """A committed file of a store is unreadable or inconsistent; the message names the file."""


class IncompatibleStoreError(StoreError):
    """Resuming a store whose manifest disagrees with the new one; the message names the key."""


# ------------------------------------------------------------------------ probes, estimators
class ProbeFormatError(AcuteError, ValueError):
    """A probe directory is malformed, truncated or tampered with (the message names the file)."""


class ModelMismatchError(AcuteError, ValueError):
    """A probe is used with a model whose fingerprint differs from the one it was trained on."""


class UnknownEstimatorError(AcuteError, ValueError):
    """An estimator name that is not known (the message lists the known ones)."""


# ------------------------------------------------------------------------------ engines
class EngineError(AcuteError):
    """An inference engine other than transformers (vLLM) is missing, of a version acute was not
    checked against, cannot load the model, or failed a request (the message names which)."""
