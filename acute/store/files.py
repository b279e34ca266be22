"""The files of a store directory: shard names (unpartitioned and part), part lock files,
temporaries, which shards are committed and which files are orphans (see the commit protocol in
:mod:`acute.store`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..fileio import TMP_SUFFIX

#: ``shard-00007.jsonl`` (unpartitioned) or ``shard-p002-00007.safetensors`` (part 2).
_SHARD_FILE_RE = re.compile(r"^shard-(?:p(\d{3,})-)?(\d{5,})\.(safetensors|jsonl)$")
_PART_FILE_RE = re.compile(r"^\.?shard-p(\d{3,})-")  # a part's shard file or its temporary
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


def _part_of(name: str) -> int | None:
    """The part a shard file or its temporary belongs to; None for anything else."""
    m = _PART_FILE_RE.match(name)
    return int(m.group(1)) if m else None


def part_lock_name(part: int) -> str:
    """``.part-{part:03d}.lock``: the file a part writer holds locked (:mod:`acute.store.locks`)."""
    return f".part-{part:03d}.lock"


def _is_tmp(name: str) -> bool:
    return (name.startswith(".") and name.endswith(TMP_SUFFIX)) or bool(_SAFETENSORS_TMP_RE.match(name))


def committed_shards(path: Path) -> list[tuple[int | None, int, Path]]:
    """``(part, index, .safetensors path)`` of the committed shards, in store order:
    unpartitioned shards (``part`` None) by index, then part shards by (part, index)."""
    found = []
    for entry in os.listdir(path):
        parsed = parse_shard_name(entry)
        if parsed and parsed[2] == "safetensors":
            found.append((parsed[0], parsed[1], path / entry))
    return sorted(found, key=lambda t: (-1 if t[0] is None else t[0], t[1]))


def orphans(path: Path, part: int | None = None) -> list[str]:
    """Names of uncommitted files: temporaries and ``.jsonl`` files without a ``.safetensors``.

    With ``part``, only that part's (its shards' temporaries and orphan ``.jsonl`` files).
    """
    committed = {p.with_suffix(".jsonl").name for _, _, p in committed_shards(path)}
    out = []
    for entry in sorted(os.listdir(path)):
        parsed = parse_shard_name(entry)
        orphan = _is_tmp(entry) or (parsed is not None and parsed[2] == "jsonl"
                                    and entry not in committed)
        if orphan and (part is None or _part_of(entry) == part):
            out.append(entry)
    return out
