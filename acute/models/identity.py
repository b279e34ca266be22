"""What identifies a model: its architecture and shape (:func:`model_fingerprint`) and its
weights (:func:`weights_digest`, hashed once per loaded model), together :func:`model_identity`,
which stores and probes record and check."""

from __future__ import annotations

from ..errors import InputError

__all__ = ["model_fingerprint", "model_identity", "model_setting", "weights_digest"]


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
    import hashlib

    import torch

    state = model.state_dict()
    key = (_weights_key(state), getattr(model, "acute_gguf_sha256", None))
    cached = getattr(model, "_acute_weights_digest", None)
    if cached is not None and cached[0] == key:
        return dict(cached[1])
    h, h16 = hashlib.sha256(), hashlib.sha256()
    for name, tensor in sorted(state.items()):
        t = tensor.detach()
        r = t.to(torch.bfloat16) if t.is_floating_point() else t  # t itself when already bfloat16
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode("utf-8"))
        h16.update(f"{name}|{r.dtype}|{tuple(r.shape)}\n".encode("utf-8"))
        if t.numel() and t.device.type != "meta":
            h.update(t.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().data)
            h16.update(r.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().data)
    out = {"sha256": h.hexdigest(), "bf16_sha256": h16.hexdigest()}
    gguf = getattr(model, "acute_gguf_sha256", None)
    if gguf:
        out["gguf_sha256"] = str(gguf)
    try:
        object.__setattr__(model, "_acute_weights_digest", (key, dict(out)))
    except (AttributeError, TypeError):  # an object that takes no attributes: hash every time
        pass
    return out


def model_identity(model) -> dict:
    """:func:`model_fingerprint` plus the weights: ``weights_sha256`` (and ``gguf_sha256``,
    ``weights_bf16_sha256``) from :func:`weights_digest`. What an exported probe records and
    checks (see :meth:`acute.estimators.probe_file.ExportedProbe.check_model`)."""
    digest = weights_digest(model)
    out = {**model_fingerprint(model), "weights_sha256": digest["sha256"]}
    for key, name in (("gguf_sha256", "gguf_sha256"), ("bf16_sha256", "weights_bf16_sha256")):
        if key in digest:
            out[name] = digest[key]
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
