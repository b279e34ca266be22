"""The commit protocol of a resumable sharded directory, shared by stores and protocol records.

A :class:`ShardDirectory` holds numbered shards (:func:`~acute.store.files.shard_name`), each
made of one file per extension of its ``files`` (a store: ``("jsonl", "safetensors")``; the
protocol study's records: ``("jsonl",)``). :meth:`ShardDirectory.commit` writes every file of a
shard to a hidden temporary name in the directory and fsyncs it, then renames them into place in
the order of ``files``, then fsyncs the directory. The last file is the commit marker: a shard
exists once it exists. A kill leaves the committed shards plus temporaries, or, between two
renames, the shard's earlier files without their marker; both are orphans
(:meth:`ShardDirectory.orphans`), which readers ignore and a resuming writer removes
(:meth:`ShardDirectory.remove_temporaries`).

:func:`check_identity` is the one check that a resumed directory was written with the same
settings: it names every key whose stored and new values differ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, Union

from ..errors import IncompatibleStoreError, InputError, StoreError
from ..fileio import default_mode, fsync_dir, tmp_path
from .files import is_temporary, parse_shard_name, part_of, shard_name
from .identity import diff

__all__ = ["ShardDirectory", "check_identity"]

#: what :meth:`ShardDirectory.commit` writes into a file: its bytes, or a function that writes the
#: file at the path it is given (it may replace the file: its permissions are reset afterwards)
Payload = Union[bytes, Callable[[Path], None]]


class ShardDirectory:
    """The shards of one directory and the commit protocol (see the module docstring).

    ``files`` are the extensions of one shard's files in commit order, the marker last. ``part``
    is the part whose shards this writer commits: None for the unpartitioned shards of the
    directory's owner (whose :meth:`remove_temporaries` removes every orphan), an int ``k`` for a
    part writer (``shard-p{k:03d}-*``; only part ``k``'s orphans are its own). The directory is
    read anew by every call: the object holds no state beyond its arguments.
    """

    def __init__(self, path: str | os.PathLike, files: Sequence[str], part: int | None = None):
        files = tuple(files)
        if not files or len(set(files)) != len(files) or not all(isinstance(e, str) and e for e in files):
            raise InputError(f"files must be distinct, non-empty extensions, got {files!r}")
        self.path = Path(path)
        self.files = files
        self.part = part

    @property
    def marker(self) -> str:
        """The extension of the file whose rename commits a shard."""
        return self.files[-1]

    def committed(self) -> list[tuple[int | None, int, Path]]:
        """``(part, index, marker path)`` of every committed shard, of all parts, in directory
        order: unpartitioned shards (``part`` None) by index, then part shards by (part, index)."""
        found = []
        for entry in os.listdir(self.path):
            parsed = parse_shard_name(entry)
            if parsed and parsed[2] == self.marker:
                found.append((parsed[0], parsed[1], self.path / entry))
        return sorted(found, key=lambda t: (-1 if t[0] is None else t[0], t[1]))

    def next_index(self) -> int:
        """One past the highest index of this writer's part's committed shards (0 for none), so
        that a resumed writer never reuses the name of a shard, even after a gap."""
        own = [index for part, index, _ in self.committed() if part == self.part]
        return max(own) + 1 if own else 0

    def orphans(self) -> list[str]:
        """Sorted names of the uncommitted files: temporaries, and a shard's earlier files whose
        marker is missing (a kill between two renames). A part writer's are its part's only."""
        committed = {p.name[: -len(self.marker)] for _, _, p in self.committed()}  # "shard-00007."
        out = []
        for entry in sorted(os.listdir(self.path)):
            parsed = parse_shard_name(entry)
            unmarked = (parsed is not None and parsed[2] in self.files[:-1]
                        and entry[: -len(parsed[2])] not in committed)
            if (is_temporary(entry) or unmarked) and (self.part is None or part_of(entry) == self.part):
                out.append(entry)
        return out

    def remove_temporaries(self) -> list[str]:
        """Delete :meth:`orphans` (a resuming writer does, before it reads the shards); returns
        their names."""
        names = self.orphans()
        for name in names:
            (self.path / name).unlink(missing_ok=True)
        return names

    def commit(self, index: int, payloads: Mapping[str, Payload]) -> Path:
        """Commit shard ``index`` of this writer's part: ``payloads`` maps each extension of
        ``files`` to the file's bytes or to a function writing it (see :data:`Payload`).

        Every file goes to a temporary name first and is fsync'ed; the renames follow in the
        order of ``files`` (the marker's is the commit point), then the directory is fsync'ed.
        On any error (or a kill) no shard is committed and, short of a kill, no temporary is
        left. StoreError when shard ``index`` is already committed (a second writer). Returns
        the marker's path.
        """
        if set(payloads) != set(self.files):
            raise InputError(f"a shard is the files {list(self.files)}, got payloads for {sorted(payloads)}")
        finals = [self.path / shard_name(self.part, index, ext) for ext in self.files]
        if finals[-1].exists():
            raise StoreError(f"{finals[-1]}: already committed; is another process writing {self.path}?")
        temps: list[Path] = []
        try:
            for ext, final in zip(self.files, finals):
                temps.append(tmp_path(final))
                _write(temps[-1], payloads[ext])
            for tmp, final in zip(temps, finals):
                os.replace(tmp, final)  # the last rename is the commit point
            fsync_dir(self.path)
        finally:
            for tmp in temps:
                tmp.unlink(missing_ok=True)
        return finals[-1]


def _write(tmp: Path, payload: Payload) -> None:
    """Write ``payload`` to the temporary file ``tmp`` and fsync it."""
    if callable(payload):
        payload(tmp)
        default_mode(tmp)  # a writer that replaces the file (safetensors) leaves a private one
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        return
    with open(tmp, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())


def check_identity(where: str | os.PathLike, stored: Mapping | None, given: Mapping,
                   keys: Iterable[str] | None = None, *, what: str, remedy: str, **options) -> None:
    """IncompatibleStoreError naming ``where`` and every key (of ``keys``, default: both
    mappings' keys, sorted) whose value in ``stored`` (the identity on disk; None for none)
    differs from ``given`` (a resuming writer's), with both values
    (:func:`acute.store.identity.diff`, sides named "stored" and "new"; ``options`` go to it),
    then ``remedy``; ``what`` names what cannot be resumed."""
    found = diff(stored, given, ("stored", "new"), fields=keys, **options)
    if found:
        raise IncompatibleStoreError(f"{where}: cannot resume {what}: {found}; {remedy}")
