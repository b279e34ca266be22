"""A model without its weights (``load_model(..., weights=False)``, issue 44): what the trust gate
in front of a vLLM server loads. Its identity, read from the folder's files, must equal the
loaded model's (checked against the loaded model, per architecture, tied and untied output
embeddings, float32 and bfloat16); everything the gate asks of it (context window, end-of-turn
tokens, layer count) too; running it, or hashing it without its files, is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from acute.errors import InputError, ModelLoadError
from acute.extraction.layers import context_window
from acute.models import load_model, model_fingerprint, model_setting, weights_digest
from acute.models.identity import files_weights_digest
from acute.models.loading import holds_no_weights
from acute.models.prompts import eos_token_ids
from acute.store import ModelIdentity
from acute.testing import make_tiny_model, save_tiny_model


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "gpt2"])
@pytest.mark.parametrize("tied", [True, False])
def test_the_identity_read_from_the_files_is_the_loaded_model_s(arch, tied, tmp_path):
    folder = save_tiny_model(tmp_path / "m", arch, tie_word_embeddings=tied)
    for dtype in ("float32", "bfloat16"):
        loaded, tok = load_model(folder, dtype=dtype)
        bare, bare_tok = load_model(folder, dtype=dtype, weights=False)
        assert holds_no_weights(bare) and not holds_no_weights(loaded)
        assert ModelIdentity.from_model(bare) == ModelIdentity.from_model(loaded)
        assert model_setting(bare) == model_setting(loaded)
        assert context_window(bare) == context_window(loaded)
        assert eos_token_ids(bare, bare_tok) == eos_token_ids(loaded, tok)
        assert bare_tok.padding_side == "left" and bare_tok.pad_token_id == tok.pad_token_id
        assert Path(bare.name_or_path) == folder


def test_other_weights_give_another_identity(tmp_path):
    one = save_tiny_model(tmp_path / "one", seed=0)
    two = save_tiny_model(tmp_path / "two", seed=1)
    a, _ = load_model(one, weights=False)
    b, _ = load_model(two, weights=False)
    assert model_fingerprint(a) == model_fingerprint(b)
    assert ModelIdentity.from_model(a).model_weights != ModelIdentity.from_model(b).model_weights


def test_a_folder_missing_a_tensor_or_with_another_shape_is_named(tmp_path):
    folder = save_tiny_model(tmp_path / "m", tie_word_embeddings=False)
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if k != "lm_head.weight"}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"m: its safetensors files hold no weights for 'lm_head.weight'"):
        load_model(folder, weights=False)
    weights["lm_head.weight"] = weights["lm_head.weight"][:10]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"'lm_head.weight' has shape \(10, 64\), the model's"):
        load_model(folder, weights=False)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="has no .safetensors file"):
        load_model(folder, weights=False)


def test_what_a_model_without_weights_refuses(tmp_path):
    folder = save_tiny_model(tmp_path / "m")
    with pytest.raises(InputError, match="leave out device and device_map"):
        load_model(folder, weights=False, device_map="auto")
    with pytest.raises(InputError, match="'owner/name' is none of those"):
        load_model("owner/name", weights=False)
    import torch

    with torch.device("meta"):  # built without weights, and its files never read
        bare = make_tiny_model("llama")
    with pytest.raises(InputError, match="holds no weights"):
        weights_digest(bare)
    assert files_weights_digest(bare, folder)["sha256"] == weights_digest(load_model(folder)[0])["sha256"]
    assert weights_digest(bare)["sha256"] == ModelIdentity.from_model(load_model(folder)[0]).model_weights["sha256"]


@pytest.mark.slow
def test_a_card_without_weights_is_smollm2(smollm2):
    """The converted card folder (tied embeddings, a GGUF's sha256 remembered): the same identity."""
    bare, _ = load_model("smollm2-135m-instruct", weights=False)
    identity = ModelIdentity.from_model(bare)
    assert identity == ModelIdentity.from_model(smollm2[0]) and "gguf_sha256" in identity.model_weights
