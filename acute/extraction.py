"""Record pooled hidden states of every layer while a causal LM generates.

The recorder attaches forward hooks to the decoder layers and the final norm of a transformers
causal LM and, *during* ``model.generate`` with the KV cache, keeps per sequence and per layer only
a running sum and a count of the hidden states it pools (memory independent of the number of
generated tokens; it never holds ``T x L x d`` per sample).

Layer indexing follows transformers' ``output_hidden_states``: index 0 is the input of the first
decoder layer (the embedding output, already scaled for Gemma, plus position embeddings for GPT-2),
index ``i`` the output of decoder layer ``i`` and index ``L`` the output of the final norm (not the
last layer's pre-norm residual).

Pooling modes (``pool``):

``"decoding"`` (default)
    the hidden states from which the generated tokens were decoded: the last prompt position
    (decodes the first token) and each generated position before the final one. One state per
    generated token, the final EOS included, so the mean is never empty.
``"generated"``
    the states at the generated tokens' own positions. The final token is never fed back to the
    model by ``generate``, so the recorder keeps each sequence alive for exactly one more decoding
    step after it finishes (its stopping criterion reports it finished one step late and
    ``generate`` runs with ``max_new_tokens + 1``); the token sampled in that extra step is
    discarded. This costs one extra forward step per batch and gives the same states as feeding
    the last token with the returned KV cache.

Devices and dtypes: each layer's running sum is allocated on the device where that layer's hidden
states appear, so a model split over several devices (``device_map="auto"``, accelerate's
dispatch hooks) is recorded without moving any hidden state between devices; per step only the
``[B, 1]`` row weights are copied to each device once. Sums are float32 (or float64) whatever the
model's dtype, so bfloat16 / float16 states are accumulated without half-precision rounding, and
they are gathered to the CPU in float64 once, after ``generate`` returns.

Per-sequence termination (EOS ids and stop strings) is decided by the recorder's own
``StoppingCriteria``, so the hooks know exactly which rows are finished before the next forward;
finished rows stop accumulating while the rest of the batch goes on. For plain greedy decoding
the recorder runs its own loop (the inputs ``generate`` would build: positions from the attention
mask, the same KV cache) and drops finished rows from the batch and the cache after each step,
so a batch's cost follows its rows' own lengths; the hooks then add each row's state at its
original index. Each generated token's
log-probability is taken under the model's raw distribution: ``log_softmax`` of the logits the model
returns (captured by a forward hook on the model, i.e. before any logits processor such as
temperature or top-k; Gemma's final-logit soft-capping, part of the model, is included), gathered
once the token is known.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import math
import warnings
from typing import Any, Callable, Iterable, Literal, Sequence

import numpy as np
import torch
from torch import nn

from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.stopping_criteria import EosTokenCriteria

from acute._util import progress as _progress

from .errors import InputError, UnsupportedArchitectureError

__all__ = [
    "Generation",
    "HiddenStateRecorder",
    "LayerMap",
    "RecordedBatch",
    "UnsupportedArchitectureError",
    "batch_order",
    "context_window",
    "find_layers",
    "generate_and_record",
    "score_continuations",
]

PoolMode = Literal["decoding", "generated"]
_POOLS = ("decoding", "generated")

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


def _model_device(model: nn.Module) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


# --------------------------------------------------------------------------------------------
# The recorder
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RecordedBatch:
    """What :meth:`HiddenStateRecorder.generate` recorded for one batch (rows in input order).

    ``token_ids[r]`` (int64[T_r]) and ``token_logprobs[r]`` (float32[T_r]) are row ``r``'s
    generated tokens up to and including the one that finished it; ``layer_means`` is
    float32[B, L+1, d]; ``counts`` int64[B] the number of pooled states per row (== T_r);
    ``finish_reasons[r]`` is ``"eos"``, ``"stop"`` or ``"length"``.
    """

    token_ids: list[np.ndarray]
    token_logprobs: list[np.ndarray]
    layer_means: np.ndarray
    counts: np.ndarray
    finish_reasons: list[str]


_REASON_NONE, _REASON_EOS, _REASON_STOP, _REASON_LENGTH = 0, 1, 2, 3
_REASON_NAMES = {_REASON_EOS: "eos", _REASON_STOP: "stop", _REASON_LENGTH: "length"}


def _copy_on(tensor: torch.Tensor, device: torch.device,
             copies: dict[torch.device, torch.Tensor]) -> torch.Tensor:
    """``tensor`` on ``device``: itself there, else its copy kept in ``copies``."""
    if device == tensor.device:
        return tensor
    copy_ = copies.get(device)
    if copy_ is None:
        copy_ = copies[device] = tensor.to(device)
    return copy_


class _Run:
    """Mutable state of one recorded ``generate`` call."""

    def __init__(self, batch_size: int, num_states: int, device: torch.device, dtype: torch.dtype,
                 pool: str, max_new_tokens: int, eos_ids: Sequence[int],
                 stop_strings: Sequence[str], tokenizer: Any):
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.pool = pool
        self.max_new_tokens = max_new_tokens
        self.stop_strings = tuple(stop_strings)
        self.tokenizer = tokenizer
        self.eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
        self.sums: list[torch.Tensor | None] = [None] * num_states
        self.counts = torch.zeros(batch_size, dtype=torch.long, device=device)
        # Weight of each row in the *next* forward pass ([B, 1], 1.0 = pool this row).
        # decoding: every row is pooled in the prefill; generated: nothing in the prefill.
        start = 1.0 if pool == "decoding" else 0.0
        self.weight = torch.full((batch_size, 1), start, dtype=dtype, device=device)
        self.pool_this_forward = pool == "decoding"
        self._weights_by_device: dict[torch.device, torch.Tensor] = {}
        self.done = torch.zeros(batch_size, dtype=torch.bool, device=device)
        self.n_tokens = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.reason = torch.zeros(batch_size, dtype=torch.long, device=device)
        # Preallocated so that nothing long-lived is allocated per step (no heap fragmentation
        # between the growing KV-cache blocks); generate runs at most max_new_tokens + 1 steps.
        self.step = 0
        self.tokens = torch.zeros(batch_size, max_new_tokens + 1, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(batch_size, max_new_tokens + 1, dtype=torch.float32, device=device)
        self.logits_next: torch.Tensor | None = None  # raw logits of the latest forward [B, V]
        self.logsumexp_next: torch.Tensor | None = None  # their log-normaliser [B] (float32)
        self.cpu_tokens: list[list[int]] | None = [[] for _ in range(batch_size)] if stop_strings else None
        self.forwards = 0
        # Batch rows of the current forward (original indices) when finished rows were dropped
        # from it (the recorder's own greedy loop); None = every row.
        self.rows: torch.Tensor | None = None
        self._rows_by_device: dict[torch.device, torch.Tensor] = {}

    def weight_on(self, device: torch.device) -> torch.Tensor:
        """The row weights on ``device`` (copied at most once per step and device)."""
        return _copy_on(self.weight, device, self._weights_by_device)

    def rows_on(self, device: torch.device) -> torch.Tensor:
        """:attr:`rows` (not None) on ``device`` (copied at most once per step and device)."""
        assert self.rows is not None
        return _copy_on(self.rows, device, self._rows_by_device)

    def set_weight(self, mask: torch.Tensor) -> None:
        self.weight.copy_(mask.unsqueeze(1))
        self._weights_by_device = {}

    def set_rows(self, rows: torch.Tensor | None) -> None:
        self.rows = None if rows is None or rows.numel() == self.batch_size else rows
        self._rows_by_device = {}


class _DropEosPrecedenceNotice(logging.Filter):
    """Drops transformers' notice that our (never-firing) EosTokenCriteria replaces its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("EosTokenCriteria" in message and "take precedence" in message)


@contextlib.contextmanager
def _quiet_eos_notice():
    logger = logging.getLogger("transformers.generation.utils")
    notice_filter = _DropEosPrecedenceNotice()
    logger.addFilter(notice_filter)
    try:
        yield
    finally:
        logger.removeFilter(notice_filter)


class _RecorderStoppingCriteria(StoppingCriteria):
    """Per-row termination on EOS ids, stop strings and ``max_new_tokens``, kept by the recorder.

    Called once per step (by ``generate`` or the recorder's greedy loop), after the new token is
    appended; it also gathers the token's raw log-probability and sets which rows the hooks pool
    in the next forward.
    """

    def __init__(self, recorder: "HiddenStateRecorder"):
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        run = self.recorder._run
        if run is None:
            raise RuntimeError("recorder stopping criterion called outside HiddenStateRecorder.generate")
        token = input_ids[:, -1].to(run.device)
        if run.logits_next is None:
            raise RuntimeError("no logits were captured for this step; the model's forward hook did not run")
        logits = run.logits_next  # [rows in the forward, V]
        own = token if run.rows is None else token[run.rows]
        picked = logits.gather(1, own.to(logits.device).unsqueeze(1)).squeeze(1).float()
        logprob = (picked - run.logsumexp_next).to(run.device)
        if run.rows is not None:  # rows dropped from the forward are done: log-prob unused
            logprob = torch.zeros(run.batch_size, dtype=logprob.dtype,
                                  device=run.device).index_copy_(0, run.rows, logprob)
        run.logits_next = run.logsumexp_next = None
        active = ~run.done  # rows for which this token is a real generated token
        if run.step < run.tokens.shape[1]:
            run.tokens[:, run.step] = token
            run.logprobs[:, run.step] = logprob
        run.step += 1
        run.n_tokens += active

        is_eos = active & torch.isin(token, run.eos) if run.eos.numel() else torch.zeros_like(active)
        is_stop = torch.zeros_like(active)
        if run.stop_strings:
            stop_flags = [False] * run.batch_size
            tokens_now = token.tolist()
            active_now = active.tolist()
            eos_now = is_eos.tolist()
            for r in range(run.batch_size):
                if not active_now[r]:
                    continue
                run.cpu_tokens[r].append(tokens_now[r])
                if eos_now[r]:
                    continue
                text = run.tokenizer.decode(run.cpu_tokens[r], skip_special_tokens=True)
                stop_flags[r] = any(s in text for s in run.stop_strings)
            is_stop = torch.tensor(stop_flags, dtype=torch.bool, device=run.device)
        is_len = active & (run.n_tokens >= run.max_new_tokens)
        run.reason.masked_fill_(is_len, _REASON_LENGTH)
        run.reason.masked_fill_(is_stop, _REASON_STOP)
        run.reason.masked_fill_(is_eos, _REASON_EOS)
        run.done |= is_eos | is_stop | is_len

        if run.pool == "decoding":
            # The next forward decodes the next token of every still-running row.
            run.set_weight(~run.done)
            run.pool_this_forward = True
            return run.done.clone()
        # "generated": the next forward feeds this step's token; pool it for rows where it is real
        # and keep those rows alive for generate until that forward has happened.
        run.set_weight(active)
        run.pool_this_forward = True
        return ~active


class HiddenStateRecorder:
    """Context manager that pools every layer's hidden states inside ``model.generate``.

    ``pool`` is ``"decoding"`` or ``"generated"`` (see the module docstring); ``dtype`` is the
    accumulation dtype of the running sums (float32 or float64, also for half-precision models);
    each sum lives on the device of the layer it pools (models split with a ``device_map`` work).
    On entering, forward hooks are attached to the first decoder layer (its input is index 0 and
    its output index 1), the other decoder layers but the last (indices 2..L-1), the final norm
    (index L) and the model itself (raw logits). They are removed on exit, also when an exception
    is raised. Outside :meth:`generate` the hooks do nothing.

    Use::

        with HiddenStateRecorder(model) as rec:
            batch = rec.generate(input_ids, attention_mask, max_new_tokens=32, eos_token_ids=[2])
    """

    def __init__(self, model: nn.Module, pool: PoolMode = "decoding", dtype: torch.dtype = torch.float32):
        self.model = model
        self.pool = pool
        self.dtype = dtype
        self._handles: list[Any] = []
        self._run: _Run | None = None
        self.layer_map: LayerMap | None = None

    # -- hooks -------------------------------------------------------------------------------

    def _accumulate(self, index: int, hidden: torch.Tensor) -> None:
        run = self._run
        if run is None or not run.pool_this_forward:
            return
        last = hidden[:, -1, :]
        total = run.sums[index]
        if total is None:  # on this layer's device, in the accumulation dtype
            total = run.sums[index] = torch.zeros((run.batch_size, last.shape[-1]), dtype=run.dtype,
                                                  device=last.device)
        weight = run.weight_on(last.device)
        if run.rows is None:
            total.addcmul_(last.to(run.dtype), weight)
        else:  # a forward over the unfinished rows only
            rows = run.rows_on(last.device)
            total.index_add_(0, rows, last.to(run.dtype) * weight[rows])

    def _layer_hook(self, index: int):
        def hook(module, args, output):
            hidden = output[0] if isinstance(output, (tuple, list)) else output
            self._accumulate(index, hidden)
        return hook

    def _first_layer_hook(self, record_output: bool):
        def hook(module, args, kwargs, output):
            if self._run is None:
                return
            hidden_in = args[0] if args else kwargs.get("hidden_states")
            if hidden_in is None:
                raise RuntimeError(f"cannot find the hidden-state input of {type(module).__name__}")
            self._accumulate(0, hidden_in)
            if record_output:
                hidden = output[0] if isinstance(output, (tuple, list)) else output
                self._accumulate(1, hidden)
        return hook

    def _norm_hook(self, index: int):
        def hook(module, args, output):
            run = self._run
            if run is None:
                return
            hidden = output[0] if isinstance(output, (tuple, list)) else output
            self._accumulate(index, hidden)
            run.forwards += 1
            if run.pool_this_forward:
                run.counts += run.weight.squeeze(1).to(run.counts.device, torch.long)
        return hook

    def _logits_hook(self, module, args, output):
        run = self._run
        if run is None:
            return
        logits = getattr(output, "logits", None)
        if logits is None:
            logits = output[0] if isinstance(output, (tuple, list)) else output
        last = logits[:, -1, :]
        # Keep a view of the model's own logits (generate frees them after this step anyway) and
        # their log-normaliser; the token's log-prob is gathered once the token is known.
        run.logits_next = last
        run.logsumexp_next = torch.logsumexp(last.float(), dim=-1)

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> "HiddenStateRecorder":
        if self.pool not in _POOLS:
            raise InputError(f"pool must be one of {_POOLS}, got {self.pool!r}")
        if self.dtype not in (torch.float32, torch.float64):
            raise InputError(f"dtype must be torch.float32 or torch.float64, got {self.dtype}")
        if self._handles:
            raise RuntimeError("HiddenStateRecorder is already active (not re-entrant)")
        lm = find_layers(self.model)
        self.layer_map = lm
        n = lm.num_layers
        try:
            self._handles.append(lm.layers[0].register_forward_hook(
                self._first_layer_hook(record_output=n > 1), with_kwargs=True))
            for i in range(1, n - 1):
                self._handles.append(lm.layers[i].register_forward_hook(self._layer_hook(i + 1)))
            self._handles.append(lm.final_norm.register_forward_hook(self._norm_hook(n)))
            self._handles.append(self.model.register_forward_hook(self._logits_hook))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._remove()

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._run = None

    @property
    def active(self) -> bool:
        """Whether the hooks are attached."""
        return bool(self._handles)

    # -- generation --------------------------------------------------------------------------

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 max_new_tokens: int, eos_token_ids: Iterable[int] = (),
                 stop_strings: Sequence[str] = (), tokenizer: Any = None,
                 drop_finished: bool = True, **generate_kwargs: Any) -> RecordedBatch:
        """Generate for a left-padded batch and return what was recorded.

        ``eos_token_ids`` and ``stop_strings`` end a row (its final token is kept); stop strings
        are matched in the row's generated text decoded with ``skip_special_tokens=True`` and need
        ``tokenizer``. Other keyword arguments go to ``model.generate`` (``num_beams`` and
        ``num_return_sequences`` must be 1; ``max_length`` is not accepted).

        With ``drop_finished`` (default), plain greedy decoding (no sampling, no other
        ``generate`` arguments than the cache, ``pad_token_id`` and unset sampling parameters, and
        a model ``generation_config`` that sets nothing else, see :func:`_plain_greedy`) runs in
        the recorder's own loop, which drops each row from the batch once it has finished: a
        batch then costs its rows' tokens rather than its longest row's tokens times the batch
        size. Tokens and recorded states are those of ``model.generate`` up to floating-point
        rounding. Anything else runs through ``model.generate``. Returns a
        :class:`RecordedBatch`. Raises ``RuntimeError`` if the recorder is not entered or if the
        hooks saw a different number of pooled states than generated tokens.
        """
        if not self._handles:
            raise RuntimeError("use HiddenStateRecorder as a context manager: `with HiddenStateRecorder(model) as rec:`")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        for key in ("num_beams", "num_return_sequences"):
            if generate_kwargs.get(key, 1) != 1:
                raise InputError(f"{key} must be 1 for recording, got {generate_kwargs[key]}")
        for key in ("max_length", "stop_strings", "stopping_criteria", "max_time",
                    "return_dict_in_generate", "output_hidden_states"):
            if key in generate_kwargs:
                raise InputError(f"{key!r} cannot be passed to HiddenStateRecorder.generate "
                                 "(the recorder decides when each row stops)")
        stop_strings = tuple(stop_strings)
        if stop_strings and tokenizer is None:
            raise InputError("stop_strings need a tokenizer")
        if any(not isinstance(s, str) or not s for s in stop_strings):
            raise InputError(f"stop_strings must be non-empty strings, got {stop_strings!r}")
        if input_ids.ndim != 2 or input_ids.shape[1] == 0:
            raise InputError(f"input_ids must be [batch, length>0], got shape {tuple(input_ids.shape)}")
        eos_ids = [int(i) for i in eos_token_ids]
        # The recorder decides EOS itself. An EosTokenCriteria that never fires replaces the one
        # generate would build from eos_token_id (user-given criteria of the same type take
        # precedence), so that logits processors such as min_new_tokens still know the EOS ids
        # while a row can be kept alive one step past its EOS in the "generated" mode.
        never = EosTokenCriteria(eos_token_id=torch.zeros(0, dtype=torch.long))
        criteria = StoppingCriteriaList([_RecorderStoppingCriteria(self), never])
        if eos_ids:
            generate_kwargs.setdefault("eos_token_id", eos_ids)
        if generate_kwargs.get("pad_token_id") is None:
            pad = (getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None)
            generate_kwargs["pad_token_id"] = pad if pad is not None else (eos_ids[0] if eos_ids else 0)

        device = _model_device(self.model)
        input_ids = input_ids.to(device)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = attention_mask.to(device)
        assert self.layer_map is not None
        self._run = _Run(input_ids.shape[0], self.layer_map.num_layers + 1, device, self.dtype,
                         self.pool, max_new_tokens, eos_ids, stop_strings, tokenizer)
        extra = 1 if self.pool == "generated" else 0
        try:
            if drop_finished and _plain_greedy(self.model, generate_kwargs):
                self._greedy_loop(input_ids, attention_mask, max_new_tokens + extra, criteria[0],
                                  generate_kwargs)
            else:
                with torch.no_grad(), _quiet_eos_notice():
                    self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                        max_new_tokens=max_new_tokens + extra,
                                        stopping_criteria=criteria, **generate_kwargs)
            return self._collect()
        finally:
            self._run = None

    def _greedy_loop(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_steps: int,
                     criterion: "_RecorderStoppingCriteria", generate_kwargs: dict) -> None:
        """Greedy decoding as ``model.generate`` does it (same inputs, position ids and cache
        handling), except that the rows ``criterion`` marks finished leave the batch and its KV
        cache after each step."""
        run = self._run
        assert run is not None
        model = self.model
        key = _cache_keyword(model)
        cache = generate_kwargs.get(key)
        past = cache.get_seq_length() if cache is not None else 0
        mask = attention_mask
        # positions count real tokens only (left padding, padding after a cached prefix)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        step_ids, step_pos = input_ids[:, past:], positions[:, past:]
        rows = torch.arange(run.batch_size, device=input_ids.device)
        last_tokens = torch.full((run.batch_size, 1), int(generate_kwargs.get("pad_token_id") or 0),
                                 dtype=torch.long, device=input_ids.device)
        keep_logits = {"logits_to_keep": 1} if _forward_accepts(model, "logits_to_keep") else {}
        # as generate: position ids only for models that take them (not e.g. ALiBi models)
        takes_positions = _forward_accepts(model, "position_ids")
        with torch.no_grad():
            for _ in range(max_steps):
                run.set_rows(rows)
                out = model(input_ids=step_ids, attention_mask=mask, use_cache=True,
                            **({"position_ids": step_pos} if takes_positions else {}),
                            **{key: cache}, **keep_logits)
                cache = out.cache if key == "cache" else out.past_key_values
                if run.logits_next is None:
                    raise RuntimeError("no logits were captured for this step; the model's "
                                       "forward hook did not run")
                token = run.logits_next.argmax(-1).to(input_ids.device)
                last_tokens[rows, 0] = token
                finished = criterion(last_tokens).to(input_ids.device)
                keep = (~finished[rows]).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                if keep.numel() < rows.numel():
                    cache.batch_select_indices(keep)
                    rows, mask, token, step_pos = rows[keep], mask[keep], token[keep], step_pos[keep]
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
                step_ids, step_pos = token.unsqueeze(1), step_pos[:, -1:] + 1
        run.set_rows(None)

    def _collect(self) -> RecordedBatch:
        run = self._run
        assert run is not None
        n_tokens = run.n_tokens.cpu().numpy()
        counts = run.counts.cpu().numpy()
        if not np.array_equal(n_tokens, counts):
            raise RuntimeError(
                f"recorder pooled {counts.tolist()} states for {n_tokens.tolist()} generated tokens; "
                "generate did not run the expected decoding steps (unsupported generation mode?)"
            )
        tokens = run.tokens.cpu().numpy()
        logprobs = run.logprobs.cpu().numpy()
        if any(s is None for s in run.sums):
            raise RuntimeError("some layers were never reached by a forward pass")
        # The only gather: each layer's sum, wherever it lives, to the CPU in float64.
        stacked = torch.stack([s.to("cpu", torch.float64) for s in run.sums], dim=1)  # [B, L+1, d]
        means = (stacked / torch.from_numpy(counts).to(torch.float64)[:, None, None]).numpy()
        reasons = run.reason.cpu().tolist()
        return RecordedBatch(
            token_ids=[tokens[r, : n_tokens[r]].copy() for r in range(run.batch_size)],
            token_logprobs=[logprobs[r, : n_tokens[r]].copy() for r in range(run.batch_size)],
            layer_means=means.astype(np.float32),
            counts=counts.astype(np.int64),
            finish_reasons=[_REASON_NAMES.get(c, "length") for c in reasons],
        )

    def state_nbytes(self) -> int:
        """Bytes of the tensors the recorder holds for the current batch: running sums, counts,
        masks, the latest log-normaliser and the preallocated [B, max_new_tokens + 1] token and
        log-prob buffers (the logits it references belong to the model's output). Fixed for a
        given batch and ``max_new_tokens``, i.e. it does not grow while tokens are generated;
        0 outside a generate call."""
        run = self._run
        if run is None:
            return 0
        tensors = [s for s in run.sums if s is not None]
        tensors += [run.counts, run.weight, run.done, run.n_tokens, run.reason, run.eos,
                    run.tokens, run.logprobs]
        if run.logsumexp_next is not None:
            tensors.append(run.logsumexp_next)
        return int(sum(t.numel() * t.element_size() for t in tensors))


# --------------------------------------------------------------------------------------------
# High-level API
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Generation:
    """One generated answer with its pooled activations.

    ``text``: generated text decoded with special tokens skipped, cut before the first stop string
    when ``finish_reason == "stop"``; ``token_ids`` int64[T] and ``token_logprobs`` float32[T]: the
    generated tokens (EOS / stop-completing token included) and their log-probabilities under the
    model's raw distribution; ``layer_means`` float32[L+1, d]; ``prompt_tokens``: prompt length in
    tokens; ``finish_reason``: ``"eos"``, ``"stop"`` or ``"length"``.
    """

    text: str
    token_ids: np.ndarray
    token_logprobs: np.ndarray
    layer_means: np.ndarray
    prompt_tokens: int
    finish_reason: str

    @property
    def raw_confidence(self) -> float:
        """Product of the generated tokens' probabilities, ``exp(sum(token_logprobs))``."""
        return float(math.exp(float(np.sum(self.token_logprobs, dtype=np.float64))))


def _resolve_eos(model: nn.Module, tokenizer: Any) -> list[int]:
    try:
        from acute.models import eos_token_ids
    except ImportError:  # pragma: no cover - acute.models is part of the package
        ids: list[int] = []
        for value in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                      getattr(tokenizer, "eos_token_id", None)):
            for v in (value if isinstance(value, (list, tuple)) else [value]):
                if v is not None and int(v) not in ids:
                    ids.append(int(v))
        return ids
    return eos_token_ids(model, tokenizer)


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)`` long tensors."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[r, width - len(s):] = 1
    return ids, mask


def _pad_id(tokenizer: Any, eos_ids: Sequence[int]) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return int(eos_ids[0]) if eos_ids else 0


def _tokenize(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def _check_strings(values: Any, name: str) -> list[str]:
    if isinstance(values, str):
        raise InputError(f"{name} must be a list of strings, not a single string")
    values = list(values)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InputError(f"{name}[{i}] must be a str, got {type(v).__name__}")
    return values


def _cut_at_stop(text: str, stop_strings: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop_strings if s in text]
    return text[: min(cuts)] if cuts else text


def batch_order(lengths: Sequence[int], batch_size: int, sort_by_length: bool = True
                ) -> list[list[int]]:
    """Split the indices of ``lengths`` into batches of ``batch_size`` (the last may be shorter).

    With ``sort_by_length`` the indices are ordered longest first (ties keep input order), so each
    batch holds prompts of similar length and little padding; otherwise they keep input order.
    """
    order = list(range(len(lengths)))
    if sort_by_length:
        order.sort(key=lambda i: -lengths[i])
    return [order[k: k + batch_size] for k in range(0, len(order), batch_size)]


#: Shortest shared token prefix that :func:`generate_and_record` runs once and reuses.
MIN_SHARED_PREFIX = 8
#: Tokens after the common prefix of all prompts that decide a prompt's batching group.
PREFIX_GROUP_DEPTH = 32


def _shared_prefix(seqs: Sequence[Sequence[int]]) -> list[int]:
    """The longest common token prefix of ``seqs``, leaving every sequence at least one own token
    (its last prompt position is where pooling and the first generated token start)."""
    if not seqs:
        return []
    first = seqs[0]
    n = min(len(s) for s in seqs) - 1
    for s in seqs[1:]:
        k = 0
        while k < n and s[k] == first[k]:
            k += 1
        n = k
    return list(first[:max(n, 0)])


def _prefix_batches(encoded: Sequence[Sequence[int]], keep: Sequence[int],
                    batch_size: int) -> list[tuple[list[int], list[int]]]:
    """``(batch, prefix)`` pairs for the shared-prefix path of :func:`generate_and_record`.

    Prompts (indices ``keep`` into ``encoded``) that agree on the first
    :data:`PREFIX_GROUP_DEPTH` tokens after the prefix all of them share form a group (e.g. one
    subject's few-shot demonstrations); every group of two or more gets its own batches, the
    remaining prompts are batched together. Within each, prompts run longest first (little
    padding) and every batch caches the prefix its whole group shares, so a group needs one
    prefill however many batches it spans.
    """
    depth = len(_shared_prefix([encoded[i] for i in keep])) + PREFIX_GROUP_DEPTH
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in keep:
        groups.setdefault(tuple(encoded[i][:depth]), []).append(i)
    runs = [g for g in groups.values() if len(g) > 1]
    runs.append([i for g in groups.values() if len(g) == 1 for i in g])
    planned = []
    for run in runs:
        if not run:
            continue
        prefix = _shared_prefix([encoded[i] for i in run])
        run = sorted(run, key=lambda i: -len(encoded[i]))
        planned += [(run[k: k + batch_size], prefix) for k in range(0, len(run), batch_size)]
    return planned


def _window_allows_prefix_cache(model: nn.Module, length: int) -> bool:
    """False when a sliding attention window shorter than ``length`` would see the padding placed
    after the shared prefix (it counts positions, not real tokens)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    window = getattr(config, "sliding_window", None)
    return not (isinstance(window, int) and 0 < window < length)


def _cache_keyword(model: nn.Module) -> str:
    """transformers >= 5.2x names the KV cache argument ``cache``; older releases
    ``past_key_values``."""
    return "cache" if _forward_accepts(model, "cache") else "past_key_values"


#: ``generation_config`` fields that leave greedy decoding as it is (ids, output switches,
#: sampling-only settings); any other field set makes the recorder use ``model.generate``.
_GREEDY_NEUTRAL_CONFIG = frozenset({
    "_from_model_config", "transformers_version", "use_cache", "output_attentions",
    "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "do_sample",
    "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
    "max_length", "max_new_tokens",
})
#: ``generate`` keyword arguments the recorder's own greedy loop handles.
_GREEDY_LOOP_KWARGS = frozenset({"do_sample", "pad_token_id", "eos_token_id", "temperature", "top_p",
                                 "top_k", "cache", "past_key_values"})


def _plain_greedy(model: nn.Module, generate_kwargs: dict) -> bool:
    """Whether ``model.generate(**generate_kwargs)`` would decode greedily with no logits
    processor: no sampling, no other arguments than :data:`_GREEDY_LOOP_KWARGS` (sampling
    parameters unset), and a ``generation_config`` that sets only :data:`_GREEDY_NEUTRAL_CONFIG`."""
    if any(key not in _GREEDY_LOOP_KWARGS for key in generate_kwargs):
        return False
    if any(generate_kwargs.get(key) is not None for key in ("temperature", "top_p", "top_k")):
        return False
    config = getattr(model, "generation_config", None)
    settings = config.to_diff_dict() if config is not None else {}
    if generate_kwargs.get("do_sample", settings.get("do_sample", False)):
        return False
    return all(key in _GREEDY_NEUTRAL_CONFIG for key in settings)


def _prefill(model: nn.Module, prefix: Sequence[int]):
    """The KV cache of one forward pass over ``prefix`` (batch of one)."""
    ids = torch.tensor([list(prefix)], dtype=torch.long, device=_model_device(model))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True,
                    **({"logits_to_keep": 1} if _forward_accepts(model, "logits_to_keep") else {}))
    return out.cache if _cache_keyword(model) == "cache" else out.past_key_values


def _pad_after_prefix(seqs: Sequence[Sequence[int]], n_prefix: int,
                      pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``prefix + padding + own tokens`` (the prefix is cached, the own tokens end aligned,
    as with left padding) as ``(input_ids, attention_mask)``."""
    ids, mask = _left_pad([s[n_prefix:] for s in seqs], pad_id)
    head = torch.tensor([list(seqs[0][:n_prefix])], dtype=torch.long).expand(len(seqs), -1)
    return (torch.cat([head, ids], 1),
            torch.cat([torch.ones((len(seqs), n_prefix), dtype=torch.long), mask], 1))


def generate_and_record(model: nn.Module, tokenizer: Any, prompts: Sequence[str], *,
                        max_new_tokens: int = 64, batch_size: int = 8,
                        stop_strings: Sequence[str] = (), pool: PoolMode = "decoding",
                        do_sample: bool = False, progress: bool = False,
                        on_too_long: Literal["skip", "error"] = "skip",
                        eos_token_ids: Sequence[int] | None = None,
                        sort_by_length: bool = True, reuse_prefix: bool = True,
                        drop_finished: bool = True,
                        on_batch: Callable[[int], None] | None = None,
                        **generate_kwargs: Any) -> list[Generation | None]:
    """Generate an answer for each fully formatted prompt and pool its hidden states.

    Prompts are tokenized with ``add_special_tokens=False``, ordered (see ``reuse_prefix``;
    with ``reuse_prefix=False`` by length, longest first; ``sort_by_length=False`` keeps the input
    order, e.g. to measure what ordering gains) and generated in left-padded batches of
    ``batch_size`` (greedy unless ``do_sample``); results come
    back in input order. Generation of a row stops at an EOS id (default
    ``acute.models.eos_token_ids(model, tokenizer)``; override with ``eos_token_ids``), at a stop
    string, or after ``max_new_tokens``. ``on_batch(n)`` is called after each batch of ``n``
    prompts (e.g. a caller's progress bar). Extra keyword arguments go to ``model.generate`` (e.g.
    ``min_new_tokens``, ``temperature``).

    With ``reuse_prefix`` (default) prompts that share a prefix (system prompt, few-shot
    demonstrations of one subject) are batched together (:func:`_prefix_batches`, longest first
    within a group) and that prefix (at least :data:`MIN_SHARED_PREFIX` tokens) runs once per
    group: every batch starts from a copy of its KV cache, its rows padded between the prefix and
    their own tokens, so each record mostly pays for its own tokens. The recorded states are
    those of the plain path up to floating-point rounding. A batch runs the plain way when its
    prompts share less, or when the model's sliding attention window is shorter than its longest
    prompt plus ``max_new_tokens``.

    With ``drop_finished`` (default), greedy batches leave out each row once it has finished
    (see :meth:`HiddenStateRecorder.generate`), so a batch no longer runs every row until its
    longest answer ends.

    A prompt is *too long* when ``prompt_tokens + max_new_tokens`` exceeds the model's context
    window (:func:`context_window`): with ``on_too_long="skip"`` (default) its slot in the result
    is ``None`` and a ``UserWarning`` names it; with ``"error"`` a ``ValueError`` is raised before
    anything is generated. Returns a list of :class:`Generation` (or ``None`` for skipped
    prompts). Raises ``ValueError`` for an empty prompt, a bad argument, or a prompt that is not
    a string.
    """
    prompts = _check_strings(prompts, "prompts")
    stop_strings = tuple(_check_strings(stop_strings, "stop_strings"))
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if pool not in _POOLS:
        raise InputError(f"pool must be one of {_POOLS}, got {pool!r}")
    if on_too_long not in ("skip", "error"):
        raise InputError(f"on_too_long must be 'skip' or 'error', got {on_too_long!r}")
    eos_ids = list(eos_token_ids) if eos_token_ids is not None else _resolve_eos(model, tokenizer)
    pad_id = _pad_id(tokenizer, eos_ids)
    encoded = _tokenize(tokenizer, prompts)
    for i, ids in enumerate(encoded):
        if not ids:
            raise InputError(f"prompts[{i}] is empty (tokenizes to no tokens)")
    limit = context_window(model)
    keep: list[int] = []
    for i, ids in enumerate(encoded):
        if limit is not None and len(ids) + max_new_tokens > limit:
            message = (f"prompts[{i}] has {len(ids)} tokens; with max_new_tokens={max_new_tokens} "
                       f"it exceeds the context window of {limit} positions")
            if on_too_long == "error":
                raise InputError(message)
            warnings.warn(message + "; skipped (None in the result)", UserWarning, stacklevel=2)
            continue
        keep.append(i)
    if reuse_prefix and sort_by_length:
        planned = _prefix_batches(encoded, keep, batch_size)
    else:
        planned = [([keep[j] for j in batch], None) for batch in
                   batch_order([len(encoded[i]) for i in keep], batch_size, sort_by_length)]
    if not do_sample:
        # Greedy: silence sampling parameters a model's generation_config may carry.
        for key in ("temperature", "top_p", "top_k"):
            generate_kwargs.setdefault(key, None)
    prefix: list[int] = []
    prefix_cache = None
    results: list[Generation | None] = [None] * len(prompts)
    with HiddenStateRecorder(model, pool=pool) as recorder:
        for batch, shared in _progress(planned, len(planned), progress, "generate"):
            seqs = [encoded[i] for i in batch]
            cache_kwargs: dict[str, Any] = {}
            if shared is None or len(shared) < MIN_SHARED_PREFIX or not _window_allows_prefix_cache(
                    model, max(len(s) for s in seqs) + max_new_tokens):
                ids, mask = _left_pad(seqs, pad_id)
            else:
                if shared != prefix:  # consecutive batches often share the same prefix
                    prefix, prefix_cache = shared, _prefill(model, shared)
                ids, mask = _pad_after_prefix(seqs, len(prefix), pad_id)
                cache = copy.deepcopy(prefix_cache)
                cache.batch_repeat_interleave(len(batch))
                cache_kwargs[_cache_keyword(model)] = cache
            recorded = recorder.generate(ids, mask, max_new_tokens=max_new_tokens,
                                         eos_token_ids=eos_ids, stop_strings=stop_strings,
                                         tokenizer=tokenizer, do_sample=do_sample,
                                         drop_finished=drop_finished, pad_token_id=pad_id,
                                         **cache_kwargs, **generate_kwargs)
            for r, i in enumerate(batch):
                text = tokenizer.decode(recorded.token_ids[r].tolist(), skip_special_tokens=True)
                reason = recorded.finish_reasons[r]
                if reason == "stop":
                    text = _cut_at_stop(text, stop_strings)
                results[i] = Generation(
                    text=text,
                    token_ids=recorded.token_ids[r],
                    token_logprobs=recorded.token_logprobs[r],
                    layer_means=recorded.layer_means[r],
                    prompt_tokens=len(encoded[i]),
                    finish_reason=reason,
                )
            if on_batch is not None:
                on_batch(len(batch))
    return results


def _forward_accepts(model: nn.Module, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False
    return name in params


def score_continuations(model: nn.Module, tokenizer: Any, prompts: Sequence[str],
                        continuations: Sequence[str], batch_size: int = 8,
                        reuse_prefix: bool = True) -> list[np.ndarray]:
    """Teacher-forced log-probabilities of each continuation's tokens given its prompt.

    Prompt and continuation are tokenized separately (``add_special_tokens=False``) and their ids
    concatenated, so the scored span is exactly the continuation's tokens. Returns, in input
    order, float32 arrays with one log-probability (``log_softmax`` of the raw logits) per
    continuation token. Raises ``ValueError`` naming the index for an empty prompt or
    continuation (no tokens), for mismatched lengths, or for a pair longer than the context window.

    With ``reuse_prefix`` (default) pairs that share a prompt (same token ids) are scored from one
    KV cache of that prompt: batches of ``batch_size`` distinct prompts run once with the cache
    on, each cache row is repeated for its continuations, and the continuations run on top of it
    (right-padded, positions continuing the prompt's). Several answers to one long prompt then
    cost one prompt pass instead of one each. Models whose ``forward`` takes no ``position_ids``
    use the plain path: pairs sorted by length, one left-padded forward pass per batch.
    """
    prompts = _check_strings(prompts, "prompts")
    continuations = _check_strings(continuations, "continuations")
    if len(prompts) != len(continuations):
        raise InputError(f"prompts ({len(prompts)}) and continuations ({len(continuations)}) differ in length")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    p_ids = _tokenize(tokenizer, prompts)
    c_ids = _tokenize(tokenizer, continuations)
    limit = context_window(model)
    for i, (p, c) in enumerate(zip(p_ids, c_ids)):
        if not c:
            raise InputError(f"continuations[{i}] is empty (tokenizes to no tokens)")
        if not p:
            raise InputError(f"prompts[{i}] is empty; the first continuation token needs a context")
        if limit is not None and len(p) + len(c) > limit:
            raise InputError(f"prompts[{i}] + continuations[{i}] has {len(p) + len(c)} tokens, "
                             f"more than the context window of {limit}")
    pad_id = _pad_id(tokenizer, _resolve_eos(model, tokenizer))
    keep_logits = _forward_accepts(model, "logits_to_keep")
    pass_positions = _forward_accepts(model, "position_ids")
    if reuse_prefix and pass_positions:
        return _score_from_prefix_cache(model, p_ids, c_ids, pad_id, batch_size, keep_logits)
    device = _model_device(model)
    order = sorted(range(len(prompts)), key=lambda i: -(len(p_ids[i]) + len(c_ids[i])))
    out: list[np.ndarray | None] = [None] * len(prompts)
    with torch.inference_mode():
        for k in range(0, len(order), batch_size):
            batch = order[k: k + batch_size]
            ids, mask = _left_pad([p_ids[i] + c_ids[i] for i in batch], pad_id)
            ids, mask = ids.to(device), mask.to(device)
            longest = max(len(c_ids[i]) for i in batch)
            kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
            if pass_positions:
                kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
            if keep_logits:
                kwargs["logits_to_keep"] = longest + 1
            logits = model(**kwargs).logits
            kept = logits[:, -(longest + 1):, :]  # [b, longest+1, V]; column j predicts the next one
            logprobs = torch.log_softmax(kept.float(), dim=-1)
            for r, i in enumerate(batch):
                n = len(c_ids[i])
                target = torch.tensor(c_ids[i], dtype=torch.long, device=logprobs.device)
                rows = logprobs[r, longest - n: longest, :]
                out[i] = rows.gather(1, target[:, None]).squeeze(1).cpu().numpy().astype(np.float32)
    return out  # type: ignore[return-value]


def _span_logprobs(logits: torch.Tensor, targets: Sequence[int]) -> np.ndarray:
    """log_softmax of ``logits`` [n, V] (row j predicts ``targets[j]``) gathered at the targets."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(list(targets), dtype=torch.long, device=logprobs.device)[:, None]
    return logprobs.gather(1, index).squeeze(1).cpu().numpy().astype(np.float32)


def _score_from_prefix_cache(model: nn.Module, p_ids: list[list[int]], c_ids: list[list[int]],
                             pad_id: int, batch_size: int, keep_logits: bool) -> list[np.ndarray]:
    """:func:`score_continuations` with one KV-cache pass per distinct prompt (see there)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(p_ids):
        groups.setdefault(tuple(p), []).append(i)
    prefixes = sorted(groups, key=len, reverse=True)
    device = _model_device(model)
    cache_kw = _cache_keyword(model)
    out: list[np.ndarray | None] = [None] * len(p_ids)
    with torch.inference_mode():
        for k in range(0, len(prefixes), batch_size):
            batch = prefixes[k: k + batch_size]
            ids, mask = _left_pad(batch, pad_id)
            ids, mask = ids.to(device), mask.to(device)
            kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": True,
                                      "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
            if keep_logits:
                kwargs["logits_to_keep"] = 1
            res = model(**kwargs)
            last = res.logits[:, -1, :]  # predicts each continuation's first token
            rows = [(r, i) for r, prefix in enumerate(batch) for i in groups[prefix]]
            width = max(len(c_ids[i]) for _, i in rows) - 1  # continuation tokens fed as input
            if width == 0:
                for r, i in rows:
                    out[i] = _span_logprobs(last[r: r + 1], c_ids[i])
                continue
            cache = res.cache if cache_kw == "cache" else res.past_key_values
            select = torch.tensor([r for r, _ in rows], dtype=torch.long, device=device)
            cache.batch_select_indices(select)
            cont = torch.full((len(rows), width), pad_id, dtype=torch.long)
            cont_mask = torch.zeros((len(rows), width), dtype=torch.long)
            for j, (_, i) in enumerate(rows):
                n = len(c_ids[i]) - 1
                cont[j, :n] = torch.tensor(c_ids[i][:-1], dtype=torch.long)
                cont_mask[j, :n] = 1
            cont, cont_mask = cont.to(device), cont_mask.to(device)
            lengths = mask.sum(-1)[select]
            positions = lengths[:, None] + torch.arange(width, device=device)[None, :]
            logits = model(input_ids=cont, attention_mask=torch.cat([mask[select], cont_mask], 1),
                           position_ids=positions, use_cache=True, **{cache_kw: cache}).logits
            for j, (r, i) in enumerate(rows):
                n = len(c_ids[i])
                out[i] = _span_logprobs(torch.cat([last[r: r + 1], logits[j, : n - 1]]), c_ids[i])
    return out  # type: ignore[return-value]

