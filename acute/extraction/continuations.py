"""Teacher-forced scoring: the log-probabilities of given continuations after given prompts."""

from __future__ import annotations

import copy
import logging
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import InputError
from .layers import forward_accepts, model_device
from .batching import (
    MIN_SHARED_PREFIX,
    cache_keyword,
    check_strings,
    left_pad,
    pad_after_prefix,
    padding_id,
    prefill,
    prefix_batches,
    resolve_eos,
    tokenize,
    window_allows_prefix_cache,
    length_blocks,
    within_context_window,
)

__all__ = ["continuation_logprobs", "logprobs_of", "project_states", "projects_own_logits",
           "token_continuation_logprobs"]

logger = logging.getLogger(__name__)


def continuation_logprobs(model: nn.Module, tokenizer: Any, prompts: Sequence[str],
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
    cost one prompt pass instead of one each. Distinct prompts that share a prefix (system
    prompt, few-shot demonstrations) are batched as :func:`generate_and_record` batches them:
    the prefix runs once and each batch starts from a copy of its cache. Models whose ``forward`` takes no ``position_ids``
    use the plain path: pairs sorted by length, one left-padded forward pass per batch.
    """
    prompts = check_strings(prompts, "prompts")
    continuations = check_strings(continuations, "continuations")
    return token_continuation_logprobs(model, tokenize(tokenizer, prompts), tokenize(tokenizer, continuations),
                                     pad_id=padding_id(tokenizer, resolve_eos(model, tokenizer)),
                                     batch_size=batch_size, reuse_prefix=reuse_prefix)


def token_continuation_logprobs(model: nn.Module, prompt_ids: Sequence[Sequence[int]],
                              continuation_ids: Sequence[Sequence[int]], *, pad_id: int, batch_size: int = 8,
                              reuse_prefix: bool = True) -> list[np.ndarray]:
    """:func:`continuation_logprobs` on token ids (``prompt_ids[i]`` then ``continuation_ids[i]``;
    ``pad_id`` fills padded positions), for callers that tokenized already. Same results and
    errors."""
    p_ids = [list(p) for p in prompt_ids]
    c_ids = [list(c) for c in continuation_ids]
    if len(p_ids) != len(c_ids):
        raise InputError(f"prompts ({len(p_ids)}) and continuations ({len(c_ids)}) differ in length")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    for i, (p, c) in enumerate(zip(p_ids, c_ids)):
        if not c:
            raise InputError(f"continuations[{i}] is empty (tokenizes to no tokens)")
        if not p:
            raise InputError(f"prompts[{i}] is empty; the first continuation token needs a context")
    lengths = [len(p) + len(c) for p, c in zip(p_ids, c_ids)]
    within_context_window(model, lengths, "error",
                          lambda i, limit: (f"prompts[{i}] + continuations[{i}] has {lengths[i]} "
                                            f"tokens, more than the context window of {limit}"))
    keep_logits = forward_accepts(model, "logits_to_keep")
    pass_positions = forward_accepts(model, "position_ids")
    if reuse_prefix and pass_positions:
        return _score_from_prefix_cache(model, p_ids, c_ids, pad_id, batch_size, keep_logits)
    device = model_device(model)
    order = sorted(range(len(p_ids)), key=lambda i: -(len(p_ids[i]) + len(c_ids[i])))
    out: list[np.ndarray | None] = [None] * len(p_ids)
    with torch.inference_mode():
        for k in range(0, len(order), batch_size):
            batch = order[k: k + batch_size]
            ids, mask = left_pad([p_ids[i] + c_ids[i] for i in batch], pad_id)
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


def logprobs_of(logits: torch.Tensor, targets: Sequence[int]) -> np.ndarray:
    """log_softmax of ``logits`` [n, V] (row j predicts ``targets[j]``) gathered at the targets."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(list(targets), dtype=torch.long, device=logprobs.device)[:, None]
    return logprobs.gather(1, index).squeeze(1).cpu().numpy().astype(np.float32)


def project_states(model: nn.Module, states: torch.Tensor) -> torch.Tensor:
    """The logits ``model`` computes from final-norm hidden states ``states`` [..., d]: its
    output embedding, then the final-logit soft-capping where the config sets one (Gemma 2)."""
    logits = model.get_output_embeddings()(states)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def projects_own_logits(model: nn.Module) -> bool:
    """Whether :func:`project_states` of the last hidden state reproduces ``model``'s logits (a
    model with another output transform, e.g. a logit scale, does not); checked once on three
    tokens and remembered on the model. Where it does, only the positions that are scored pay for
    the output layer (with a large vocabulary most of a teacher-forced pass otherwise)."""
    known = getattr(model, "_acute_projects_logits", None)
    if known is not None:
        return known
    ids = torch.tensor([[1, 2, 3]], dtype=torch.long, device=model_device(model))
    try:
        with torch.inference_mode():
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
            ok = bool(torch.allclose(project_states(model, out.hidden_states[-1]).float(), out.logits.float(),
                                     rtol=1e-4, atol=1e-4))
    except Exception:  # noqa: BLE001 - any surprise means: use the model's own logits
        ok = False
    try:
        model._acute_projects_logits = ok
    except Exception:  # noqa: BLE001 - e.g. a wrapped module that refuses attributes
        pass
    return ok


def _score_from_prefix_cache(model: nn.Module, p_ids: list[list[int]], c_ids: list[list[int]],
                             pad_id: int, batch_size: int, keep_logits: bool) -> list[np.ndarray]:
    """:func:`continuation_logprobs` with one KV-cache pass per distinct prompt and one per shared
    prefix of distinct prompts (see there)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(p_ids):
        groups.setdefault(tuple(p), []).append(i)
    prompts = list(groups)
    device = model_device(model)
    cache_kw = cache_keyword(model)
    out: list[np.ndarray | None] = [None] * len(p_ids)
    shared: list[int] = []
    shared_cache = None
    project = projects_own_logits(model)
    with torch.inference_mode():
        for members, common in prefix_batches(prompts, range(len(prompts)), batch_size):
            batch = [prompts[j] for j in members]
            kwargs: dict[str, Any] = {"use_cache": True}
            longest = max(len(p) for p in batch) + max(len(c_ids[i]) for p in batch for i in groups[p])
            if len(common) >= MIN_SHARED_PREFIX and window_allows_prefix_cache(model, longest):
                if common != shared:  # consecutive batches of a group share its prefix
                    shared, shared_cache = common, prefill(model, common)
                cache = copy.deepcopy(shared_cache)
                cache.batch_repeat_interleave(len(batch))
                ids, mask = pad_after_prefix(batch, len(common), pad_id)
                ids, kwargs[cache_kw] = ids[:, len(common):], cache
            else:
                ids, mask = left_pad(batch, pad_id)
            ids, mask = ids.to(device), mask.to(device)
            kwargs.update(input_ids=ids, attention_mask=mask,
                          position_ids=(mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:])
            if keep_logits:
                kwargs["logits_to_keep"] = 1
            res = model(**kwargs)
            last = res.logits[:, -1, :]  # predicts each continuation's first token
            rows = [(r, i) for r, prefix in enumerate(batch) for i in groups[prefix]]
            for r, i in rows:
                if len(c_ids[i]) == 1:  # nothing to feed: the prompt's last logits score it
                    out[i] = logprobs_of(last[r: r + 1], c_ids[i])
            longer = [(r, i) for r, i in rows if len(c_ids[i]) > 1]
            # continuation tokens fed as input, in blocks of similar length (padding is computed)
            width = [len(c_ids[i]) - 1 for _, i in longer]
            order = sorted(range(len(longer)), key=lambda j: -width[j])
            blocks = [[order[j] for j in b] for b in length_blocks([width[j] for j in order])]
            cache = res.cache if cache_kw == "cache" else res.past_key_values
            for k, block in enumerate(blocks):
                # every block but the last starts from a copy of the prompts' cache
                block_cache = cache if k == len(blocks) - 1 else copy.deepcopy(cache)
                _score_block(model, block_cache, mask, last, [longer[j] for j in block], c_ids, out,
                             pad_id=pad_id, cache_kw=cache_kw, project=project, keep_logits=keep_logits)
    return out  # type: ignore[return-value]


def _score_block(model: nn.Module, cache, mask: torch.Tensor, last: torch.Tensor, rows: list[tuple[int, int]],
                 c_ids: list[list[int]], out: list, *, pad_id: int, cache_kw: str, project: bool,
                 keep_logits: bool) -> None:
    """Teacher-force the continuations ``rows`` (``(prompt row r, pair i)``, at least two tokens
    each) on top of ``cache`` (one row per prompt, attention ``mask``; ``last[r]``: the logits
    that predict each continuation's first token): the cache rows are repeated for the block
    (in place), its continuations right-padded; log-probs written to ``out[i]``."""
    device = mask.device
    select = torch.tensor([r for r, _ in rows], dtype=torch.long, device=device)
    cache.batch_select_indices(select)
    width = max(len(c_ids[i]) for _, i in rows) - 1
    cont = torch.full((len(rows), width), pad_id, dtype=torch.long)
    cont_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for j, (_, i) in enumerate(rows):
        n = len(c_ids[i]) - 1
        cont[j, :n] = torch.tensor(c_ids[i][:-1], dtype=torch.long)
        cont_mask[j, :n] = 1
    cont, cont_mask = cont.to(device), cont_mask.to(device)
    positions = mask.sum(-1)[select][:, None] + torch.arange(width, device=device)[None, :]
    kwargs = {"input_ids": cont, "attention_mask": torch.cat([mask[select], cont_mask], 1),
              "position_ids": positions, "use_cache": True, cache_kw: cache}
    if project:  # the output layer only at the real continuation positions
        res = model(**kwargs, output_hidden_states=True, **({"logits_to_keep": 1} if keep_logits else {}))
        states = res.hidden_states[-1]
        for j, (r, i) in enumerate(rows):
            logits = project_states(model, states[j, : len(c_ids[i]) - 1])
            out[i] = logprobs_of(torch.cat([last[r: r + 1], logits]), c_ids[i])
        return
    logits = model(**kwargs).logits
    for j, (r, i) in enumerate(rows):
        out[i] = logprobs_of(torch.cat([last[r: r + 1], logits[j, : len(c_ids[i]) - 1]]), c_ids[i])
