"""BFCL's data, fetched from its pinned PyPI wheel and cached under acute's home.

The Berkeley Function Calling Leaderboard ships its questions and gold answers inside the
``bfcl-eval`` wheel (Apache-2.0): ``bfcl_eval/data/BFCL_v4_<category>.json`` and
``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json`` (one JSON object per line despite the
suffix). :func:`fetch_bfcl` downloads the wheel with ``pip download --no-deps`` (never installs
it), checks its sha256 against :data:`SHA256`, extracts only those files and moves them into
``$ACUTE_HOME/data/bfcl-eval-<version>/`` in one rename, so the cache holds every file or none.
A wheel put in ``$ACUTE_HOME/wheels`` by hand (``python -m pip download --no-deps
--only-binary=:all: bfcl-eval==2026.3.23 -d $ACUTE_HOME/wheels``) is used instead of
downloading.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import TaskDataError
from ..models.cards import acute_home
from ..fileio import file_sha256
from ..models.fetch import pip_command, pip_download

__all__ = ["CATEGORIES", "PACKAGE", "SHA256", "VERSION", "answer_member", "bfcl_cache_dir",
           "download_wheel", "fetch_bfcl", "question_member"]

PACKAGE = "bfcl-eval"
VERSION = "2026.3.23"
#: sha256 of ``bfcl_eval-2026.3.23-py3-none-any.whl`` on PyPI
SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
#: the single-turn AST categories acute reads, with their row counts in this version
CATEGORIES: dict[str, int] = {"simple_python": 400, "multiple": 200, "parallel": 200,
                              "parallel_multiple": 200, "irrelevance": 240}
#: categories without a possible_answer file (right iff the reply makes no call)
NO_ANSWER_FILE = frozenset({"irrelevance"})
_DATA = "bfcl_eval/data"


def question_member(category: str) -> str:
    """The questions file of ``category``, relative to a data folder (and to ``bfcl_eval/data``)."""
    return f"BFCL_v4_{category}.json"


def answer_member(category: str) -> str:
    """The gold (possible answers) file of ``category``, relative to a data folder."""
    return f"possible_answer/BFCL_v4_{category}.json"


def _members() -> list[str]:
    out = [question_member(c) for c in CATEGORIES]
    return out + [answer_member(c) for c in CATEGORIES if c not in NO_ANSWER_FILE]


def bfcl_cache_dir() -> Path:
    """``$ACUTE_HOME/data/bfcl-eval-<version>`` (not created)."""
    return acute_home() / "data" / f"{PACKAGE}-{VERSION}"


def _requirement() -> str:
    return f"{PACKAGE}=={VERSION}"


def _manual_command(dest: Path) -> str:
    return "python " + " ".join(pip_command(_requirement(), dest)[1:])


def _fetch_error(what: str) -> TaskDataError:
    return TaskDataError(
        f"BFCL data: {what} (package {_requirement()}, expected sha256 {SHA256}). Nothing was "
        f"cached. Put the wheel in {acute_home() / 'wheels'} by hand with:\n  "
        f"{_manual_command(acute_home() / 'wheels')}\nor pass a folder holding BFCL_v4_<category>.json "
        "and possible_answer/ as the task's data")


def download_wheel(dest: Path) -> Path:
    """Run ``pip download --no-deps`` of the pinned wheel into ``dest`` and return its path;
    ``TaskDataError`` when pip fails or leaves no wheel."""
    pip_download(_requirement(), dest, _fetch_error)
    wheel = _find_wheel(dest)
    if wheel is None:
        raise _fetch_error(f"pip download left no wheel in {dest}")
    return wheel


def _find_wheel(folder: Path) -> Path | None:
    prefix = f"{PACKAGE.replace('-', '_')}-{VERSION}-"
    if not folder.is_dir():
        return None
    return next((w for w in sorted(folder.glob("*.whl")) if w.name.lower().startswith(prefix)), None)


def _is_complete(folder: Path) -> bool:
    return (folder / "source.json").is_file() and all((folder / m).is_file() for m in _members())


def _extract(wheel: Path, out: Path) -> None:
    """Check the wheel's sha256 and write the data files into ``out`` (a new folder)."""
    digest = file_sha256(wheel)
    if digest != SHA256:
        raise _fetch_error(f"{wheel} has sha256 {digest}, not the pinned one")
    try:
        with zipfile.ZipFile(wheel) as zf:
            for member in _members():
                target = out / member
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(f"{_DATA}/{member}") as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
    except KeyError as exc:
        raise _fetch_error(f"{wheel} lacks {exc}") from None
    except zipfile.BadZipFile:
        raise _fetch_error(f"{wheel} is not a valid wheel") from None
    source = {"package": PACKAGE, "version": VERSION, "sha256": SHA256, "license": "Apache-2.0",
              "files": _members()}
    (out / "source.json").write_text(json.dumps(source, indent=1) + "\n", encoding="utf-8")


def fetch_bfcl() -> Path:
    """The folder of BFCL's data files, fetched and cached on first use (module docs).

    Raises ``TaskDataError`` (naming the package, version and pinned sha256) when the wheel
    cannot be downloaded or its hash differs; nothing is then left in the cache.
    """
    final = bfcl_cache_dir()
    if _is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)

    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        wheel = _find_wheel(acute_home() / "wheels") or download_wheel(work / "wheel")
        _extract(wheel, work / "files")
        if final.exists():  # an incomplete folder from an older run, or another process's
            if _is_complete(final):
                return final
            shutil.rmtree(final)
        (work / "files").rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
