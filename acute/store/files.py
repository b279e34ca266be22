"""The names of a store directory's files: shards (unpartitioned and part), part lock files and
temporaries. Which shards are committed and which files are orphans is the commit protocol,
:mod:`acute.store.commit`."""

from __future__ import annotations

import re

from ..fileio import TMP_SUFFIX

__all__ = ["PART_LOCK_RE", "SHARD_FILES", "is_temporary", "parse_shard_name", "part_lock_name", "part_of",
           "shard_name"]

#: ``shard-00007.jsonl`` (unpartitioned) or ``shard-p002-00007.safetensors`` (part 2).
_SHARD_FILE_RE = re.compile(r"^shard-(?:p(\d{3,})-)?(\d{5,})\.(safetensors|jsonl)$")
_PART_FILE_RE = re.compile(r"^\.?shard-p(\d{3,})-")  # a part's shard file or its temporary
#: the files of one store shard in commit order, the commit marker last (:mod:`acute.store.commit`)
SHARD_FILES = ("jsonl", "safetensors")
#: a part's lock file (:func:`part_lock_name`)
PART_LOCK_RE = re.compile(r"^\.part-\d{3,}\.lock$")
#: the temporary file safetensors writes before renaming it into place (left by a kill mid-write)
_SAFETENSORS_TMP_RE = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


def shard_name(part: int | None, index: int, ext: str) -> str:
    """``shard-{index:05d}.{ext}``, or ``shard-p{part:03d}-{index:05d}.{ext}`` for a part."""
    return f"shard-{index:05d}.{ext}" if part is None else f"shard-p{part:03d}-{index:05d}.{ext}"


def parse_shard_name(name: str) -> tuple[int | None, int, str] | None:
    """``(part or None, index, ext)`` of a shard file name, None for any other name."""
    m = _SHARD_FILE_RE.match(name)
    if not m:
        return None
    return (None if m.group(1) is None else int(m.group(1))), int(m.group(2)), m.group(3)


def part_of(name: str) -> int | None:
    """The part a shard file or its temporary belongs to; None for anything else."""
    m = _PART_FILE_RE.match(name)
    return int(m.group(1)) if m else None


def part_lock_name(part: int) -> str:
    """``.part-{part:03d}.lock``: the file a part writer holds locked (:mod:`acute.store.locks`)."""
    return f".part-{part:03d}.lock"


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file: ours (:func:`acute.fileio.tmp_path`) or the one
    safetensors writes before renaming it into place."""
    return (name.startswith(".") and name.endswith(TMP_SUFFIX)) or bool(_SAFETENSORS_TMP_RE.match(name))

