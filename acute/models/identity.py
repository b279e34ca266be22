"""What identifies a loaded model: its name (:func:`model_name`, given once where it is
loaded), its architecture and shape (:func:`model_fingerprint`), its weights
(:func:`weights_digest`, hashed once per loaded model) and how it runs (:func:`model_setting`).
:class:`acute.store.identity.ModelIdentity` is what stores and probes record and check, built
from these."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import InputError, ModelLoadError

__all__ = ["files_weights_digest", "model_fingerprint", "model_name", "model_setting", "name_model", "recorded_name",
           "weights_digest"]


def recorded_name(name_or_path: str | os.PathLike) -> str:
    """How a model given by ``name_or_path`` is named in stores and probes: an existing path made
    absolute (so a probe finds its model from any directory), else the card name or hub id as
    given."""
    path = Path(name_or_path).expanduser()
    return str(path.resolve()) if path.exists() else os.fspath(name_or_path)


def name_model(model, name: str):
    """Give ``model`` the name stores and probes record for it (:func:`model_name`); returns it.
    :func:`acute.models.load_model` names every model it loads (:func:`recorded_name`)."""
    try:
        object.__setattr__(model, "acute_name", str(name))
    except (AttributeError, TypeError) as e:
        raise InputError(f"a {type(model).__name__} takes no attributes: it cannot be named") from e
    return model


def model_name(model) -> str:
    """The name a model is recorded under: the one it was given (:func:`name_model`, which
    :func:`acute.models.load_model` calls), else its config's ``name_or_path``, else its class
    name."""
    given = getattr(model, "acute_name", None)
    if given:
        return str(given)
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or type(model).__name__)


def _weights_key(state: dict) -> tuple:
    """What the digest of ``state`` depends on without reading a byte: each entry's name, dtype,
    shape, storage address and version counter (bumped by every in-place change)."""
    return tuple((name, str(t.dtype), tuple(t.shape), t.device.type, t.data_ptr(), t._version)
                 for name, t in sorted(state.items()))


def weights_digest(model) -> dict:
    """The identity of a model's weights: ``{"sha256": ...}`` over every entry of its
    ``state_dict`` (name, dtype, shape and bytes, in name order) and, for a model converted from
    a GGUF (a model card or a local ``.gguf``), ``"gguf_sha256"`` of that file.

    Two checkpoints of one architecture (a fine-tune, another size of training) differ here even
    when :func:`model_fingerprint` agrees. The same weights loaded in another dtype differ too
    (their activations do); ``"bf16_sha256"`` is the same digest of the floating-point entries
    rounded to bfloat16 (others as they are), which one checkpoint loaded in float32 or in
    bfloat16 shares (:func:`acute.store.identity.diff` compares it when the two sides ran in
    different dtypes: another dtype is another setting of the same model, not another model;
    a float16 or quantised load rounds otherwise and is not recognised). Reads every byte once:
    about 1 s per GB of weights on a CPU. The result is kept on the model, so collecting,
    exporting and scoring with one loaded model hash its weights once; it is recomputed when a
    tensor is replaced or changed in place (its storage address or version counter moves).
    """
    state = model.state_dict()
    key = (_weights_key(state), getattr(model, "acute_gguf_sha256", None))
    cached = getattr(model, "_acute_weights_digest", None)
    if cached is not None and cached[0] == key:
        return dict(cached[1])
    if any(t.device.type == "meta" for t in state.values()):
        raise InputError("the model holds no weights (built on the meta device): the identity of its weights "
                         "comes from its files (acute.models.identity.files_weights_digest), which were not read")
    out = _digest(sorted(state.items()), getattr(model, "acute_gguf_sha256", None))
    _keep_digest(model, key, out)
    return out


def _digest(entries, gguf_sha256: str | None) -> dict:
    """:func:`weights_digest` of ``(name, tensor)`` pairs given in name order."""
    import torch  # heavy: torch

    h, h16 = hashlib.sha256(), hashlib.sha256()
    for name, tensor in entries:
        t = tensor.detach()
        r = t.to(torch.bfloat16) if t.is_floating_point() else t  # t itself when already bfloat16
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode("utf-8"))
        h16.update(f"{name}|{r.dtype}|{tuple(r.shape)}\n".encode("utf-8"))
        if t.numel():
            h.update(t.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().data)
            h16.update(r.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().data)
    out = {"sha256": h.hexdigest(), "bf16_sha256": h16.hexdigest()}
    if gguf_sha256:
        out["gguf_sha256"] = str(gguf_sha256)
    return out


def _keep_digest(model, key: tuple, digest: dict) -> None:
    try:
        object.__setattr__(model, "_acute_weights_digest", (key, dict(digest)))
    except (AttributeError, TypeError):  # an object that takes no attributes: hash every time
        pass


def files_weights_digest(model, folder) -> dict:
    """:func:`weights_digest` of the weights in ``folder``'s safetensors files, laid out as
    ``model`` (built without its weights, e.g. on the ``meta`` device) would hold them once
    loaded: its ``state_dict``'s names, shapes and dtypes, a tied entry (``lm_head.weight`` beside
    ``model.embed_tokens.weight``) read from the file entry it shares. Equal to the digest of the
    model loaded from ``folder`` in that dtype (tested), reading one tensor at a time, and kept on
    ``model`` so :func:`weights_digest` returns it without the weights.

    Raises ``ModelLoadError`` naming the folder when it has no safetensors file or lacks an entry
    of the model, or holds one of another shape.
    """
    from safetensors import safe_open  # lazy: import time

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no .safetensors file: the identity of its weights cannot be read")
    where = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            where.update((k, f) for k in handle.keys())
    shared: dict[int, list[str]] = {}  # tied entries are one Parameter under several names
    for name, value in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        shared.setdefault(id(value), []).append(name)
    alias = {n: names for names in shared.values() for n in names}
    state = model.state_dict()

    def entries():
        for name, like in sorted(state.items()):
            source = next((n for n in [name, *alias.get(name, ())] if n in where), None)
            if source is None:
                raise ModelLoadError(f"{folder}: its safetensors files hold no weights for {name!r}")
            with safe_open(str(where[source]), framework="pt") as handle:
                t = handle.get_tensor(source)
            if tuple(t.shape) != tuple(like.shape):
                raise ModelLoadError(f"{folder}: {source!r} has shape {tuple(t.shape)}, the model's {name!r} "
                                     f"{tuple(like.shape)}")
            yield name, t.to(like.dtype)

    out = _digest(entries(), getattr(model, "acute_gguf_sha256", None))
    _keep_digest(model, (_weights_key(state), getattr(model, "acute_gguf_sha256", None)), out)
    return out


def model_setting(model) -> dict:
    """How a loaded model runs, beyond its weights: ``model_dtype`` (``"float32"``,
    ``"bfloat16"``, ...; None when the model has no ``dtype``) and ``quantization`` (``"none"``
    unless its config carries a ``quantization_config``: then its ``quant_method``, with the
    bits when it gives them, e.g. ``"bitsandbytes-4bit"``). Part of the validity domain a probe
    records (:mod:`acute.store.identity`)."""
    dtype = getattr(model, "dtype", None)
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    if config is None:
        quantization = "none"
    else:
        get = config.get if isinstance(config, dict) else (lambda key: getattr(config, key, None))
        bits = get("bits") or (4 if get("load_in_4bit") else 8 if get("load_in_8bit") else None)
        quantization = str(get("quant_method") or "unknown") + (f"-{bits}bit" if bits else "")
    return {"model_dtype": None if dtype is None else str(dtype).replace("torch.", ""),
            "quantization": quantization}


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
