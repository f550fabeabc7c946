"""Session fixtures for tests that need a real Docker engine (mark them ``docker``).

- ``docker_engine``: the engine's address. Uses ``$DOCKER_HOST`` / the system socket, or starts
  the private engine under ``~/.cache/agentgym/docker`` (stopped when the last test session
  using it ends). Skips only when no engine is reachable and none can be started here (no
  ``dockerd`` or not root); ``AGENTGYM_REQUIRE_DOCKER=1`` turns that skip into a failure.
- ``docker_client``: a ``docker.DockerClient`` for it.
- ``sandbox_image``: the name of the base image (Python 3 + git + pytest), built once and
  cached in the engine's data root, so later runs reuse it (first build ~1 min).
- ``docker_config``: a ``DockerConfig`` for that engine and image; ``dataclasses.replace``
  it for other limits.
"""

from __future__ import annotations

import os
import time

import pytest


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("AGENTGYM_REQUIRE_DOCKER") == "1":
        pytest.fail(f"AGENTGYM_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine():
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install "
                                         "'agentgym[swe]')")
    from agentgym.sandboxes.engine import EngineError, can_start_engine, engine_lease, find_engine

    if find_engine() is None and (why := can_start_engine()):
        _skip_or_fail(f"no Docker engine is reachable and none can be started: {why}")
    try:
        lease = engine_lease()
        url = lease.__enter__()
    except EngineError as exc:
        _skip_or_fail(str(exc))
    old = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = url  # code under test that looks for an engine finds this one
    try:
        yield url
    finally:
        if old is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = old
        lease.__exit__(None, None, None)


@pytest.fixture(scope="session")
def docker_client(docker_engine):
    from agentgym.sandboxes.engine import client

    c = client(docker_engine)
    yield c
    c.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client):
    import shutil

    from agentgym.sandboxes.image import DEFAULT_IMAGE, ensure_image, image_ready

    if not image_ready(docker_client) and shutil.which("debootstrap") is None:
        _skip_or_fail(f"{DEFAULT_IMAGE} is not built and debootstrap is not installed "
                      "(apt-get install debootstrap)")
    start = time.monotonic()
    ensure_image(docker_client, DEFAULT_IMAGE, log=lambda line: print(f"[sandbox image] {line}"))
    if (spent := time.monotonic() - start) > 5:
        print(f"[sandbox image] built {DEFAULT_IMAGE} in {spent:.0f}s")
    return DEFAULT_IMAGE


@pytest.fixture(scope="session")
def docker_config(docker_engine, sandbox_image):
    from agentgym.sandboxes.docker import DockerConfig

    return DockerConfig(image=sandbox_image, base_url=docker_engine)
