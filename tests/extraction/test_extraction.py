"""Tests for acute.extraction: pooled hidden states recorded inside ``generate`` must equal the same
quantity computed independently from one ``output_hidden_states=True`` forward pass."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from acute.errors import UnsupportedArchitectureError
from acute.extraction import Generation, HiddenStateRecorder, continuation_logprobs, generate_and_record
from acute.extraction.batching import MIN_SHARED_PREFIX
from acute.extraction.layers import find_layers
from acute.testing import make_tiny_model, make_tiny_tokenizer

PROMPTS = [
    "What is the capital of France?",
    "Water is",
    "Question: How many legs does a spider have? Answer:",
    "Mars",
]
ATOL = 1e-5




@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


@pytest.fixture(scope="module")
def llama():
    # A larger init than the default makes greedy decoding emit varied tokens (not one repeated
    # token), so that chosen EOS ids stop the rows at different steps.
    return make_tiny_model("llama", initializer_range=0.3)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def reference_states(model, tok, prompt, token_ids, pool="decoding"):
    """``(means, last_prompt, last_answer, logprobs)`` from one unpadded forward over prompt +
    generation: the mean over the pooled positions, the states at the prompt's last position
    and at the last pooled one (each [L+1, d]), and the tokens' log-probs."""
    p_ids = _ids(tok, prompt)
    full = torch.tensor([p_ids + list(token_ids)])
    with torch.no_grad():
        out = model(full, output_hidden_states=True)
    states = torch.stack(out.hidden_states)[:, 0].double()  # [L+1, S, d]
    P, T = len(p_ids), len(token_ids)
    span = slice(P - 1, P + T - 1) if pool == "decoding" else slice(P, P + T)
    pooled = states[:, span]
    logprobs = torch.log_softmax(out.logits[0, P - 1: P + T - 1].double(), -1)
    lp = logprobs.gather(1, torch.tensor(list(token_ids))[:, None]).squeeze(1).numpy()
    return pooled.mean(1).numpy(), states[:, P - 1].numpy(), pooled[:, -1].numpy(), lp


def reference(model, tok, prompt, token_ids, pool="decoding"):
    """Mean hidden states and token log-probs from one unpadded forward over prompt + generation."""
    means, _, _, lp = reference_states(model, tok, prompt, token_ids, pool)
    return means, lp


def assert_close_scaled(actual, desired, tol=ATOL):
    """|actual - desired| <= tol * max(1, max |desired| of that layer).

    The reference forward runs without the KV cache, so it differs from generate's computation by
    float32 rounding, which is relative to the size of the states (~10 in late layers of the
    large-init test model); states of unit size must agree within ``tol`` absolutely.
    """
    scale = np.maximum(1.0, np.abs(desired).max(axis=-1, keepdims=True))
    err = np.abs(actual - desired) / scale
    assert err.max() <= tol, f"max scaled error {err.max():.3g} > {tol}"


def assert_matches_reference(model, tok, prompts, gens, pool):
    for prompt, gen in zip(prompts, gens):
        means, last_prompt, last_answer, lp = reference_states(model, tok, prompt, gen.token_ids, pool)
        for got, want in ((gen.layer_means, means), (gen.last_prompt, last_prompt),
                          (gen.last_answer, last_answer)):
            assert got.shape == want.shape and got.dtype == np.float32
            assert_close_scaled(got, want)
        # log-softmax of large float32 logits (the test models' large init): error relative too
        np.testing.assert_allclose(gen.token_logprobs, lp, rtol=ATOL, atol=ATOL)
        assert gen.prompt_tokens == len(_ids(tok, prompt))


def first_stop(seq, eos):
    """Length a greedy sequence is cut to by the first EOS id in it (None if none)."""
    for k, t in enumerate(seq):
        if t in eos:
            return k + 1
    return None


# ---------------------------------------------------------------------------------- mapping


@pytest.mark.parametrize("arch,norm_path", [
    ("llama", "model.norm"), ("qwen2", "model.norm"), ("gemma3", "model.norm"),
    ("gpt2", "transformer.ln_f"),
])
def test_find_layers_maps_tiny_architectures(arch, norm_path):
    model = make_tiny_model(arch)
    lm = find_layers(model)
    assert lm.num_layers == 4
    assert lm.embed is model.get_input_embeddings()
    expected_norm = model
    for part in norm_path.split("."):
        expected_norm = getattr(expected_norm, part)
    assert lm.final_norm is expected_norm


def test_unknown_architecture_names_the_class():
    class MysteryNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])

    with pytest.raises(UnsupportedArchitectureError, match="MysteryNet"):
        find_layers(MysteryNet())
    with pytest.raises(ValueError):
        find_layers(MysteryNet())


# ------------------------------------------------------------------------ core correctness


@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_batch_of_one_matches_output_hidden_states(llama, tok, pool):
    gens = generate_and_record(llama, tok, PROMPTS[:1], max_new_tokens=6, batch_size=1,
                               eos_token_ids=[], pool=pool)
    (gen,) = gens
    assert isinstance(gen, Generation)
    assert gen.finish_reason == "length" and len(gen.token_ids) == 6
    assert gen.token_ids.dtype == np.int64 and gen.token_logprobs.dtype == np.float32
    assert_matches_reference(llama, tok, PROMPTS[:1], gens, pool)
    assert gen.raw_confidence == pytest.approx(float(np.exp(gen.token_logprobs.astype(np.float64).sum())))


def _choose_eos(seqs):
    """EOS ids (each emitted by some row) that stop the rows at >= 3 different lengths with at
    least one row running to max_new_tokens."""
    candidates = sorted({t for s in seqs for t in s[1:-1]})
    for size in (1, 2, 3):
        for eos in itertools.combinations(candidates, size):
            stops = [first_stop(s, set(eos)) for s in seqs]
            finite = [x for x in stops if x is not None]
            if None in stops and len(set(finite)) >= 2 and len(set(stops)) >= 3:
                return list(eos), stops
    raise AssertionError(f"no EOS choice gives varied stops for {seqs}")


@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_uneven_batch_with_different_stops_matches_reference(llama, tok, pool):
    n = 10
    free = generate_and_record(llama, tok, PROMPTS, max_new_tokens=n, batch_size=4, eos_token_ids=[])
    seqs = [g.token_ids.tolist() for g in free]
    eos, stops = _choose_eos(seqs)
    gens = generate_and_record(llama, tok, PROMPTS, max_new_tokens=n, batch_size=4,
                               eos_token_ids=eos, pool=pool)
    for gen, seq, stop in zip(gens, seqs, stops):
        expected_len = n if stop is None else stop
        assert gen.token_ids.tolist() == seq[:expected_len]
        assert gen.finish_reason == ("length" if stop is None else "eos")
    assert_matches_reference(llama, tok, PROMPTS, gens, pool)
    # Batched and one-at-a-time recording agree (padding and batch-mates do not leak in).
    single = generate_and_record(llama, tok, PROMPTS, max_new_tokens=n, batch_size=1,
                                 eos_token_ids=eos, pool=pool)
    for a, b in zip(gens, single):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert_close_scaled(a.layer_means, b.layer_means)


def _count_forward_rows(model):
    """A forward pre-hook handle and the list it fills with each forward's batch size."""
    sizes = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        sizes.append(int(ids.shape[0]))

    return model.register_forward_pre_hook(hook, with_kwargs=True), sizes


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
@pytest.mark.parametrize("reuse_prefix", [False, True])
def test_finished_rows_leave_the_batch(arch, pool, reuse_prefix, tok):
    # Rows that stop at different steps (EOS or length): the recorder's greedy loop
    # runs each row for exactly its own forwards, and equals model.generate (drop_finished=False)
    # and the unpadded reference.
    n = 8
    model = make_tiny_model(arch, initializer_range=0.3,
                            **({"sliding_window": 128} if arch == "gemma3" else {}))
    prompts = [SHARED + " Water is", SHARED + " Mars", SHARED + " How many legs?",
               SHARED + " Mars is a"]
    free = generate_and_record(model, tok, prompts, max_new_tokens=n, batch_size=4,
                               eos_token_ids=[])
    seqs = [g.token_ids.tolist() for g in free]
    eos = [seqs[0][2], seqs[1][4]]  # rows 0 and 1 stop early, the others where they emit these
    stops = [first_stop(seq, eos) for seq in seqs]
    handle, sizes = _count_forward_rows(model)
    try:
        gens = generate_and_record(model, tok, prompts, max_new_tokens=n, batch_size=4,
                                   eos_token_ids=eos, pool=pool, reuse_prefix=reuse_prefix)
    finally:
        handle.remove()
    lengths = [len(g.token_ids) for g in gens]
    assert lengths == [n if stop is None else stop for stop in stops]
    extra = 1 if pool == "generated" else 0  # generated pools the state fed by the last token
    prefills = 1 if reuse_prefix else 0  # the shared prefix runs once, batch of one
    assert sum(sizes) == prefills + sum(t + extra for t in lengths)
    assert min(lengths) < max(lengths) and sizes[prefills] == 4
    assert sizes[-1] == lengths.count(max(lengths))  # rows left as they finished
    assert_matches_reference(model, tok, prompts, gens, pool)
    handle, sizes = _count_forward_rows(model)
    try:
        full = generate_and_record(model, tok, prompts, max_new_tokens=n, batch_size=4,
                                   eos_token_ids=eos, pool=pool, reuse_prefix=reuse_prefix,
                                   drop_finished=False)
    finally:
        handle.remove()
    assert set(sizes[prefills:]) == {4}  # model.generate keeps every row to the end
    for a, b in zip(gens, full):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.finish_reason == b.finish_reason
        assert_close_scaled(a.layer_means, b.layer_means)
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, rtol=ATOL, atol=ATOL)


def test_greedy_loop_only_for_plain_greedy(llama, tok, monkeypatch):
    import acute.extraction as ex

    assert ex.decoding.plain_greedy(llama, {"do_sample": False, "pad_token_id": 0, "temperature": None})
    assert not ex.decoding.plain_greedy(llama, {"do_sample": True})
    assert not ex.decoding.plain_greedy(llama, {"min_new_tokens": 3})
    assert not ex.decoding.plain_greedy(llama, {"temperature": 0.7})
    plain = generate_and_record(llama, tok, PROMPTS, max_new_tokens=6, batch_size=4,
                                eos_token_ids=[])
    # a generation_config that changes greedy decoding (a suppressed token; or e.g. a shipped
    # repetition penalty) sends the batch through model.generate, which applies it
    first = int(plain[0].token_ids[0])
    monkeypatch.setattr(llama.generation_config, "suppress_tokens", [first])
    assert not ex.decoding.plain_greedy(llama, {"do_sample": False})
    handle, sizes = _count_forward_rows(llama)
    try:
        gens = generate_and_record(llama, tok, PROMPTS, max_new_tokens=6, batch_size=4,
                                   eos_token_ids=[])
    finally:
        handle.remove()
    assert set(sizes) == {4}  # model.generate ran every row to the end
    assert first not in [int(t) for g in gens for t in g.token_ids]
    assert_matches_reference(llama, tok, PROMPTS, gens, "decoding")


def test_pool_modes_differ_by_one_position(llama, tok):
    """decoding pools positions P-1..P+T-2, generated P..P+T-1: sums differ by exactly two states."""
    dec, = generate_and_record(llama, tok, PROMPTS[1:2], max_new_tokens=5, eos_token_ids=[])
    gen, = generate_and_record(llama, tok, PROMPTS[1:2], max_new_tokens=5, eos_token_ids=[],
                               pool="generated")
    assert dec.token_ids.tolist() == gen.token_ids.tolist()
    p_ids = _ids(tok, PROMPTS[1])
    with torch.no_grad():
        hs = torch.stack(llama(torch.tensor([p_ids + dec.token_ids.tolist()]),
                               output_hidden_states=True).hidden_states)[:, 0].numpy()
    P, T = len(p_ids), 5
    assert_close_scaled((gen.layer_means - dec.layer_means) * T, hs[:, P + T - 1] - hs[:, P - 1],
                        tol=T * ATOL)


@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_other_architectures_match_reference(arch, pool, tok):
    model = make_tiny_model(arch)
    prompts = [PROMPTS[0], PROMPTS[3]]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=4, batch_size=2,
                               eos_token_ids=[], pool=pool)
    assert all(len(g.token_ids) == 4 for g in gens)
    assert_matches_reference(model, tok, prompts, gens, pool)


SHARED = "Answer briefly. Question: What is the capital of France? Answer: Paris.\nQuestion:"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_shared_prefix_is_cached_once_and_matches_reference(arch, pool, tok, monkeypatch):
    # Few-shot prompts share a long prefix: it runs once (one prefill), every batch continues
    # from a copy of its cache, and the recorded states equal the unpadded reference and the
    # plain path. One prompt is the prefix plus a single token, one is the prefix of another.
    import acute.extraction as ex

    # (tiny gemma3's sliding window of 64 would turn the cache off: see the next test)
    model = make_tiny_model(arch, **({"sliding_window": 128} if arch == "gemma3" else {}))
    prompts = [SHARED + " Water is", SHARED + " How many legs does a spider have? Answer:",
               SHARED + " Mars", SHARED + " Mars is a"]
    shared = ex.batching.shared_prefix([_ids(tok, p) for p in prompts])
    assert len(shared) >= ex.batching.MIN_SHARED_PREFIX
    calls = []
    real = ex.batching.prefill
    monkeypatch.setattr(ex.generate, "prefill", lambda m, prefix: calls.append(len(prefix)) or real(m, prefix))
    gens = generate_and_record(model, tok, prompts, max_new_tokens=5, batch_size=4,
                               eos_token_ids=[], pool=pool)
    assert calls == [len(shared)]
    assert_matches_reference(model, tok, prompts, gens, pool)
    plain = generate_and_record(model, tok, prompts, max_new_tokens=5, batch_size=3,
                                eos_token_ids=[], pool=pool, reuse_prefix=False)
    assert calls == [len(shared)]  # the plain path builds no cache
    # batches of one reuse the same prefill
    single = generate_and_record(model, tok, prompts[:3], max_new_tokens=5, batch_size=1,
                                 eos_token_ids=[], pool=pool)
    assert calls == [len(shared)] * 2
    assert_matches_reference(model, tok, prompts[:3], single, pool)
    for a, b in zip(gens, plain):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert_close_scaled(a.layer_means, b.layer_means)


def test_prefix_batches_group_prompts_by_their_shared_prefix():
    import acute.extraction as ex

    head, subj_a, subj_b = list(range(100, 110)), [1] * 40, [2] * 40
    encoded = [head + subj_a + [7, 7], head + subj_b + [8], head + subj_a + [9, 9, 9],
               head + [5, 6], head + subj_a + [3], head + subj_b + [4, 4], head + [6, 5, 4]]
    planned = ex.batching.prefix_batches(encoded, list(range(7)), batch_size=2)
    # subject a (3 prompts, longest first), subject b (2), then the two loners together
    assert [b for b, _ in planned] == [[2, 0], [4], [5, 1], [6, 3]]
    assert [len(p) for _, p in planned] == [50, 50, 50, 10]
    assert planned[0][1] == head + subj_a and planned[2][1] == head + subj_b
    assert ex.batching.prefix_batches(encoded, [], batch_size=2) == []


def test_shared_prefix_leaves_each_prompt_an_own_token_and_respects_windows(tok, monkeypatch):
    import acute.extraction as ex

    assert ex.batching.shared_prefix([[1, 2, 3], [1, 2, 3, 4], [1, 2, 5]]) == [1, 2]
    assert ex.batching.shared_prefix([[1, 2, 3], [1, 2, 3]]) == [1, 2]
    assert ex.batching.shared_prefix([[7], [7, 8]]) == []
    assert ex.batching.shared_prefix([[1, 2], [3, 4]]) == []
    assert ex.batching.shared_prefix([]) == []
    # tiny gemma3 has a sliding window of 64 positions: a longer prompt is generated the plain way
    model = make_tiny_model("gemma3")
    long_prompts = [SHARED * 3 + " Water is", SHARED * 3 + " Mars"]
    assert len(_ids(tok, long_prompts[0])) + 4 > 64
    calls = []
    monkeypatch.setattr(ex.generate, "prefill", lambda m, prefix: calls.append(prefix))
    gens = generate_and_record(model, tok, long_prompts, max_new_tokens=4, batch_size=2,
                               eos_token_ids=[])
    assert calls == [] and all(len(g.token_ids) == 4 for g in gens)


def test_stop_strings_cut_text_and_stop_the_row(llama, tok):
    n = 10
    free = generate_and_record(llama, tok, PROMPTS, max_new_tokens=n, eos_token_ids=[])
    seq = free[0].token_ids.tolist()
    texts = [tok.decode(seq[:k], skip_special_tokens=True) for k in range(n + 1)]
    # the text added by row 0's 4th token, chosen so it does not already occur earlier
    k = next(k for k in range(3, n) if texts[k + 1][len(texts[k]):].strip()
             and texts[k + 1][len(texts[k]):] not in texts[k])
    stop = texts[k + 1][len(texts[k]):]
    gens = generate_and_record(llama, tok, PROMPTS, max_new_tokens=n, eos_token_ids=[],
                               stop_strings=[stop])
    for g, f in zip(gens, free):
        fseq = f.token_ids.tolist()
        cut = next((j + 1 for j in range(n)
                    if stop in tok.decode(fseq[: j + 1], skip_special_tokens=True)), None)
        if cut is None:
            assert g.finish_reason == "length" and g.token_ids.tolist() == fseq
        else:
            assert g.finish_reason == "stop" and g.token_ids.tolist() == fseq[:cut]
            full = tok.decode(fseq[:cut], skip_special_tokens=True)
            assert g.text == full[: full.find(stop)]
    assert gens[0].finish_reason == "stop" and len(gens[0].token_ids) == k + 1
    assert_matches_reference(llama, tok, PROMPTS, gens, "decoding")


def test_min_new_tokens_still_suppresses_eos(llama, tok):
    free, = generate_and_record(llama, tok, PROMPTS[:1], max_new_tokens=8, eos_token_ids=[])
    eos = [free.token_ids[1].item()]
    stopped, = generate_and_record(llama, tok, PROMPTS[:1], max_new_tokens=8, eos_token_ids=eos)
    assert len(stopped.token_ids) <= 2 and stopped.finish_reason == "eos"
    forced, = generate_and_record(llama, tok, PROMPTS[:1], max_new_tokens=8, eos_token_ids=eos,
                                  min_new_tokens=5)
    assert len(forced.token_ids) >= 5
    assert not set(forced.token_ids[:5].tolist()) & set(eos)
    assert_matches_reference(llama, tok, PROMPTS[:1], [forced], "decoding")


def test_sampling_records_the_sampled_tokens(llama, tok):
    torch.manual_seed(3)
    gens = generate_and_record(llama, tok, PROMPTS, max_new_tokens=6, eos_token_ids=[],
                               do_sample=True, temperature=2.0)
    # logprobs are under the raw (temperature-free) distribution of the model
    assert_matches_reference(llama, tok, PROMPTS, gens, "decoding")


def test_results_in_input_order_and_defaults(tok):
    model = make_tiny_model("llama")
    gens = generate_and_record(model, tok, PROMPTS, max_new_tokens=3, batch_size=3)
    for prompt, gen in zip(PROMPTS, gens):
        alone, = generate_and_record(model, tok, [prompt], max_new_tokens=3)
        assert gen.token_ids.tolist() == alone.token_ids.tolist()
        assert gen.prompt_tokens == len(_ids(tok, prompt))
        assert gen.text == tok.decode(gen.token_ids.tolist(), skip_special_tokens=True)


def test_prompt_too_long_skip_or_error(tok):
    model = make_tiny_model("llama", max_position_embeddings=32)
    long_prompt = " ".join(["Paris"] * 40)
    assert len(_ids(tok, long_prompt)) > 32
    with pytest.warns(UserWarning, match=r"prompts\[1\]"):
        gens = generate_and_record(model, tok, [PROMPTS[1], long_prompt], max_new_tokens=3)
    assert gens[1] is None and isinstance(gens[0], Generation)
    with pytest.raises(ValueError, match=r"prompts\[1\].*context window"):
        generate_and_record(model, tok, [PROMPTS[1], long_prompt], max_new_tokens=3,
                            on_too_long="error")


def test_bad_arguments(llama, tok):
    with pytest.raises(ValueError, match="pool"):
        generate_and_record(llama, tok, PROMPTS[:1], pool="mean")
    with pytest.raises(ValueError, match=r"prompts\[0\]"):
        generate_and_record(llama, tok, [""])
    with pytest.raises(ValueError, match="prompts"):
        generate_and_record(llama, tok, "a single string")
    with pytest.raises(ValueError, match="num_beams"):
        generate_and_record(llama, tok, PROMPTS[:1], num_beams=2)


# ------------------------------------------------------------------------------ hook hygiene


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_after_exception(tok):
    model = make_tiny_model("llama")
    before = _hook_count(model)
    with pytest.raises(KeyError):
        with HiddenStateRecorder(model) as rec:
            assert rec.active and _hook_count(model) > before
            raise KeyError("boom")
    assert _hook_count(model) == before and not rec.active

    class Explode:
        def __call__(self, input_ids, scores):
            raise RuntimeError("processor failed")

    from transformers import LogitsProcessorList

    with pytest.raises(RuntimeError, match="processor failed"):
        generate_and_record(model, tok, PROMPTS[:2], max_new_tokens=3,
                            logits_processor=LogitsProcessorList([Explode()]))
    assert _hook_count(model) == before
    # the model still works normally and the hooks are inert outside generate
    with HiddenStateRecorder(model):
        model(torch.tensor([[5, 6, 7]]))
    assert _hook_count(model) == before


def test_recorder_state_does_not_grow_with_generated_tokens(tok):
    model = make_tiny_model("llama", initializer_range=0.3)
    sizes: list[int] = []

    class Probe:
        def __call__(self, input_ids, scores):
            sizes.append(rec.state_nbytes())
            return scores

    from transformers import LogitsProcessorList

    ids = torch.tensor([_ids(tok, PROMPTS[0])] * 2)
    with HiddenStateRecorder(model) as rec:
        batch = rec.generate(ids, max_new_tokens=12, logits_processor=LogitsProcessorList([Probe()]),
                             pad_token_id=0)
    assert len(sizes) == 12 and len(set(sizes[1:])) == 1
    assert batch.layer_means.shape == (2, 5, 64) and batch.counts.tolist() == [12, 12]


# ------------------------------------------------------------------------ continuation_logprobs


def test_continuation_logprobs_matches_unpadded_forward(llama, tok):
    # "The capital of France is Pa" + "ris": tokenized jointly the boundary would merge, but the
    # scored span must be exactly the continuation's own tokens.
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[2], "The capital of France is Pa"]
    conts = [" Paris", " is a planet of the solar system.", " 8", "ris"]
    assert _ids(tok, prompts[3] + conts[3]) != _ids(tok, prompts[3]) + _ids(tok, conts[3])
    scored = continuation_logprobs(llama, tok, prompts, conts, batch_size=3)
    for p, c, got in zip(prompts, conts, scored):
        p_ids, c_ids = _ids(tok, p), _ids(tok, c)
        with torch.no_grad():
            logits = llama(torch.tensor([p_ids + c_ids])).logits[0].double()
        lp = torch.log_softmax(logits, -1)[len(p_ids) - 1: len(p_ids) + len(c_ids) - 1]
        ref = lp.gather(1, torch.tensor(c_ids)[:, None]).squeeze(1).numpy()
        assert got.shape == (len(c_ids),) and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=0, atol=ATOL)


def _unpadded_logprobs(model, tok, prompt, cont):
    p_ids, c_ids = _ids(tok, prompt), _ids(tok, cont)
    with torch.no_grad():
        logits = model(torch.tensor([p_ids + c_ids])).logits[0].double()
    lp = torch.log_softmax(logits, -1)[len(p_ids) - 1: len(p_ids) + len(c_ids) - 1]
    return lp.gather(1, torch.tensor(c_ids)[:, None]).squeeze(1).numpy()


def test_length_blocks_weigh_padding_against_a_pass():
    from acute.extraction.batching import length_blocks

    # [10, 1, 1] with 5 per pass: one block 5 + 30 = 35; [10] [1, 1]: 15 + 7 = 22 (best);
    # [10] [1] [1]: 27; [10, 1] [1]: 31. With 20 per pass one block (50) beats [10] [1, 1] (52).
    assert length_blocks([10, 1, 1], overhead=5) == [[0], [1, 2]]
    assert length_blocks([10, 1, 1], overhead=20) == [[0, 1, 2]]
    assert length_blocks([4, 4, 4], overhead=0) == [[0, 1, 2]]  # no padding: one block
    assert length_blocks([]) == []
    with pytest.raises(ValueError, match="sorted"):
        length_blocks([1, 3])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
@pytest.mark.parametrize("batch_size", [1, 2, 5])
@pytest.mark.parametrize("overhead", [None, 0])
def test_continuation_logprobs_shared_prompts_reuse_the_prefix_cache(arch, batch_size, overhead, tok, monkeypatch):
    # Several answers per prompt (the protocol's provenances), prompts of different lengths,
    # one-token and long continuations mixed: the cached path equals one unpadded forward pass
    # per pair, and the plain path. overhead=0: every continuation length its own block.
    import acute.extraction.continuations as tf

    if overhead is not None:
        real = tf.length_blocks
        monkeypatch.setattr(tf, "length_blocks", lambda widths: real(widths, overhead=overhead))
    model = make_tiny_model(arch, seed=3)
    prompts, conts = [], []
    for p, answers in ((PROMPTS[0], [" Paris", " Lyon is nice", "ris", " a"]),
                       (PROMPTS[3], [" is a planet of the solar system.", " 8"]),
                       (PROMPTS[1], [" no"]),
                       (PROMPTS[2], [" one two three", " x"])):
        prompts += [p] * len(answers)
        conts += answers
    order = [5, 0, 8, 2, 7, 1, 3, 6, 4]  # interleaved, not grouped
    prompts, conts = [prompts[i] for i in order], [conts[i] for i in order]
    cached = continuation_logprobs(model, tok, prompts, conts, batch_size=batch_size)
    plain = continuation_logprobs(model, tok, prompts, conts, batch_size=batch_size, reuse_prefix=False)
    for p, c, got, ref_plain in zip(prompts, conts, cached, plain):
        ref = _unpadded_logprobs(model, tok, p, c)
        assert got.shape == ref.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=0, atol=ATOL)
        np.testing.assert_allclose(got, ref_plain, rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_continuation_logprobs_prompts_sharing_demonstrations_reuse_their_prefix(arch, tok):
    # Few-shot prompts: one long shared prefix, then each question; several answers each. The
    # shared-prefix path (prefix run once, padding between it and each prompt's own tokens)
    # equals one unpadded forward pass per pair.
    model = make_tiny_model(arch, seed=4)
    demos = "Q: Sky? A: blue. Q: Grass? A: green. "
    prompts, conts = [], []
    for q, answers in (("Sun?", [" yellow", " hot star"]), ("Snow at night?", [" white"]),
                       ("Sea?", [" blue", " wet", " deep"])):
        prompts += [demos + "Q: " + q + " A:"] * len(answers)
        conts += answers
    assert len(_ids(tok, demos)) >= MIN_SHARED_PREFIX
    for batch_size, project in ((1, True), (2, True), (2, False)):
        model._acute_projects_logits = project  # False: the model's own logits everywhere
        got = continuation_logprobs(model, tok, prompts, conts, batch_size=batch_size)
        for p, c, lp in zip(prompts, conts, got):
            np.testing.assert_allclose(lp, _unpadded_logprobs(model, tok, p, c), rtol=0, atol=ATOL)


def test_token_continuation_logprobs_take_the_ids_continuation_logprobs_would_use(llama, tok):
    from acute.extraction import token_continuation_logprobs

    prompts, conts = [PROMPTS[0], PROMPTS[3]], [" Paris", " is a planet"]
    by_text = continuation_logprobs(llama, tok, prompts, conts, batch_size=2)
    by_ids = token_continuation_logprobs(llama, [_ids(tok, p) for p in prompts], [_ids(tok, c) for c in conts],
                                       pad_id=tok.pad_token_id, batch_size=2)
    for a, b in zip(by_text, by_ids):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"prompts \(2\) and continuations \(1\)"):
        token_continuation_logprobs(llama, [[1], [2]], [[3]], pad_id=0)
    with pytest.raises(ValueError, match=r"continuations\[0\] is empty"):
        token_continuation_logprobs(llama, [[1]], [[]], pad_id=0)


def test_continuation_logprobs_rejects_empty_continuation(llama, tok):
    with pytest.raises(ValueError, match=r"continuations\[1\]"):
        continuation_logprobs(llama, tok, PROMPTS[:2], [" Paris", ""])
    with pytest.raises(ValueError, match="differ in length"):
        continuation_logprobs(llama, tok, PROMPTS[:2], [" Paris"])


# -------------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_smollm2_matches_output_hidden_states(smollm2):
    model, tokenizer = smollm2
    from acute.models import format_prompt

    questions = ["What is the capital of France?", "How many legs does a spider have?",
                 "Name a planet of the solar system that has rings."]
    prompts = [format_prompt(tokenizer, q) for q in questions]
    for pool in ("decoding", "generated"):
        gens = generate_and_record(model, tokenizer, prompts, max_new_tokens=12, batch_size=3,
                                   pool=pool)
        for prompt, gen in zip(prompts, gens):
            *states, lp = reference_states(model, tokenizer, prompt, gen.token_ids, pool)
            for got, want in zip((gen.layer_means, gen.last_prompt, gen.last_answer), states):
                scale = np.abs(want).max(axis=1, keepdims=True)
                np.testing.assert_allclose(got / scale, want / scale, atol=1e-5)
            np.testing.assert_allclose(gen.token_logprobs, lp, atol=1e-4)
