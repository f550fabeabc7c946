"""Registrations declare what an env needs; `agentgym envs` shows it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest

import agentgym
from agentgym.errors import RegistrationError
from agentgym.registry import registry


@pytest.fixture(autouse=True)
def _restore_registries():
    ours, theirs = dict(registry._specs), dict(gymnasium.registry)
    yield
    registry._specs.clear()
    registry._specs.update(ours)
    gymnasium.registry.clear()
    gymnasium.registry.update(theirs)


def test_requires_splits_system_parts_and_extras():
    spec = agentgym.register("reqtest/Shop-v0", "agentgym.envs.sokoban:SokobanEnv",
                             requires=("browser", "extra:web"))
    assert spec.system_requirements == ("browser",) and spec.extras == ("web",)
    assert agentgym.spec("agentgym/WebShop-v0").system_requirements == ("browser",)
    assert agentgym.spec("agentgym/Sokoban-v0").requires == ()


@pytest.mark.parametrize(("requires", "message"), [
    (("dokcer",), "did you mean 'docker'"),
    (("extra:",), "names no pip extra"),
    ("docker", "must be a list of strings"),
])
def test_a_wrong_requirement_is_refused_with_the_fix(requires, message):
    with pytest.raises(RegistrationError, match=message):
        agentgym.register("reqtest/Bad-v0", "agentgym.envs.sokoban:SokobanEnv",
                          requires=requires)


def test_envs_command_shows_the_needs():
    out = subprocess.run([sys.executable, "-m", "agentgym.cli", "envs"], capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "agentgym/WebShop-v0 " in line)
    assert "browser, agentgym[web]" in row
