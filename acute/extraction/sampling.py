"""Sampled answers beside the greedy one: ``k`` answers per prompt at a temperature and nucleus
(:class:`~acute.store.sampling.SamplingSettings`), with their tokens' log-probabilities under
the model's raw distribution (as the recorder's), and no hidden states.

Each batch of prompts is prefilled once; its KV cache is then repeated ``k`` times, so the ``k``
samples of a prompt share that prompt's prefill. Finished rows leave the batch and the cache
after each step. Each sample draws from its own random stream
(:func:`~acute.store.sampling.row_seed` of the settings' seed, the prompt's key and the
sample's index) by inverse transform sampling: its tokens do not depend on the batch it ran in.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import InputError
from ..store.generation import GenerationSettings
from ..store.sampling import row_seed
from .batching import (cache_keyword, check_strings, cut_at_stop, encode_prompts, left_pad, padding_id,
                       resolve_eos)
from .layers import forward_accepts, model_device

__all__ = ["Sample", "sample_answers", "next_token_distribution"]


@dataclasses.dataclass
class Sample:
    """One sampled answer: ``text`` (special tokens skipped, cut before a stop string),
    ``token_ids`` int64[T], ``token_logprobs`` float32[T] (raw distribution, before temperature
    and nucleus), ``finish_reason`` (``"eos"``, ``"stop"`` or ``"length"``)."""

    text: str
    token_ids: np.ndarray
    token_logprobs: np.ndarray
    finish_reason: str

    def to_record(self, label: dict) -> dict:
        """The sample as a store record keeps it, with the task's ``answer``, ``parse_error`` and
        ``correct`` from ``label``."""
        return {"text": self.text, "answer": label["answer"], "parse_error": bool(label["parse_error"]),
                "correct": bool(label["correct"]), "finish_reason": self.finish_reason,
                "token_ids": [int(t) for t in self.token_ids],
                "token_logprobs": [float(x) for x in self.token_logprobs]}


def next_token_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """float64 [b, V] probabilities the sampler draws from: softmax of ``logits / temperature``
    restricted to the smallest set of most likely tokens whose mass reaches ``top_p`` (the most
    likely token always kept), renormalised."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p >= 1:
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(-1) - ordered  # mass of the more likely tokens
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, ordered)
    return kept / kept.sum(-1, keepdim=True)


def _draw(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row: inverse transform of one uniform from each row's generator."""
    u = torch.tensor([torch.rand(1, generator=g, dtype=torch.float64).item() for g in generators],
                     dtype=torch.float64, device=probs.device)
    cdf = probs.cumsum(-1)
    token = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1)).squeeze(1)
    return token.clamp(max=probs.shape[1] - 1)


# Long because the decoding loop is one ordered sequence (forward, draw, stop, drop finished rows)
# that mirrors acute.extraction.decoding.greedy_decode.
def _sample_batch(model: nn.Module, tokenizer: Any, seqs: Sequence[Sequence[int]], keys: Sequence[Any],
                  generation: GenerationSettings, eos_ids: Sequence[int], pad_id: int) -> list[list[Sample]]:
    device = model_device(model)
    settings, max_new_tokens, stop_strings = generation.samples, generation.max_new_tokens, generation.stop_strings or ()
    k = settings.k
    ids, mask = (t.to(device) for t in left_pad(seqs, pad_id))
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    key = cache_keyword(model)
    keep_logits = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
    takes_positions = forward_accepts(model, "position_ids")
    n = len(seqs) * k
    generators = [torch.Generator().manual_seed(row_seed(settings.seed, keys[r // k], r % k)) for r in range(n)]
    tokens: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    reasons = ["length"] * n
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    rows = torch.arange(n, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True,
                    **({"position_ids": positions} if takes_positions else {}), **keep_logits)
        cache = out.cache if key == "cache" else out.past_key_values
        cache.batch_repeat_interleave(k)
        logits = out.logits[:, -1, :].repeat_interleave(k, dim=0)
        mask = mask.repeat_interleave(k, dim=0)
        step_pos = positions[:, -1:].repeat_interleave(k, dim=0)
        for _ in range(max_new_tokens):
            live = rows.tolist()
            probs = next_token_distribution(logits, settings.temperature, settings.top_p)
            token = _draw(probs, [generators[r] for r in live])
            raw = torch.log_softmax(logits.float(), dim=-1).gather(1, token.unsqueeze(1)).squeeze(1)
            finished = torch.isin(token, eos) if eos.numel() else torch.zeros_like(token, dtype=torch.bool)
            for j, (r, t, lp) in enumerate(zip(live, token.tolist(), raw.tolist())):
                tokens[r].append(t)
                logprobs[r].append(lp)
                if finished[j]:
                    reasons[r] = "eos"
                elif stop_strings and any(s in tokenizer.decode(tokens[r], skip_special_tokens=True)
                                          for s in stop_strings):
                    reasons[r] = "stop"
                    finished[j] = True
                elif len(tokens[r]) >= max_new_tokens:
                    finished[j] = True
            keep = (~finished).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            if keep.numel() < rows.numel():
                cache.batch_select_indices(keep)
                rows, mask, token, step_pos = rows[keep], mask[keep], token[keep], step_pos[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            step_pos = step_pos + 1
            out = model(input_ids=token.unsqueeze(1), attention_mask=mask, use_cache=True,
                        **({"position_ids": step_pos} if takes_positions else {}),
                        **{key: cache}, **keep_logits)
            cache = out.cache if key == "cache" else out.past_key_values
            logits = out.logits[:, -1, :]
    samples = []
    for r in range(n):
        text = tokenizer.decode(tokens[r], skip_special_tokens=True)
        if reasons[r] == "stop":
            text = cut_at_stop(text, stop_strings)
        samples.append(Sample(text=text, token_ids=np.asarray(tokens[r], dtype=np.int64),
                              token_logprobs=np.asarray(logprobs[r], dtype=np.float32), finish_reason=reasons[r]))
    return [samples[i * k:(i + 1) * k] for i in range(len(seqs))]


def sample_answers(model: nn.Module, tokenizer: Any, prompts: Sequence[str], keys: Sequence[Any],
                   settings: GenerationSettings, *, eos_token_ids: Sequence[int] | None = None,
                   on_batch: Callable[[int], None] | None = None) -> list[list[Sample] | None]:
    """``settings.samples.k`` sampled answers for each fully formatted prompt (in input order),
    ``keys`` naming each prompt's random streams (the record ids), drawn as ``settings.samples``
    says (:class:`~acute.store.sampling.SamplingSettings`). Prompts go in batches of
    ``settings.batch_size`` (each then ``batch_size * k`` rows while decoding), longest first; a
    row ends at an EOS id (default: the model's), one of ``settings.stop_strings`` or
    ``settings.max_new_tokens``. A prompt that does not fit the context window with
    ``max_new_tokens`` gets None (as the greedy pass skips it). ``on_batch(n)`` is called after
    each batch of ``n`` prompts."""
    prompts = check_strings(prompts, "prompts")
    if not isinstance(settings, GenerationSettings) or settings.samples is None or settings.max_new_tokens is None:
        raise InputError("settings must be a GenerationSettings with samples and max_new_tokens, got "
                         f"{settings!r}")
    if len(keys) != len(prompts):
        raise InputError(f"keys has {len(keys)} entries for {len(prompts)} prompts")
    eos_ids = list(eos_token_ids) if eos_token_ids is not None else resolve_eos(model, tokenizer)
    pad_id = padding_id(tokenizer, eos_ids)
    encoded, keep = encode_prompts(model, tokenizer, prompts, settings.max_new_tokens, "skip")
    order = sorted(keep, key=lambda i: -len(encoded[i]))
    results: list[list[Sample] | None] = [None] * len(prompts)
    for start in range(0, len(order), settings.batch_size):
        batch = order[start:start + settings.batch_size]
        drawn = _sample_batch(model, tokenizer, [encoded[i] for i in batch], [keys[i] for i in batch],
                              settings, eos_ids, pad_id)
        for i, samples in zip(batch, drawn):
            results[i] = samples
        if on_batch is not None:
            on_batch(len(batch))
    return results
