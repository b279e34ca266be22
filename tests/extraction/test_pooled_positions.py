"""The two single-position poolings the recorder keeps besides the mean: ``last_prompt`` (the
state at the prompt's last token) and ``last_answer`` (the state at the last pooled position),
checked against one unpadded ``output_hidden_states=True`` forward over prompt + answer, and
teacher forcing against generation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acute.extraction import generate_after_prompt_pass, generate_and_record, record_prompt_states, record_responses
from acute.store.generation import GenerationSettings
from acute.testing import make_tiny_model, make_tiny_tokenizer
from test_extraction import SHARED, assert_close_scaled, assert_matches_reference, first_stop

# prompts of different lengths after a shared prefix (left padding, or padding after the prefix)
PROMPTS = [SHARED + " Water is", SHARED + " Mars", SHARED + " How many legs?", SHARED + " Mars is a"]
N = 8


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


_MODELS: dict = {}


def tiny(arch):
    """The tiny model with an untied random output embedding, so that greedy decoding emits
    varied tokens (tied, tiny gemma3 and gpt2 repeat one token) and EOS ids chosen among them
    stop rows at varied steps. gemma3's sliding window of 64 would turn the prefix cache off."""
    if arch not in _MODELS:
        model = make_tiny_model(arch, initializer_range=0.3,
                                **({"sliding_window": 128} if arch == "gemma3" else {}))
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(
            0.1 * torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(0)))
        _MODELS[arch] = model
    return _MODELS[arch]


def stopping_eos(model, tok):
    """EOS ids that stop row 0 after one token and row 1 after four (the others where they emit
    them, or at N), and the resulting lengths."""
    free = generate_and_record(model, tok, PROMPTS, max_new_tokens=N, batch_size=4, eos_token_ids=[])
    seqs = [g.token_ids.tolist() for g in free]
    eos = [seqs[0][0], seqs[1][3]]
    return eos, [first_stop(s, eos) or N for s in seqs]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_generating_after_the_prompt_pass_equals_the_recorder(arch, pool, tok):
    """The two-stage gate's generation (issue 45 item 5): the prompt pass's states are those of
    record_prompt_states (up to rounding: here the shared prefix runs once), and the prompts it lets through generate from that pass's cache what
    the recorder generates from scratch (tokens equal, every state against the reference
    forward), rows finishing at different steps, one after a single token; the others get None."""
    model = tiny(arch)
    eos, lengths = stopping_eos(model, tok)
    reference = np.stack([p.last_prompt for p in record_prompt_states(model, tok, PROMPTS, batch_size=4)])
    for keep in ([True] * 4, [True, False, False, True], [False, True, True, False], [False] * 4):
        def decide(states, index):  # the rows are the prompts index says: their states are theirs
            assert_close_scaled(states, reference[index])
            return [keep[i] for i in index]

        passes, gens = generate_after_prompt_pass(model, tok, PROMPTS, decide,
                                                  GenerationSettings(max_new_tokens=N, batch_size=4, pool=pool),
                                                  eos_token_ids=eos)
        assert_close_scaled(np.stack([p.last_prompt for p in passes]), reference)
        assert [g is not None for g in gens] == keep
        kept = [i for i in range(len(PROMPTS)) if keep[i]]
        assert [len(gens[i].token_ids) for i in kept] == [lengths[i] for i in kept]
        assert_matches_reference(model, tok, [PROMPTS[i] for i in kept], [gens[i] for i in kept], pool)


def test_generating_after_the_prompt_pass_refuses_a_wrong_number_of_decisions(tok):
    with pytest.raises(ValueError, match="decide returned 1 decisions for a batch of 4 prompts"):
        generate_after_prompt_pass(tiny("llama"), tok, PROMPTS, lambda states, index: [True],
                                   GenerationSettings(max_new_tokens=2))


@pytest.mark.parametrize("generate", [
    lambda model, tok, **kw: generate_and_record(model, tok, PROMPTS, **kw),
    lambda model, tok, **kw: generate_after_prompt_pass(model, tok, PROMPTS, lambda s, i: [True] * len(i),
                                                        GenerationSettings(**kw))])
@pytest.mark.parametrize("stops, message", [("\n", "stop_strings must be a list of strings"),
                                            (["\n", 7], r"stop_strings\[1\] must be a str, got int")])
def test_both_generation_paths_check_their_stop_strings(generate, stops, message, tok):
    with pytest.raises(ValueError, match=message):
        generate(tiny("llama"), tok, max_new_tokens=2, stop_strings=stops)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_last_states_are_at_the_prompts_last_and_the_last_pooled_position(arch, pool, tok):
    # Rows finishing at different steps (one after a single token), with and without the shared
    # prefix, in the recorder's own greedy loop (finished rows leave the batch) and in
    # model.generate (finished rows run on with weight 0): every layer index of both states
    # equals the reference forward's at position P - 1 and at the last pooled position.
    model = tiny(arch)
    eos, lengths = stopping_eos(model, tok)
    assert lengths[0] == 1 and len(set(lengths)) >= 3
    for reuse_prefix in (False, True):
        for drop_finished in (True, False):
            gens = generate_and_record(model, tok, PROMPTS, max_new_tokens=N, batch_size=4,
                                       eos_token_ids=eos, pool=pool, reuse_prefix=reuse_prefix,
                                       drop_finished=drop_finished)
            assert [len(g.token_ids) for g in gens] == lengths
            assert gens[0].last_prompt.shape == gens[0].last_answer.shape == (5, 64)
            assert_matches_reference(model, tok, PROMPTS, gens, pool)


@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_sampled_rows_keep_their_own_last_state(pool, tok):
    # sampling runs model.generate; rows that stop early keep the state of their own last step
    model = tiny("llama")
    torch.manual_seed(5)
    free = generate_and_record(model, tok, PROMPTS, max_new_tokens=N, eos_token_ids=[],
                               do_sample=True)
    eos = [int(free[0].token_ids[1]), int(free[2].token_ids[4])]
    torch.manual_seed(5)
    gens = generate_and_record(model, tok, PROMPTS, max_new_tokens=N, eos_token_ids=eos,
                               do_sample=True, pool=pool)
    assert len({len(g.token_ids) for g in gens}) >= 2
    assert_matches_reference(model, tok, PROMPTS, gens, pool)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_one_token_answer(arch, pool, tok):
    # "decoding": the one pooled state is the prompt's last, so last_answer is last_prompt
    # exactly, generated and teacher forced (also from an empty text with its EOS appended);
    # "generated": last_answer is the answer token's own state, at position P.
    model = tiny(arch)
    eos, _ = stopping_eos(model, tok)
    gen, = generate_and_record(model, tok, PROMPTS[:1], max_new_tokens=N, eos_token_ids=eos,
                               pool=pool)
    assert len(gen.token_ids) == 1 and gen.finish_reason == "eos"
    forced = record_responses(model, tok, PROMPTS[:1] * 2, [gen.token_ids, ""],
                              eos_token_ids=[int(gen.token_ids[0])], pool=pool)
    assert [f.token_ids.tolist() for f in forced] == [gen.token_ids.tolist()] * 2
    records = [gen, *forced]
    assert_matches_reference(model, tok, PROMPTS[:1] * 3, records, pool)
    for g in records:
        if pool == "decoding":
            np.testing.assert_array_equal(g.last_answer, g.last_prompt)
        else:
            assert not np.allclose(g.last_answer, g.last_prompt, atol=1e-2)
