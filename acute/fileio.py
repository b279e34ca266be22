"""File and JSON helpers: JSON conversion, JSONL reading, atomic text files and folders, file
digests, progress bars.

One implementation each, used by every module that writes JSON (:func:`json_ready`), reads
JSON lines (:func:`iter_jsonl`), replaces a file or a folder atomically
(:func:`write_text_atomic`, :func:`replace_dir`) or checks a file's sha256 (:func:`file_sha256`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import uuid
from contextlib import contextmanager
from numbers import Integral, Real
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import numpy as np

from .errors import DataError, InputError

__all__ = ["TMP_SUFFIX", "atomic_path", "default_mode", "file_sha256", "fsync_dir", "iter_jsonl", "json_ready",
           "progress", "progress_bar", "read_json", "replace_dir", "staged_dir", "tmp_path", "write_json_durable",
           "write_text_atomic"]

NONFINITE_POLICIES = ("null", "clip", "error")
CLIP_INFINITY = 1e30  # what ``nonfinite="clip"`` writes for +/-inf (keeps the sign)


def json_ready(obj: Any, *, where: str = "value", nonfinite: str = "null") -> Any:
    """``obj`` with numpy scalars and arrays, tuples and paths turned into JSON types.

    Dict keys become strings; bools (numpy's too) stay bools. Non-finite floats follow
    ``nonfinite``: ``"null"`` (NaN and +/-inf become None), ``"clip"`` (NaN becomes None,
    +/-inf become +/-1e30, keeping the sign) or ``"error"`` (:class:`InputError` naming
    ``where``). Any other type is an :class:`InputError` naming ``where``.
    """
    if nonfinite not in NONFINITE_POLICIES:
        raise InputError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")
    if isinstance(obj, dict):
        return {str(k): json_ready(v, where=f"{where}[{k!r}]", nonfinite=nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v, where=where, nonfinite=nonfinite) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist(), where=where, nonfinite=nonfinite)
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, Integral):
        return int(obj)
    if isinstance(obj, Real):
        f = float(obj)
        if math.isfinite(f):
            return f
        if nonfinite == "error":
            raise InputError(f"{where} is {f} (NaN/inf cannot be written as JSON)")
        if nonfinite == "clip" and not math.isnan(f):
            return CLIP_INFINITY if f > 0 else -CLIP_INFINITY
        return None
    if isinstance(obj, Path):
        return str(obj)
    raise InputError(f"{where} of type {type(obj).__name__} cannot be written as JSON")


def iter_jsonl(source: str | os.PathLike | IO, name: str | None = None, *,
               error: type[Exception] = DataError, objects: bool = True) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every non-blank line of a JSON-lines file or stream.

    ``source`` is a path (read as bytes, so a line that is not UTF-8 is reported with its number;
    a byte-order mark on line 1 is skipped) or an open text/binary stream (``name`` labels it in
    messages). Invalid JSON, invalid UTF-8 or (with ``objects=True``) a line that is not a JSON
    object raise ``error`` with ``"<file>:<line>: ..."``.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        with open(path, "rb") as fh:
            yield from _jsonl_lines(fh, name or str(path), error, objects)
    else:
        yield from _jsonl_lines(source, name or getattr(source, "name", "<stream>"), error, objects)


def _jsonl_lines(fh: Iterable, name: str, error: type[Exception], objects: bool) -> Iterator[tuple[int, Any]]:
    for lineno, raw in enumerate(fh, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{name}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        else:
            line = raw
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{name}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        if objects and not isinstance(obj, dict):
            raise error(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj

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


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Write a file atomically: yields a temporary path next to ``path``; when the block ends
    without an error the temporary file is fsync'ed and renamed over ``path`` (and the folder
    fsync'ed), so readers see the old file or the whole new one, never a part. On an error the
    temporary file is removed and ``path`` is untouched. Every acute output goes through here
    (text, JSON, CSV, PNG), except the shards of stores and protocol records
    (:mod:`acute.store.commit`) and probe folders, which commit several files at once and
    document their own order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_durable(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (no NaN: ``ValueError``) to ``path``, flushed and fsync'ed
    before returning (a manifest written into a folder that is renamed into place afterwards)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def file_sha256(path: str | Path) -> str:
    """The sha256 hex digest of the file ``path``, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def replace_dir(tmp: Path, path: Path) -> None:
    """Move the finished folder ``tmp`` to ``path`` (a sibling), replacing a folder there: the old
    one is renamed aside first and removed only once the new one is in place."""
    if path.exists():
        old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


@contextmanager
def staged_dir(path: Path) -> Iterator[Path]:
    """A new hidden folder beside ``path`` to fill; on success it replaces ``path``
    (:func:`replace_dir`), on any failure it is removed and ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json(path: str | Path, what: str, error: type[Exception] = InputError) -> Any:
    """The JSON document in ``path``; ``FileNotFoundError`` when it is missing, ``error`` naming
    file and line when it is not valid JSON (``what`` says what the file should hold)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist ({what})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def progress(iterable: Iterable, total: int, enabled: bool, desc: str):
    """``iterable`` wrapped in a tqdm bar on stderr when ``enabled``, else unchanged."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm  # lazy: import time

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr)


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "rec", position: int = 0):
    """A tqdm bar on stderr counting ``total`` items of ``unit`` (``update(n)`` as they are
    done); a disabled one when not ``enabled``."""
    from tqdm.auto import tqdm  # lazy: import time

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, position=position)
