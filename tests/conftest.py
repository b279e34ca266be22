import pytest

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
