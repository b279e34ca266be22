"""Advisory ``flock`` locks of a store: the lock on the directory itself (exclusive for the
manifest's owner, shared for part writers) and each part's lock file (see :mod:`acute.store`)."""

from __future__ import annotations

import errno
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import StoreError
from .files import part_lock_name

try:
    import fcntl
except ImportError:  # pragma: no cover - no advisory locks (Windows): one writer at a time
    fcntl = None

__all__ = ["lock_part", "lock_store", "store_lock", "unlock_part"]

_NO_LOCKS_ERRNOS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _try_flock(fd: int, exclusive: bool) -> bool:
    """Take a non-blocking ``flock`` on ``fd``; False when another open file holds a conflicting
    one. Where the filesystem has no locks, warns and returns True (the caller goes unlocked)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno not in _NO_LOCKS_ERRNOS:
            raise
        warnings.warn(f"file locks are not supported here ({err}); make sure that one process "
                      "at most writes each store (or each part)", RuntimeWarning, stacklevel=3)
    return True


def lock_store(path: Path, exclusive: bool) -> int | None:
    """Lock the store directory itself: exclusive for the manifest's owner (a single writer,
    :func:`prepare_store`, :func:`finalize_store`), shared for part writers.

    Returns the open descriptor (closing it releases the lock; None where the platform has no
    ``fcntl``). StoreError when another process holds a conflicting lock; FileNotFoundError when
    the directory does not exist.
    """
    if not path.is_dir():
        raise FileNotFoundError(f"store directory not found: {path}")
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    if not _try_flock(fd, exclusive):
        os.close(fd)
        holder = ("part writers or another writer" if exclusive else
                  "a single StoreWriter, prepare_store or finalize_store")
        raise StoreError(
            f"{path}: the store is being written by another process ({holder} holds its lock); "
            "wait until it has finished"
        )
    return fd


@contextmanager
def store_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive store lock for the duration of a ``with`` block."""
    fd = lock_store(path, exclusive=True)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def lock_part(path: Path, part: int) -> int | None:
    """Exclusive lock on ``.part-{part:03d}.lock`` (created if needed); returns the descriptor
    (None where the platform has no ``fcntl``).

    StoreError naming the part and the store when another process holds it. The holder deletes
    the lock file when it releases it, so a lock won on a file that is no longer at the path is
    retried on a fresh one.
    """
    if fcntl is None:
        return None
    lock = path / part_lock_name(part)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        if not _try_flock(fd, exclusive=True):
            os.close(fd)
            raise StoreError(
                f"{path}: part {part} is already being written by another process "
                f"(it holds {lock.name}); give every process its own part"
            )
        try:
            at_path = os.stat(lock)
        except FileNotFoundError:
            at_path = None
        mine = os.fstat(fd)
        if at_path is not None and (at_path.st_dev, at_path.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)


def unlock_part(path: Path, part: int, fd: int) -> None:
    """Delete the part's lock file while still holding it, then release the lock."""
    try:
        (path / part_lock_name(part)).unlink(missing_ok=True)
    finally:
        os.close(fd)
