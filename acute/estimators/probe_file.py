"""Loading a probe folder (:mod:`acute.estimators.probe_format`) written by
:meth:`acute.estimators.probes.ActivationProbe.save` or :meth:`ExportedProbe.save`:
:func:`load_probe` reads, checks and validates it in pure numpy, never unpickling, with the
question-only probe and the checkpoint model it names.

:class:`ExportedProbe`, ``forest_arrays``, ``forest_proba`` and the format's names stay importable
from here (``from acute.estimators.probe_file import load_probe, ExportedProbe``); their homes
are :mod:`acute.estimators.exported_probe` and :mod:`acute.estimators.probe_format`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..errors import ProbeFormatError
from .exported_probe import ExportedProbe, forest_arrays, forest_proba, model_block  # noqa: F401 (importable here)
from .probe_format import (ARRAYS_FILE, FORMAT, FORMAT_VERSION, MANIFEST_FILE, PRECHECK_DIR,  # noqa: F401
                           PRECHECK_POOLING, check_precheck_probe, read_probe_folder, view_kind)
from ..fileio import file_sha256
from .stack_file import ExportedStack, is_stack_folder, load_stack
from .stop_early_folder import read_stop_early

__all__ = ["load_probe"]

logger = logging.getLogger(__name__)


def load_probe(path: str | os.PathLike) -> ExportedProbe | ExportedStack:
    """Load a probe directory written by :meth:`ActivationProbe.save` (no unpickling), or a stack
    folder (``acute export --estimator acute-all``: :func:`acute.estimators.stack_file.load_stack`),
    with the question-only probe and checkpoint model either holds.

    Raises ``FileNotFoundError`` naming a missing directory/file, and :class:`ProbeFormatError`
    (a ``ValueError``) naming the file when ``probe.json`` is not a valid manifest, when
    ``probe.safetensors`` does not match its recorded sha256 (truncated or tampered), or when
    an array has the wrong dtype/shape/structure. A question-only probe the manifest names
    (``precheck``) is loaded too, as ``.precheck``: missing, another export's (its
    ``probe.json`` sha256 differs) or one that needs more than the last-prompt states is a
    :class:`ProbeFormatError`. So is the checkpoint model it names (``stop_early``), loaded as
    ``.stop_early``. A probe without a validity domain (``domain``) loads with one warning saying
    its domain is unknown.
    """
    # a stack: its own format (acute.estimators.stack_file), the same nested folders
    probe = load_stack(path) if is_stack_folder(path) else _load_one(Path(path))
    entry = probe.manifest.get("precheck")
    if entry is not None:
        probe.precheck = _load_precheck(Path(path), entry)
    entry = probe.manifest.get("stop_early")
    if entry is not None:
        probe.stop_early = read_stop_early(Path(path), entry, _load_one)
    if probe.domain is None:
        logger.warning("%s records no validity domain (written before acute recorded one): the engine, "
                       "dtype, quantisation, pooling and prompt format it was fitted and certified under are "
                       "unknown, so scoring under another setting cannot be told; it is used as it is. Export "
                       "it again, or `acute recertify` it on a store of the setting you serve, to record one",
                       Path(path) / MANIFEST_FILE)
    return probe


def _load_precheck(path: Path, entry: Any) -> ExportedProbe:
    """The question-only probe the manifest entry ``entry`` names in probe folder ``path``."""
    man = path / MANIFEST_FILE
    if not isinstance(entry, dict) or entry.get("path") != PRECHECK_DIR:  # never another path
        raise ProbeFormatError(f"{man}: 'precheck' must name the folder {PRECHECK_DIR!r}, got {entry!r}")
    sub = path / PRECHECK_DIR
    if not (sub / MANIFEST_FILE).is_file():
        raise ProbeFormatError(f"{man} names a question-only probe in {sub}, but {sub / MANIFEST_FILE} "
                               "is missing; export the probe again (acute export --with-precheck)")
    if file_sha256(sub / MANIFEST_FILE) != entry.get("manifest_sha256"):
        raise ProbeFormatError(f"{sub / MANIFEST_FILE}: sha256 does not match the one {man} records; "
                               "this question-only probe was not exported with this answer probe")
    probe = _load_one(sub)
    if probe.manifest.get("precheck") is not None:
        raise ProbeFormatError(f"{sub / MANIFEST_FILE}: a question-only probe holds no precheck of its own")
    check_precheck_probe(probe, str(sub))
    return probe


def _load_one(path: Path) -> ExportedProbe:
    """One probe folder's own files, validated (see :func:`load_probe`)."""
    manifest, arrays, arr_path = read_probe_folder(path)
    try:
        return ExportedProbe(manifest, arrays, source=str(arr_path))
    except ProbeFormatError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ProbeFormatError(f"{path / MANIFEST_FILE}: malformed manifest ({exc!r})") from None
