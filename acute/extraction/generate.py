"""Generating with the recorder attached: :func:`generate_and_record` and its :class:`Generation`."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from torch import nn


from ..fileio import progress as _progress

from ..errors import InputError

from ..store.checkpoints import Schedule
from ..store.generation import GenerationSettings
from ..store.pooling import PoolMode
from ..store.generation import BATCH_SIZE
from .batching import (
    MIN_SHARED_PREFIX,
    cache_keyword,
    check_strings,
    cut_at_stop,
    encode_prompts,
    left_pad,
    pad_after_prefix,
    padding_id,
    prefill,
    prefix_batches,
    resolve_eos,
    window_allows_prefix_cache,
    batch_order,
)
from .prompt_states import PromptState, prompt_pass
from .recorder import CheckpointCallback, HiddenStateRecorder
from .pooler import LayerPooler

__all__ = ["Generation", "generate_after_prompt_pass", "generate_and_record", "generate_with"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Generation:
    """One generated answer with its pooled activations.

    ``text``: generated text decoded with special tokens skipped, cut before the first stop string
    when ``finish_reason == "stop"``; ``token_ids`` int64[T] and ``token_logprobs`` float32[T]: the
    generated tokens (EOS / stop-completing token included) and their log-probabilities under the
    model's raw distribution; ``layer_means`` float32[L+1, d]: per layer the mean of the states at
    the pooled positions; ``last_prompt`` float32[L+1, d]: the states at the prompt's last token
    (the position that decodes the first generated token, whatever the pool mode);
    ``last_answer`` float32[L+1, d]: the states at the last pooled position (``"decoding"``: the
    one that decoded the final token, i.e. ``last_prompt`` for a one-token answer;
    ``"generated"``: the final token's own); ``prompt_tokens``: prompt length in tokens;
    ``finish_reason``: ``"eos"``, ``"stop"``, ``"length"`` or ``"stopped"`` (stopped early at a
    checkpoint, its ``token_ids`` the prefix generated); ``checkpoint_tokens`` int64[C] and
    ``checkpoint_means`` float32[C, L+1, d]: the prefix checkpoints when the recorder kept them
    (:mod:`acute.store.checkpoints`; the last equals ``layer_means``), else None. Layer index 0 is
    the embedding output, ``L`` the final norm's output (see :mod:`acute.extraction`).
    """

    text: str
    token_ids: np.ndarray
    token_logprobs: np.ndarray
    layer_means: np.ndarray
    last_prompt: np.ndarray
    last_answer: np.ndarray
    prompt_tokens: int
    finish_reason: str
    checkpoint_tokens: np.ndarray | None = None
    checkpoint_means: np.ndarray | None = None

    @property
    def raw_confidence(self) -> float:
        """Product of the generated tokens' probabilities, ``exp(sum(token_logprobs))``."""
        return float(math.exp(float(np.sum(self.token_logprobs, dtype=np.float64))))


def generate_and_record(model: nn.Module, tokenizer: Any, prompts: Sequence[str], *,
                        max_new_tokens: int = 64, batch_size: int = BATCH_SIZE,
                        stop_strings: Sequence[str] = (), pool: PoolMode = "decoding",
                        **options: Any) -> list[Generation | None]:
    """Generate an answer for each fully formatted prompt and pool its hidden states: the
    settings given as keywords (made into one
    :class:`~acute.store.generation.GenerationSettings` here), ``options`` as
    :func:`generate_with` takes them (which says what happens)."""
    settings = GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size,
                                  stop_strings=_string_list(stop_strings, "stop_strings"), pool=pool)
    return generate_with(model, tokenizer, prompts, settings, **options)


def _string_list(values: Any, name: str) -> tuple[str, ...]:
    return tuple(check_strings(values, name))


# Long because of its docstring and argument checks; the batching, decoding and recording it
# drives live in acute.extraction.batching and acute.extraction.recorder.
def generate_with(model: nn.Module, tokenizer: Any, prompts: Sequence[str], settings: GenerationSettings, *,
                  do_sample: bool = False, progress: bool = False, on_too_long: Literal["skip", "error"] = "skip",
                  eos_token_ids: Sequence[int] | None = None, sort_by_length: bool = True,
                  reuse_prefix: bool = True, drop_finished: bool = True,
                  on_batch: Callable[[int], None] | None = None, checkpoints: Schedule | None = None,
                  on_checkpoint: CheckpointCallback | None = None,
                  **generate_kwargs: Any) -> list[Generation | None]:
    """Generate an answer for each fully formatted prompt and pool its hidden states, as
    ``settings`` (:class:`~acute.store.generation.GenerationSettings`: ``max_new_tokens``,
    default 64, ``stop_strings``, ``pool``, ``batch_size``) say.

    Prompts are tokenized with ``add_special_tokens=False``, ordered (see ``reuse_prefix``;
    with ``reuse_prefix=False`` by length, longest first; ``sort_by_length=False`` keeps the input
    order, e.g. to measure what ordering gains) and generated in left-padded batches of
    ``batch_size`` (greedy unless ``do_sample``); results come
    back in input order. Generation of a row stops at an EOS id (default
    ``acute.models.prompts.eos_token_ids(model, tokenizer)``; override with ``eos_token_ids``), at a stop
    string, or after ``max_new_tokens``. ``on_batch(n)`` is called after each batch of ``n``
    prompts (e.g. a caller's progress bar). Extra keyword arguments go to ``model.generate`` (e.g.
    ``min_new_tokens``, ``temperature``).

    With ``reuse_prefix`` (default) prompts that share a prefix (system prompt, few-shot
    demonstrations of one subject) are batched together (:func:`prefix_batches`, longest first
    within a group) and that prefix (at least :data:`MIN_SHARED_PREFIX` tokens) runs once per
    group: every batch starts from a copy of its KV cache, its rows padded between the prefix and
    their own tokens, so each record mostly pays for its own tokens. The recorded states are
    those of the plain path up to floating-point rounding. A batch runs the plain way when its
    prompts share less, or when the model's sliding attention window is shorter than its longest
    prompt plus ``max_new_tokens``.

    With ``drop_finished`` (default), greedy batches leave out each row once it has finished
    (see :meth:`HiddenStateRecorder.generate`), so a batch does not run every row until its
    longest answer ends.

    A prompt is *too long* when ``prompt_tokens + max_new_tokens`` exceeds the model's context
    window (:func:`context_window`): with ``on_too_long="skip"`` (default) its slot in the result
    is ``None`` and a ``UserWarning`` names it; with ``"error"`` a ``ValueError`` is raised before
    anything is generated. Returns a list of :class:`Generation` (or ``None`` for skipped
    prompts). Raises ``ValueError`` for an empty prompt, a bad argument, or a prompt that is not
    a string.
    """
    settings = _resolved(settings)
    max_new_tokens, stop_strings, pool = settings.max_new_tokens, settings.stop_strings, settings.pool
    batch_size = settings.batch_size
    prompts, eos_ids, pad_id, encoded, keep = _prepare(model, tokenizer, prompts, settings, on_too_long,
                                                       eos_token_ids)
    if reuse_prefix and sort_by_length:
        planned = prefix_batches(encoded, keep, batch_size)
    else:
        planned = [([keep[j] for j in batch], None) for batch in
                   batch_order([len(encoded[i]) for i in keep], batch_size, sort_by_length)]
    _greedy_defaults(do_sample, generate_kwargs)
    inputs = _BatchInputs(model, pad_id, max_new_tokens)
    results: list[Generation | None] = [None] * len(prompts)
    current: list[int] = []

    def in_prompts(k, rows, means, confidence):  # batch rows -> prompt indices
        return on_checkpoint(k, np.asarray([current[r] for r in rows], dtype=np.int64), means, confidence)

    with HiddenStateRecorder(model, pool=pool, checkpoints=checkpoints,
                             on_checkpoint=None if on_checkpoint is None else in_prompts) as recorder:
        for batch, shared in _progress(planned, len(planned), progress, "generate"):
            current[:] = batch
            ids, mask, cache = inputs([encoded[i] for i in batch], shared)
            cache_kwargs = {} if cache is None else {cache_keyword(model): cache}
            recorded = recorder.generate(ids, mask, max_new_tokens=max_new_tokens,
                                         eos_token_ids=eos_ids, stop_strings=stop_strings,
                                         tokenizer=tokenizer, do_sample=do_sample,
                                         drop_finished=drop_finished, pad_token_id=pad_id,
                                         **cache_kwargs, **generate_kwargs)
            for r, i in enumerate(batch):
                results[i] = _generation(recorded, r, tokenizer, stop_strings, len(encoded[i]))
            if on_batch is not None:
                on_batch(len(batch))
    return results


def _resolved(settings: GenerationSettings) -> GenerationSettings:
    """``settings`` (checked) with the defaults of a generation call: 64 new tokens, no stop string."""
    if not isinstance(settings, GenerationSettings):
        raise InputError(f"settings must be an acute.store.generation.GenerationSettings, got "
                         f"{type(settings).__name__}")
    return dataclasses.replace(settings, max_new_tokens=settings.max_new_tokens or 64,
                               stop_strings=settings.stop_strings or ())


def _prepare(model: nn.Module, tokenizer: Any, prompts: Sequence[str], settings: GenerationSettings,
             on_too_long: str, eos_token_ids: Sequence[int] | None):
    """The checked prompts, EOS ids, pad id and encoded prompts of one generation call:
    ``(prompts, eos_ids, pad_id, encoded, keep)``."""
    prompts = check_strings(prompts, "prompts")
    eos_ids = list(eos_token_ids) if eos_token_ids is not None else resolve_eos(model, tokenizer)
    pad_id = padding_id(tokenizer, eos_ids)
    encoded, keep = encode_prompts(model, tokenizer, prompts, settings.max_new_tokens, on_too_long)
    return prompts, eos_ids, pad_id, encoded, keep


class _BatchInputs:
    """Each planned batch's inputs ``(ids, mask, cache)``: left-padded rows (cache None), or rows
    padded after the prefix they share (at least :data:`MIN_SHARED_PREFIX` tokens, where the
    model's attention window allows) with a copy of that prefix's KV cache, one prefill per
    distinct prefix (consecutive batches often share it)."""

    def __init__(self, model: nn.Module, pad_id: int, max_new_tokens: int):
        self.model, self.pad_id, self.max_new_tokens = model, pad_id, max_new_tokens
        self.prefix: Sequence[int] = []
        self.cache = None

    def __call__(self, seqs: Sequence[Sequence[int]], shared: Sequence[int] | None):
        if shared is None or len(shared) < MIN_SHARED_PREFIX or not window_allows_prefix_cache(
                self.model, max(len(s) for s in seqs) + self.max_new_tokens):
            return (*left_pad(seqs, self.pad_id), None)
        if list(shared) != list(self.prefix):
            self.prefix, self.cache = list(shared), prefill(self.model, shared)
        ids, mask = pad_after_prefix(seqs, len(self.prefix), self.pad_id)
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(len(seqs))
        return ids, mask, cache


def _generation(recorded, r: int, tokenizer: Any, stop_strings: Sequence[str], prompt_tokens: int) -> Generation:
    """Row ``r`` of a recorded batch as a :class:`Generation` (text cut at its stop string)."""
    text = tokenizer.decode(recorded.token_ids[r].tolist(), skip_special_tokens=True)
    reason = recorded.finish_reasons[r]
    if reason == "stop":
        text = cut_at_stop(text, stop_strings)
    checkpoints = {}
    if recorded.checkpoint_tokens is not None:
        checkpoints = {"checkpoint_tokens": recorded.checkpoint_tokens[r],
                       "checkpoint_means": recorded.checkpoint_means[r]}
    return Generation(text=text, token_ids=recorded.token_ids[r], token_logprobs=recorded.token_logprobs[r],
                      layer_means=recorded.layer_means[r], last_prompt=recorded.last_prompt[r],
                      last_answer=recorded.last_answer[r], prompt_tokens=prompt_tokens, finish_reason=reason,
                      **checkpoints)


def _greedy_defaults(do_sample: bool, generate_kwargs: dict) -> None:
    if not do_sample:
        # Greedy: silence sampling parameters a model's generation_config may carry.
        for key in ("temperature", "top_p", "top_k"):
            generate_kwargs.setdefault(key, None)


def generate_after_prompt_pass(model: nn.Module, tokenizer: Any, prompts: Sequence[str],
                               decide: Callable[[np.ndarray, np.ndarray], Any], settings: GenerationSettings, *,
                               do_sample: bool = False,
                               on_too_long: Literal["skip", "error"] = "error",
                               eos_token_ids: Sequence[int] | None = None,
                               checkpoints: Schedule | None = None,
                               on_checkpoint: CheckpointCallback | None = None,
                               **generate_kwargs: Any) -> tuple[list[PromptState | None], list[Generation | None]]:
    """Decide from each prompt's last-token states, then generate only where the decision says
    so, from the same forward pass: a two-stage gate whose first stage costs no extra prompt pass.

    ``settings`` as :func:`generate_with` reads them. Prompts are tokenized, checked and
    batched as :func:`generate_with` does (a prompt
    whose tokens plus ``max_new_tokens`` exceed the context window: ``on_too_long``; prompts
    sharing a prefix batched together, that prefix run once). Per batch one forward pass over the
    prompts (after their shared prefix) gives their last-token states (those of
    :func:`~acute.extraction.prompt_states.record_prompt_states` up to float rounding) and their
    KV cache;
    ``decide(states, index)`` (float32 ``[b, L+1, d]`` and the rows' positions in ``prompts``,
    int ``[b]`` -> ``b`` booleans) says which rows to generate for; those rows generate from that cache with the prompt's last position dropped from it, so
    the recorder sees the last prompt token again (one token recomputed: the position that
    decodes the first answer token, which both pool modes record). A model whose sliding
    attention window is shorter than the longest prompt plus ``max_new_tokens`` generates from
    scratch. The generations equal :func:`generate_and_record`'s up to floating-point rounding
    (tested), and cost what it costs plus one recomputed position per prompt.

    ``checkpoints`` and ``on_checkpoint`` as in :func:`generate_and_record` (the callback gets
    the rows' positions in ``prompts``).

    Returns ``(passes, generations)`` in input order: a
    :class:`~acute.extraction.prompt_states.PromptState` per prompt and a :class:`Generation`
    where ``decide`` said yes (None elsewhere, and in both lists for a skipped prompt).
    """
    settings = _resolved(settings)
    max_new_tokens, stop_strings, pool = settings.max_new_tokens, settings.stop_strings, settings.pool
    prompts, eos_ids, pad_id, encoded, keep = _prepare(model, tokenizer, prompts, settings, on_too_long,
                                                       eos_token_ids)
    _greedy_defaults(do_sample, generate_kwargs)
    lengths = [len(ids) for ids in encoded]
    inputs = _BatchInputs(model, pad_id, max_new_tokens)
    passes: list[PromptState | None] = [None] * len(prompts)
    results: list[Generation | None] = [None] * len(prompts)
    for batch, shared in prefix_batches(encoded, keep, settings.batch_size):
        ids, mask, cache = inputs([encoded[i] for i in batch], shared)
        reuse = window_allows_prefix_cache(model, max(lengths[i] for i in batch) + max_new_tokens)
        with LayerPooler(model) as pooler:
            states, cache = prompt_pass(model, pooler, ids, mask, cache=cache, keep_cache=reuse)
        for r, i in enumerate(batch):
            passes[i] = PromptState(last_prompt=states[r], prompt_tokens=lengths[i])
        go = np.asarray(decide(states, np.asarray(batch, dtype=np.int64)), dtype=bool).reshape(-1)
        if go.shape != (len(batch),):
            raise InputError(f"decide returned {go.size} decisions for a batch of {len(batch)} prompts")
        rows = np.flatnonzero(go)
        if rows.size == 0:
            continue
        ids, mask = ids[rows], mask[rows]
        cache_kwargs: dict[str, Any] = {}
        if cache is not None:
            if rows.size < len(batch):
                cache.batch_select_indices(torch.as_tensor(rows, device=_cache_device(cache)))
            cache.crop(-1)  # transformers 5.x: a negative count removes that many positions
            cache_kwargs[cache_keyword(model)] = cache
        def in_prompts(k, r, means, confidence, live=[batch[j] for j in rows]):  # batch rows -> prompts
            return on_checkpoint(k, np.asarray([live[j] for j in r], dtype=np.int64), means, confidence)

        with HiddenStateRecorder(model, pool=pool, checkpoints=checkpoints,
                                 on_checkpoint=None if on_checkpoint is None else in_prompts) as recorder:
            recorded = recorder.generate(ids, mask, max_new_tokens=max_new_tokens, eos_token_ids=eos_ids,
                                         stop_strings=stop_strings, tokenizer=tokenizer, do_sample=do_sample,
                                         pad_token_id=pad_id, **cache_kwargs, **generate_kwargs)
        for r, row in enumerate(rows):
            i = batch[row]
            results[i] = _generation(recorded, r, tokenizer, stop_strings, lengths[i])
    return passes, results


def _cache_device(cache) -> Any:
    """The device of a KV cache's first layer (where its batch indices must live)."""
    layers = getattr(cache, "layers", None)
    if layers:
        keys = getattr(layers[0], "keys", None)
        if keys is not None:
            return keys.device
    return "cpu"
