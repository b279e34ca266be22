"""Small shared helpers with side effects: atomic text files and optional progress bars."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable

TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """fsync a directory so renames inside it are durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def default_mode(path: str | Path) -> None:
    """Give ``path`` the permissions a plain ``open``/``mkdir`` would (0666/0777 minus the
    umask): ``tempfile`` creates files and folders private, which must not leak into outputs."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~mask)


def tmp_path(final: Path) -> Path:
    """A new hidden temporary file next to ``final`` (``.<name>.<random>.tmp``), with the
    default permissions of a new file."""
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=TMP_SUFFIX, dir=final.parent)
    os.close(fd)
    default_mode(name)
    return Path(name)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one, never a
    part: write a temporary file in the same folder, fsync it, rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def progress(iterable: Iterable, total: int, enabled: bool, desc: str):
    """``iterable`` wrapped in a tqdm bar on stderr when ``enabled``, else unchanged."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr)
