"""The checkpoint model's folder inside a probe folder, ``stop-early/``: one probe folder per
checkpoint (``k4/``, ``k8/``, ...) and ``calibration.safetensors``
(:mod:`acute.estimators.stop_early`), named with their sha256 by the answer probe's
``probe.json`` (its ``stop_early`` entry)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from safetensors.numpy import load_file, save_file

from ..errors import InputError, ProbeFormatError
from ..fileio import default_mode, file_sha256, json_ready
from .probe_format import MANIFEST_FILE, write_probe_folder
from .stop_early import STOP_CALIBRATION_FILE, STOP_EARLY_DIR, StopEarlyModel, checkpoint_dir

__all__ = ["read_stop_early", "write_stop_early"]


def write_stop_early(model: StopEarlyModel, folder: Path) -> dict:
    """Write the checkpoint model into ``folder`` (created): a probe folder per checkpoint and the
    calibration arrays; returns the ``stop_early`` entry of the answer probe's ``probe.json``."""
    folder.mkdir()
    probes = {}
    for k in model.checkpoints:
        sub = folder / checkpoint_dir(k)
        sub.mkdir()
        write_probe_folder(sub, model.probes[k].manifest, model.probes[k].arrays)
        probes[str(k)] = {"path": checkpoint_dir(k), "manifest_sha256": file_sha256(sub / MANIFEST_FILE)}
    cal = folder / STOP_CALIBRATION_FILE
    save_file(model.arrays(), str(cal), metadata={"format": "acute-stop-early"})
    with open(cal, "rb") as fh:
        os.fsync(fh.fileno())
    for p in (folder, cal):
        default_mode(p)
    return {"path": STOP_EARLY_DIR, "checkpoints": list(model.checkpoints), **json_ready(model.details),
            "probes": probes, "calibration": {"path": STOP_CALIBRATION_FILE, "sha256": file_sha256(cal),
                                              "n": int(model.scores.shape[0])}}


def read_stop_early(path: Path, entry: Any, load_folder: Callable[[Path], Any]) -> StopEarlyModel:
    """The checkpoint model the manifest entry ``entry`` names in probe folder ``path``: each
    checkpoint's probe (read by ``load_folder``, one probe folder to a probe) and the calibration
    arrays, checked against the sha256 recorded (:class:`ProbeFormatError` naming the file)."""
    man = path / MANIFEST_FILE
    folder = path / STOP_EARLY_DIR
    if not isinstance(entry, dict) or entry.get("path") != STOP_EARLY_DIR or not isinstance(entry.get("probes"), dict) \
            or not isinstance(entry.get("calibration"), dict):
        raise ProbeFormatError(f"{man}: 'stop_early' must name the folder {STOP_EARLY_DIR!r} with its probes "
                               f"and calibration, got {entry!r}")
    again = "export the probe again (acute export --with-stop-early)"
    probes = {}
    for k, item in entry["probes"].items():
        sub = folder / checkpoint_dir(int(k)) if str(k).isdigit() else None
        if sub is None or not isinstance(item, dict) or item.get("path") != sub.name:
            raise ProbeFormatError(f"{man}: stop_early probe {k!r} must name the folder k{k}, got {item!r}")
        if not (sub / MANIFEST_FILE).is_file():
            raise ProbeFormatError(f"{man} names a prefix probe in {sub}, but {sub / MANIFEST_FILE} is missing; {again}")
        if file_sha256(sub / MANIFEST_FILE) != item.get("manifest_sha256"):
            raise ProbeFormatError(f"{sub / MANIFEST_FILE}: sha256 does not match the one {man} records; this "
                                   "prefix probe was not exported with this answer probe")
        probes[int(k)] = load_folder(sub)
    cal = folder / STOP_CALIBRATION_FILE
    if not cal.is_file() or file_sha256(cal) != entry["calibration"].get("sha256"):
        raise ProbeFormatError(f"{cal}: missing, or its sha256 does not match the one {man} records; {again}")
    details = {k: v for k, v in entry.items() if k not in ("path", "checkpoints", "probes", "calibration")}
    try:
        return StopEarlyModel.from_arrays(probes, load_file(str(cal)), str(cal), details)
    except InputError as e:
        raise ProbeFormatError(str(e)) from None
