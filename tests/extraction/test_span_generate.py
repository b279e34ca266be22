"""acute.extraction.span_generate: greedy continuations and span log-probs from one shared-prefix
pass must equal an unpadded forward pass per prompt (independent reference), on every architecture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acute.extraction.span_generate import generate_with_span_scores, supports_span_generation
from acute.extraction.continuations import projects_own_logits
from acute.testing import make_tiny_model, make_tiny_tokenizer

ATOL = 1e-5


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _reference(model, ids, span, max_new_tokens, eos):
    """Greedy decoding by full unpadded forward passes (no cache), and the span's log-probs."""
    seq = list(ids)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([seq])).logits[0].double(), -1)
        span_lp = None
        if span is not None:
            s, e = span
            span_lp = np.array([logp[j - 1, seq[j]].item() for j in range(s, e)])
        out = []
        for _ in range(max_new_tokens):
            token = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            out.append(token)
            seq.append(token)
            if token in eos:
                break
    return out, span_lp


def _rated_prompts(tok):
    """Four rated answers per question (a group), answers of different lengths, one prompt
    without a span, one answer that is the prompt's end, and a group of one."""
    questions = ["What is the capital of France?", "How many legs?", "Who wrote it?"]
    answers = [" Paris", " Lyon is a city", " 8", " x"]
    prompts, spans, groups = [], [], []
    for g, q in enumerate(questions):
        head = _ids(tok, f"Q: {q} A:")
        for a in answers[: 4 - g]:
            body = _ids(tok, a)
            tail = _ids(tok, " Sure?") if a != " x" else []
            prompts.append(head + body + tail)
            spans.append((len(head), len(head) + len(body)))
            groups.append(g)
    prompts.append(_ids(tok, "Water is"))
    spans.append(None)
    groups.append("alone")
    return prompts, spans, groups


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("project", [True, False])
def test_span_generation_equals_unpadded_reference(arch, batch_size, project):
    tok = make_tiny_tokenizer()
    model = make_tiny_model(arch, seed=1, initializer_range=0.3)
    assert projects_own_logits(model)
    model._acute_projects_logits = project  # False: the model's own logits over the span columns
    prompts, spans, groups = _rated_prompts(tok)
    assert supports_span_generation(model, max(len(p) for p in prompts) + 6)
    plain = [_reference(model, p, s, 6, ()) for p, s in zip(prompts, spans)]
    # EOS ids that stop some rows early and leave others running to the length limit
    eos = sorted({plain[0][0][1], plain[5][0][0]})
    got = generate_with_span_scores(model, prompts, spans, groups, max_new_tokens=6,
                                    eos_token_ids=eos, pad_id=tok.pad_token_id, batch_size=batch_size)
    reasons = set()
    for p, s, res in zip(prompts, spans, got):
        ref_tokens, ref_span = _reference(model, p, s, 6, eos)
        assert res.token_ids.tolist() == ref_tokens
        reasons.add(res.finish_reason)
        assert res.finish_reason == ("eos" if ref_tokens[-1] in eos else "length")
        if s is None:
            assert res.span_logprobs is None
        else:
            assert res.span_logprobs.dtype == np.float32 and res.span_logprobs.shape == (s[1] - s[0],)
            np.testing.assert_allclose(res.span_logprobs, ref_span, rtol=0, atol=ATOL)
    assert reasons == {"eos", "length"}


def test_span_generation_rejects_bad_input():
    tok = make_tiny_tokenizer()
    model = make_tiny_model("llama")
    ids = _ids(tok, "Q: a? A: b")
    kwargs = dict(max_new_tokens=2, eos_token_ids=[2], pad_id=2)
    with pytest.raises(ValueError, match=r"spans\[0\]"):
        generate_with_span_scores(model, [ids], [(0, 2)], [0], **kwargs)  # no token before the span
    with pytest.raises(ValueError, match=r"spans\[0\]"):
        generate_with_span_scores(model, [ids], [(2, len(ids) + 1)], [0], **kwargs)
    with pytest.raises(ValueError, match=r"prompts\[0\] is empty"):
        generate_with_span_scores(model, [[]], [None], [0], **kwargs)
    with pytest.raises(ValueError, match="differ in length"):
        generate_with_span_scores(model, [ids], [None, None], [0], **kwargs)


def test_sliding_window_shorter_than_the_rows_is_not_supported():
    model = make_tiny_model("gemma3")  # sliding window 64
    assert supports_span_generation(model, 64) and not supports_span_generation(model, 65)


def test_projection_check_catches_an_output_transform_the_model_does_not_apply():
    model = make_tiny_model("llama", seed=2)
    model.config.final_logit_softcapping = 0.5  # project_states would cap, Llama's forward does not
    assert not projects_own_logits(model)
    assert projects_own_logits(make_tiny_model("gemma3"))
