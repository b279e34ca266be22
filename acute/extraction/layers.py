"""Locating a model's decoder layers, final norm and embeddings; its context window."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any, Callable

import torch
from torch import nn

from ..errors import UnsupportedArchitectureError

__all__ = ["LayerMap", "context_window", "find_layers", "forward_accepts", "hook_layer_outputs",
           "model_device"]

logger = logging.getLogger(__name__)



# Attribute paths (from the top-level model) of the decoder-layer ModuleList, most common first.
_LAYER_PATHS = (
    "model.layers",  # Llama, Mistral, Qwen2/3, Gemma 1/2/3 (CausalLM), Phi-3, OLMo, ...
    "model.language_model.layers",  # Gemma 3 / multimodal wrappers (transformers >= 4.52)
    "language_model.model.layers",  # older multimodal wrappers
    "model.decoder.layers",  # OPT
    "transformer.h",  # GPT-2, GPT-J, Falcon, BLOOM
    "transformer.layers",
    "gpt_neox.layers",  # GPT-NeoX, Pythia
    "model.transformer.h",
    "layers",
    "h",
)
# Names of the final norm on the module that owns the layer list.
_NORM_NAMES = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm", "norm_f")
_EMBED_NAMES = ("embed_tokens", "wte", "embed_in", "word_embeddings")


# --------------------------------------------------------------------------------------------
# Locating the layers
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LayerMap:
    """The modules of a decoder-only LM that the recorder hooks.

    ``embed`` is the token embedding, ``layers`` the decoder-layer ``ModuleList`` (length ``L``)
    and ``final_norm`` the norm applied after the last layer. ``num_layers`` is ``L``; recorded
    tensors have ``L + 1`` rows.
    """

    embed: nn.Module
    layers: nn.ModuleList
    final_norm: nn.Module

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def _resolve(root: nn.Module, path: str) -> Any:
    obj: Any = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _config_num_layers(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for name in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def find_layers(model: nn.Module) -> LayerMap:
    """Locate the token embedding, decoder layers and final norm of a causal LM.

    Tries the attribute paths of the common architectures (``model.layers``,
    ``model.language_model.layers``, ``transformer.h``, ``gpt_neox.layers``, ...); the final norm
    is looked up on the module owning the layer list (``norm``, ``ln_f``, ``final_layernorm``, ...)
    and the embedding via ``model.get_input_embeddings()``. Returns a :class:`LayerMap`.

    Raises :class:`UnsupportedArchitectureError` (a ``ValueError``) naming the model class when no
    layer list with a final norm is found, or when the number of layers disagrees with the config.
    """
    cls = type(model).__name__
    for path in _LAYER_PATHS:
        layers = _resolve(model, path)
        if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
            continue
        owner = _resolve(model, path.rpartition(".")[0]) if "." in path else model
        norm = next((getattr(owner, n) for n in _NORM_NAMES
                     if isinstance(getattr(owner, n, None), nn.Module)), None)
        if norm is None:
            continue
        embed = None
        if hasattr(model, "get_input_embeddings"):
            try:
                embed = model.get_input_embeddings()
            except (NotImplementedError, AttributeError):
                embed = None
        if embed is None:
            embed = next((getattr(owner, n) for n in _EMBED_NAMES
                          if isinstance(getattr(owner, n, None), nn.Module)), None)
        if embed is None:
            continue
        expected = _config_num_layers(model)
        if expected is not None and expected != len(layers):
            raise UnsupportedArchitectureError(
                f"{cls}: found {len(layers)} decoder layers at '{path}' but the config says "
                f"{expected}; cannot map hidden-state indices for this architecture"
            )
        return LayerMap(embed=embed, layers=layers, final_norm=norm)
    raise UnsupportedArchitectureError(
        f"cannot locate the decoder layers and final norm of {cls}: tried layer lists at "
        f"{', '.join(_LAYER_PATHS)} with a final norm named one of {', '.join(_NORM_NAMES)}. "
        "Supported: Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, GPT-2 and similar decoder-only LMs."
    )


def _output_tensor(output) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


def hook_layer_outputs(lm: LayerMap, add: Callable[[int, torch.Tensor], None], active: Callable[[], bool],
                       after_final: Callable[[], None] | None = None) -> list[Any]:
    """Forward hooks that pass every recorded hidden state to ``add(index, hidden)`` while
    ``active()``: index 0 the first decoder layer's input (the embedding output), ``i`` the
    output of layer ``i - 1`` for ``i < L``, and ``L`` the final norm's output (which replaces
    the last layer's raw output); ``after_final()`` runs after the final norm's. These are
    the ``L + 1`` rows every recorder stores. Returns the hook handles (none left registered
    when registering fails)."""
    n = lm.num_layers

    def first(module, args, kwargs, output):
        if not active():
            return
        hidden_in = args[0] if args else kwargs.get("hidden_states")
        if hidden_in is None:
            raise RuntimeError(f"cannot find the hidden-state input of {type(module).__name__}")
        add(0, hidden_in)
        if n > 1:
            add(1, _output_tensor(output))

    def layer(index: int):
        def hook(module, args, output):
            if active():
                add(index, _output_tensor(output))
        return hook

    def final(module, args, output):
        if active():
            add(n, _output_tensor(output))
            if after_final is not None:
                after_final()

    handles: list[Any] = []
    try:
        handles.append(lm.layers[0].register_forward_hook(first, with_kwargs=True))
        handles += [lm.layers[i].register_forward_hook(layer(i + 1)) for i in range(1, n - 1)]
        handles.append(lm.final_norm.register_forward_hook(final))
    except BaseException:
        for handle in handles:
            handle.remove()
        raise
    return handles


def context_window(model: nn.Module) -> int | None:
    """The model's maximum number of positions from its (text) config, or ``None`` if unknown."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                 "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_device(model: nn.Module) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


def forward_accepts(model: nn.Module, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False
    return name in params
