"""The sandbox-provider registry: built-in providers, errors, and a plug-in provider used by
the SWE env by name (a new provider is one module)."""

import pytest

from agentgym.envs.swe import SWEEnv
from agentgym.errors import ConfigError
from agentgym.sandboxes.local import LocalSandbox
from agentgym.sandboxes.providers import (
    SandboxRequest,
    docker_config,
    get_provider,
    open_sandbox,
    provider_names,
    register_provider,
)


def test_built_in_providers_declare_their_isolation():
    assert {"local", "docker"} <= set(provider_names())
    assert get_provider("local").isolation == "none"
    assert get_provider("docker").isolation == "container"


def test_unknown_provider_suggests_the_close_name():
    with pytest.raises(ConfigError, match="did you mean 'docker'"):
        get_provider("dokcer")
    with pytest.raises(ConfigError, match="did you mean 'docker'"):
        SWEEnv(split="all", sandbox="dokcer")


async def test_local_serves_copied_files_and_refuses_image_only_requests():
    box = await open_sandbox("local", SandboxRequest("/testbed"))
    try:
        assert isinstance(box, LocalSandbox)
        assert (await box.exec("pwd")).stdout.strip().endswith("/testbed")
    finally:
        await box.aclose()
    with pytest.raises(ConfigError, match="cannot run images"):
        await open_sandbox("local", SandboxRequest("/repo", image="swe:1", files_copied=False))


def test_an_image_holding_the_workdir_keeps_it_visible():
    plain = docker_config(SandboxRequest("/testbed"))
    assert plain.read_only_root and "/testbed" in plain.tmpfs
    own = docker_config(SandboxRequest("/testbed", image="swe:1", files_copied=False))
    assert (own.image, own.read_only_root, own.user) == ("swe:1", False, None)
    assert "/testbed" not in own.tmpfs


async def test_a_plug_in_provider_serves_the_swe_env_by_name():
    opened: list[str] = []

    async def recording(request: SandboxRequest) -> LocalSandbox:
        opened.append(request.workdir)
        return LocalSandbox(workdir=request.workdir)

    register_provider("recording", recording, isolation="none", summary="local, counted")
    async with SWEEnv(split="all", sandbox="recording") as env:
        observation, info = await env.reset(seed=0)
        assert observation and info["task_id"]
    assert opened == [env.tasks[0].workdir]
