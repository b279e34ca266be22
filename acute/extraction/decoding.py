"""Decoding for the recorder: greedy decoding that drops finished rows (and their KV cache), and
the rule for when it replaces ``model.generate`` (plain greedy settings only)."""

from __future__ import annotations

import torch
from torch import nn

from .batching import cache_keyword
from .layers import forward_accepts

__all__ = ["greedy_decode", "plain_greedy"]


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


def plain_greedy(model: nn.Module, generate_kwargs: dict) -> bool:
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


def greedy_decode(model: nn.Module, run, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_steps: int,
                  criterion, generate_kwargs: dict) -> None:
    """Greedy decoding as ``model.generate`` does it (same inputs, position ids and cache
    handling), except that the rows ``criterion`` marks finished leave the batch and its KV
    cache after each step. ``run`` is the recorder's state for this batch: it is told which
    original rows each forward pass holds, and its hooks supply the next-token logits."""
    assert run is not None
    key = cache_keyword(model)
    cache = generate_kwargs.get(key)
    past = cache.get_seq_length() if cache is not None else 0
    mask = attention_mask
    # positions count real tokens only (left padding, padding after a cached prefix)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    step_ids, step_pos = input_ids[:, past:], positions[:, past:]
    rows = torch.arange(run.batch_size, device=input_ids.device)
    last_tokens = torch.full((run.batch_size, 1), int(generate_kwargs.get("pad_token_id") or 0),
                             dtype=torch.long, device=input_ids.device)
    keep_logits = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
    # as generate: position ids only for models that take them (not e.g. ALiBi models)
    takes_positions = forward_accepts(model, "position_ids")
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
