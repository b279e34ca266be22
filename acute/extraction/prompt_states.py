"""The prompt pass: the states at each prompt's last token, from one forward pass over the
prompt, without decoding a token.

They are the ``last_prompt`` states the recorder keeps while generating (the position that
decodes the first answer token, in both pool modes): the same hooks
(:class:`~acute.extraction.pooler.LayerPooler`, so the same layer indexing: 0 = the embedding
output, ``L`` = the final norm's output), the same tokenization (``add_special_tokens=False``)
and the same positions (left padding, position ids counted over real tokens). They equal what
:func:`acute.extraction.generate_and_record` records for the same prompt up to float rounding
(tested). A question-only probe reads them to decide before anything is generated
(:meth:`acute.scoring.Scorer.precheck`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import InputError
from ..store.generation import BATCH_SIZE
from .batching import (cache_keyword, check_strings, encode_prompts, left_pad, padding_id, resolve_eos,
                       split_batches)
from .layers import forward_accepts, model_device
from .pooler import LayerPooler, check_dtype

__all__ = ["PromptState", "prompt_pass", "record_prompt_states"]


@dataclasses.dataclass
class PromptState:
    """One prompt's pass: ``last_prompt`` float32 ``[L+1, d]`` (the states at its last token)
    and ``prompt_tokens`` (its length in tokens)."""

    last_prompt: np.ndarray
    prompt_tokens: int


def _prompt_batch(model: nn.Module, pooler: LayerPooler, seqs: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    """float32 ``[b, L+1, d]``: the last-token states of one left-padded batch, one forward."""
    ids, mask = left_pad(seqs, pad_id)
    return prompt_pass(model, pooler, ids, mask)[0]


def prompt_pass(model: nn.Module, pooler: LayerPooler, ids: torch.Tensor, mask: torch.Tensor, cache: Any = None,
                keep_cache: bool = False) -> tuple[np.ndarray, Any]:
    """``(states, cache)``: the last-token states float32 ``[b, L+1, d]`` of a batch of prompts
    (``ids`` / ``mask``, left-padded or padded after a prefix that ``cache`` already holds: only
    the positions after it are fed) from one forward pass, and with ``keep_cache`` (or a given
    ``cache``) the KV cache of the whole prompts, None otherwise: what
    :func:`acute.extraction.generate.generate_after_prompt_pass` generates from."""
    device = model_device(model)
    ids, mask = ids.to(device), mask.to(device)
    past = cache.get_seq_length() if cache is not None else 0
    kwargs: dict[str, Any] = {"input_ids": ids[:, past:], "attention_mask": mask,
                              "use_cache": keep_cache or cache is not None}
    if cache is not None:
        kwargs[cache_keyword(model)] = cache
    if forward_accepts(model, "position_ids"):  # as generate builds them: real tokens only
        kwargs["position_ids"] = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, past:]
    if forward_accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    pooler.reset(ids.shape[0])
    # no weights: the hooks see the last fed position of each row (left padding puts every
    # prompt's last token there) and keep it under "last_prompt"
    pooler.set_weights(None, picks={"last_prompt": torch.zeros(ids.shape[0], dtype=torch.long, device=device)})
    try:
        with torch.no_grad():
            out = model(**kwargs)
    finally:
        pooler.set_weights(None)
    if not kwargs["use_cache"]:
        return pooler.states("last_prompt"), None
    return pooler.states("last_prompt"), out.cache if cache_keyword(model) == "cache" else out.past_key_values


def record_prompt_states(model: nn.Module, tokenizer: Any, prompts: Sequence[str], *,
                         batch_size: int = BATCH_SIZE, reserve: int = 0,
                         on_too_long: Literal["skip", "error"] = "error",
                         eos_token_ids: Sequence[int] | None = None,
                         dtype: torch.dtype = torch.float32) -> list[PromptState | None]:
    """The states at each fully formatted prompt's last token (see the module docstring).

    Prompts are tokenized with ``add_special_tokens=False`` and run longest first in left-padded
    batches of at most ``batch_size`` (closed early rather than padded much:
    :func:`~acute.extraction.batching.split_batches`), one forward pass each with no KV cache
    and the logits of the last position only. A prompt is too long when its tokens plus
    ``reserve`` (the new tokens a later generation needs; 0 for the pass alone) exceed the
    context window: ``on_too_long="error"`` (default) raises :class:`InputError` naming it before
    anything runs, ``"skip"`` leaves ``None`` in its slot with a warning. Returns one
    :class:`PromptState` per prompt in input order. Raises :class:`InputError` for an empty
    prompt or a bad argument.
    """
    prompts = check_strings(prompts, "prompts")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if reserve < 0:
        raise InputError(f"reserve must be >= 0, got {reserve}")
    check_dtype(dtype)
    encoded, keep = encode_prompts(model, tokenizer, prompts, reserve, on_too_long)
    eos_ids = list(eos_token_ids) if eos_token_ids is not None else resolve_eos(model, tokenizer)
    pad_id = padding_id(tokenizer, eos_ids)
    lengths = [len(ids) for ids in encoded]
    order = sorted(keep, key=lambda i: -lengths[i])
    results: list[PromptState | None] = [None] * len(prompts)
    with LayerPooler(model, dtype=dtype) as pooler:
        for batch in split_batches(order, lengths, batch_size):
            states = _prompt_batch(model, pooler, [encoded[i] for i in batch], pad_id)
            for r, i in enumerate(batch):
                results[i] = PromptState(last_prompt=states[r], prompt_tokens=lengths[i])
    return results
