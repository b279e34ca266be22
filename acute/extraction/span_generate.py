"""Greedy continuations of prompts that also score a span inside each prompt, from one KV cache.

The protocol study asks a model, for every answer it rates, to continue a verbalization prompt
(``... <answer> ... How confident are you?``) and also needs the teacher-forced log-probs of
``<answer>`` inside that same prompt. Both come from one forward pass over the prompt: the logits
at the answer's positions give its log-probs, the logit at the prompt's last position starts the
greedy continuation. Prompts of one *group* (e.g. the four answers rated for one question) share
their text up to the answer, so that prefix runs once per group:

1. the groups' shared prefixes, left-padded, one forward pass (KV cache kept);
2. the cache rows repeated for each group's prompts; the prompts' own tokens up to the end of the
   span, left-padded after the prefix, one forward pass; the output layer then runs only at the
   span's positions (:func:`~acute.extraction.continuations.project_states`, where it
   reproduces the model's logits; else the logits of the last ``span + 1`` columns are kept);
3. the rest of each prompt, left-padded, one forward pass keeping the last column;
4. greedy decoding that drops rows from the batch and the cache once they emit an EOS id.

Padding sits between the parts of a row; the attention mask hides it and position ids count
real tokens only, so every row sees exactly its own prompt (as :func:`generate_and_record`'s
shared-prefix path does). No hidden state is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import InputError
from .batching import cache_keyword, left_pad, shared_prefix, window_allows_prefix_cache
from .layers import forward_accepts, model_device
from .continuations import logprobs_of, project_states, projects_own_logits

__all__ = ["generate_with_span_scores", "supports_span_generation"]


@dataclass
class SpanGeneration:
    """``token_ids`` int64[T]: the greedy continuation (the final EOS included when it stopped
    there); ``span_logprobs`` float32[span length]: teacher-forced log-probs of the span's tokens
    (``None`` when no span was given); ``finish_reason``: ``"eos"`` or ``"length"``."""

    token_ids: np.ndarray
    span_logprobs: np.ndarray | None
    finish_reason: str


def supports_span_generation(model: nn.Module, longest: int) -> bool:
    """Whether :func:`generate_with_span_scores` can run ``model`` on rows of up to ``longest``
    positions: its forward takes ``position_ids`` (padding between a row's parts) and no sliding
    attention window shorter than a row would count that padding."""
    return forward_accepts(model, "position_ids") and window_allows_prefix_cache(model, longest)


def generate_with_span_scores(model: nn.Module, prompts: Sequence[Sequence[int]],
                              spans: Sequence[tuple[int, int] | None], groups: Sequence[Hashable], *,
                              max_new_tokens: int, eos_token_ids: Sequence[int], pad_id: int,
                              batch_size: int = 8) -> list[SpanGeneration]:
    """Greedy continuation of every prompt (token ids) and the log-probs of its span.

    ``spans[i] = (start, end)`` marks ``prompts[i][start:end]`` (``1 <= start < end <= len``), or
    ``None``; ``groups[i]`` names the prompt's group: prompts of a group share their cached prefix
    (the longest common one, cut before every member's span). ``batch_size`` groups run together.
    Returns one :class:`SpanGeneration` per prompt, in input order. The results equal those of
    :func:`acute.extraction.generate_and_record` (greedy, no stop strings) and
    :func:`acute.extraction.continuation_logprobs` on the same token ids up to floating-point
    rounding. Raises ``ValueError`` for an empty prompt, a bad span or bad sizes; the caller
    checks :func:`supports_span_generation` and the context window.
    """
    prompts = [list(p) for p in prompts]
    if not (len(prompts) == len(spans) == len(groups)):
        raise InputError(f"prompts ({len(prompts)}), spans ({len(spans)}) and groups ({len(groups)}) "
                         "differ in length")
    if batch_size < 1 or max_new_tokens < 1:
        raise InputError(f"batch_size and max_new_tokens must be >= 1, got {batch_size}, {max_new_tokens}")
    for i, (p, span) in enumerate(zip(prompts, spans)):
        if not p:
            raise InputError(f"prompts[{i}] is empty")
        if span is not None and not (1 <= span[0] < span[1] <= len(p)):
            raise InputError(f"spans[{i}] = {span} is not inside prompts[{i}] ({len(p)} tokens, "
                             "the span needs a token before it)")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    order = sorted(members.values(), key=lambda m: -max(len(prompts[i]) for i in m))
    out: list[SpanGeneration | None] = [None] * len(prompts)
    for k in range(0, len(order), batch_size):
        rows = [i for m in order[k: k + batch_size] for i in m]
        for i, result in zip(rows, _run_batch(model, prompts, spans, order[k: k + batch_size],
                                              max_new_tokens, list(eos_token_ids), pad_id)):
            out[i] = result
    return out  # type: ignore[return-value]


def _group_prefix(prompts, spans, member_ids: Sequence[int]) -> int:
    """Length of the prefix a group caches: common to its prompts, leaving each at least the
    token before its span (whose logit scores the span's first token) and one token to feed."""
    n = len(shared_prefix([prompts[i] for i in member_ids]))
    for i in member_ids:
        n = min(n, (spans[i][0] - 1) if spans[i] is not None else len(prompts[i]) - 1)
    return max(n, 0)


class _Batch:
    """The growing attention mask and KV cache of one batch, fed part by part."""

    def __init__(self, model: nn.Module, pad_id: int):
        self.model, self.pad_id = model, pad_id
        self.device = model_device(model)
        self.key = cache_keyword(model)
        self.keep_logits = forward_accepts(model, "logits_to_keep")
        self.mask: torch.Tensor | None = None
        self.cache = None

    def feed(self, parts: Sequence[Sequence[int]], keep: int, states: bool = False) -> torch.Tensor | None:
        """Left-pad ``parts`` after what each row holds, run them and return the logits of the
        last ``keep`` columns ``[rows, keep, V]``, or with ``states`` their final hidden states
        ``[rows, keep, d]`` (the output layer then runs on the last column only). None when
        every part is empty."""
        if max(len(p) for p in parts) == 0:
            return None
        ids, mask = left_pad(parts, self.pad_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        full = mask if self.mask is None else torch.cat([self.mask, mask], 1)
        positions = (full.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": full, "position_ids": positions,
                                  "use_cache": True}
        if self.cache is not None:
            kwargs[self.key] = self.cache
        if self.keep_logits:
            kwargs["logits_to_keep"] = 1 if states else keep
        res = self.model(**kwargs, **({"output_hidden_states": True} if states else {}))
        self.cache = res.cache if self.key == "cache" else res.past_key_values
        self.mask = full
        return (res.hidden_states[-1] if states else res.logits)[:, -keep:, :]

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows.to(self.device))
        self.mask = self.mask[rows.to(self.mask.device)]


def _run_batch(model, prompts, spans, batch_groups, max_new_tokens, eos_ids, pad_id) -> list[SpanGeneration]:
    rows = [i for m in batch_groups for i in m]
    heads = [_group_prefix(prompts, spans, m) for m in batch_groups]
    start = [h for h, m in zip(heads, batch_groups) for _ in m]
    # end of the part that keeps logits: the span's end (empty part for a row without a span)
    cut = [spans[i][1] if spans[i] is not None else start[r] for r, i in enumerate(rows)]
    batch = _Batch(model, pad_id)
    with torch.inference_mode():
        batch.feed([prompts[m[0]][:h] for h, m in zip(heads, batch_groups)], 1)
        if batch.cache is not None:
            batch.select(torch.tensor([g for g, m in enumerate(batch_groups) for _ in m]))
        keep = max([spans[i][1] - spans[i][0] + 1 for i in rows if spans[i] is not None], default=1)
        # with a large vocabulary the output layer over every padded column would dominate:
        # project only the span's positions where the model's logits allow it
        project = projects_own_logits(model)
        span_out = batch.feed([prompts[i][start[r]:cut[r]] for r, i in enumerate(rows)], keep, states=project)
        results_span: list[np.ndarray | None] = []
        for r, i in enumerate(rows):
            if spans[i] is None:
                results_span.append(None)
                continue
            s, e = spans[i]
            at = span_out[r, keep - (e - s + 1): keep - 1]
            results_span.append(logprobs_of(project_states(model, at) if project else at, prompts[i][s:e]))
        if span_out is not None and project:  # the last column's logits, for rows ending here
            span_out = project_states(model, span_out[:, -1:])
        rest_logits = batch.feed([prompts[i][cut[r]:] for r, i in enumerate(rows)], 1)
        # a row with nothing after its span continues from the span part's last column
        last = torch.stack([(rest_logits if len(prompts[i]) > cut[r] else span_out)[r, -1]
                            for r, i in enumerate(rows)])
        tokens = _greedy(model, batch, last, len(rows), max_new_tokens, eos_ids)
    return [SpanGeneration(token_ids=np.asarray(t, dtype=np.int64), span_logprobs=sp,
                           finish_reason="eos" if t and t[-1] in eos_ids else "length")
            for t, sp in zip(tokens, results_span)]


def _greedy(model, batch: _Batch, logits: torch.Tensor, n_rows: int, max_new_tokens: int,
            eos_ids: Sequence[int]) -> list[list[int]]:
    """Greedy decoding from ``logits`` (each row's next-token logits), dropping finished rows."""
    out: list[list[int]] = [[] for _ in range(n_rows)]
    alive = torch.arange(n_rows)
    eos = torch.tensor(list(eos_ids), dtype=torch.long)
    for step in range(max_new_tokens):
        token = logits.argmax(-1).cpu()
        for r, t in zip(alive.tolist(), token.tolist()):
            out[r].append(int(t))
        running = ~torch.isin(token, eos) if len(eos) else torch.ones_like(token, dtype=torch.bool)
        if step == max_new_tokens - 1 or not bool(running.any()):
            break
        if not bool(running.all()):
            keep = running.nonzero().squeeze(1)
            batch.select(keep)
            alive, token = alive[keep], token[keep]
        logits = batch.feed([[t] for t in token.tolist()], 1)[:, -1]
    return out
