"""The env registry: register/make/spec, id rules, suggestions, wrappers, plugins."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium
import pytest

import agentgym
from agentgym import (
    BaseEnv,
    EnvArgumentError,
    EnvSpec,
    MaxTurns,
    Message,
    MissingExtraError,
    ObservationCap,
    RegistrationError,
    StepResult,
    UnknownEnvError,
)
from agentgym.errors import did_you_mean
from agentgym.registry import DEFAULT_MAX_OBSERVATION_CHARS, _Registry, registry


class CounterEnv(BaseEnv):
    """Counts steps; never terminates by itself."""

    def __init__(self, size: int = 3, label: str = "x") -> None:
        super().__init__()
        self.size = size
        self.label = label

    async def _reset(self, seed: int | None, options: Mapping[str, Any]) -> tuple[list, dict]:
        return [Message("user", f"{self.label}:{self.size}:" + "a" * 50)], {"task_id": "count"}

    async def _step(self, action: Message) -> StepResult:
        return StepResult((Message("user", "b" * 50),), reward=1.0)


def counter_factory(**kwargs: Any) -> CounterEnv:
    return CounterEnv(**kwargs)


@pytest.fixture(autouse=True)
def clean_registries() -> Iterator[None]:
    """Undo every registration a test makes, in agentgym's and Gymnasium's registries."""
    ours = dict(registry._specs)
    theirs = dict(gymnasium.registry)
    yield
    registry._specs.clear()
    registry._specs.update(ours)
    gymnasium.registry.clear()
    gymnasium.registry.update(theirs)


def test_register_spec_make() -> None:
    n = len(registry)
    spec = agentgym.register("agtest/Counter-v0", CounterEnv, description="counts", size=5)
    assert isinstance(spec, EnvSpec)
    assert (spec.id, spec.namespace, spec.name, spec.version) == (
        "agtest/Counter-v0", "agtest", "Counter", 0)
    assert spec.kwargs == {"size": 5} and spec.description == "counts"
    assert spec.max_turns is None
    assert spec.max_observation_chars == DEFAULT_MAX_OBSERVATION_CHARS
    assert agentgym.spec("agtest/Counter-v0") is spec
    assert registry["agtest/Counter-v0"] is spec
    assert "agtest/Counter-v0" in registry
    assert len(registry) == n + 1
    assert list(registry) == sorted(registry)
    env = agentgym.make("agtest/Counter-v0", label="y")
    assert isinstance(env, ObservationCap)
    assert env.max_chars == DEFAULT_MAX_OBSERVATION_CHARS
    inner = env.unwrapped
    assert isinstance(inner, CounterEnv)
    assert (inner.size, inner.label) == (5, "y")
    assert env.spec is spec and inner.spec is spec
    assert agentgym.make("agtest/Counter-v0", size=9).unwrapped.size == 9


def test_register_string_entry_point() -> None:
    agentgym.register("agtest/Str-v1", f"{__name__}:CounterEnv", label="s")
    env = agentgym.make("agtest/Str-v1", max_observation_chars=None)
    assert type(env) is CounterEnv and env.label == "s"


def test_ids_without_namespace() -> None:
    spec = agentgym.register("AgtestPlain-v2", CounterEnv)
    assert (spec.namespace, spec.name, spec.version) == (None, "AgtestPlain", 2)
    assert "AgtestPlain-v2" in gymnasium.registry


@pytest.mark.parametrize("bad", ["Counter", "agtest/Counter", "agtest/Counter-v", "Counter-vX",
                                 "agtest/Counter-v0.1", "a/b/Counter-v0", "my.proj/Counter-v0",
                                 "", "agtest/Counter v0", 7])
def test_bad_ids(bad: Any) -> None:
    with pytest.raises(RegistrationError) as info:
        agentgym.register(bad, CounterEnv)
    assert "namespace/Name-vN" in str(info.value)
    assert repr(bad) in str(info.value)
    assert bad not in registry._specs


def test_rejected_id_is_in_neither_registry() -> None:
    """An id Gymnasium would reject must not land half-registered in agentgym."""
    with pytest.raises(RegistrationError):
        agentgym.register("my.proj/Counter-v0", CounterEnv)
    assert "my.proj/Counter-v0" not in registry
    assert "my.proj/Counter-v0" not in gymnasium.registry


def test_bad_entry_point() -> None:
    with pytest.raises(RegistrationError, match="must be a callable or 'module:attr'"):
        agentgym.register("agtest/Bad-v0", "just_a_module")


def test_unloadable_entry_point_fails_at_make() -> None:
    agentgym.register("agtest/Missing-v0", "agtest_no_such_module:Env")
    with pytest.raises(RegistrationError, match="cannot load entry point"):
        agentgym.make("agtest/Missing-v0")


class TestUnknown:
    def test_builtin_typo_suggests(self) -> None:
        assert "agentgym/Sokoban-v0" in registry
        with pytest.raises(UnknownEnvError) as info:
            agentgym.make("agentgym/Sokobn-v0")
        assert "did you mean 'agentgym/Sokoban-v0'" in str(info.value)

    def test_typo_suggests(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv)
        with pytest.raises(UnknownEnvError) as info:
            agentgym.spec("agtest/Countr-v0")
        msg = str(info.value)
        assert msg.startswith("no env registered with id 'agtest/Countr-v0'")
        assert "did you mean 'agtest/Counter-v0'" in msg

    def test_other_version_lists_versions(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv)
        agentgym.register("agtest/Counter-v1", CounterEnv)
        with pytest.raises(UnknownEnvError) as info:
            agentgym.make("agtest/Counter-v7")
        assert "registered versions: ['agtest/Counter-v0', 'agtest/Counter-v1']" in str(
            info.value)

    def test_nothing_close(self) -> None:
        with pytest.raises(UnknownEnvError, match="run `agentgym envs`"):
            agentgym.make("zzzz/Qqqqqqqqqqqqq-v0")

    def test_malformed_unknown_id_still_suggests(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv)
        with pytest.raises(UnknownEnvError, match="did you mean 'agtest/Counter-v0'"):
            agentgym.make("agtest/Counter")

    def test_is_key_error_with_plain_message(self) -> None:
        err = UnknownEnvError("no env")
        assert isinstance(err, KeyError) and str(err) == "no env"
        assert registry.get("zzzz/Nope-v0") is None
        assert "zzzz/Nope-v0" not in registry


def test_did_you_mean_and_missing_extra() -> None:
    assert did_you_mean("agtest/Countr-v0", ["agtest/Counter-v0", "zzz"]) == (
        "; did you mean 'agtest/Counter-v0'?")
    assert did_you_mean("COUNTER-V0", ["Counter-v0"]) == "; did you mean 'Counter-v0'?"
    assert did_you_mean("qqqqqq", ["Counter-v0"]) == ""
    err = MissingExtraError("torch", "train", "training")
    assert isinstance(err, ImportError)
    assert str(err) == ("training needs the 'torch' package, which is not installed; install "
                        "it with: pip install 'agentgym[train]'")


class TestKwargs:
    def test_unknown_kwarg_names_accepted(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv)
        with pytest.raises(EnvArgumentError) as info:
            agentgym.make("agtest/Counter-v0", sise=3)
        msg = str(info.value)
        assert "agtest/Counter-v0 got unexpected keyword argument(s) ['sise']" in msg
        assert "['label', 'max_observation_chars', 'max_turns', 'size']" in msg
        assert "did you mean 'size'" in msg
        assert isinstance(info.value, TypeError)

    def test_var_kwargs_entry_point_accepts_anything_it_passes_on(self) -> None:
        agentgym.register("agtest/Factory-v0", counter_factory, size=4)
        env = agentgym.make("agtest/Factory-v0", label="f")
        assert (env.unwrapped.size, env.unwrapped.label) == (4, "f")
        with pytest.raises(TypeError):  # the env itself rejects it
            agentgym.make("agtest/Factory-v0", nope=1)


class TestWrappingFromSpec:
    async def test_max_turns_and_cap_applied(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv, max_turns=3, max_observation_chars=10)
        env = agentgym.make("agtest/Counter-v0")
        assert isinstance(env, MaxTurns) and env.max_turns == 3
        assert isinstance(env.env, ObservationCap) and env.env.max_chars == 10
        obs, info = await env.reset(seed=0)
        assert obs[0].content.startswith("x:3:aaa") and "truncated" in obs[0].content
        assert len(obs[0].content.split("\n")[0]) == 10
        results = [await env.step(Message("assistant", "go")) for _ in range(3)]
        assert [r.truncated for r in results] == [False, False, True]
        assert results[-1].info["truncated_by"] == "max_turns"
        assert results[0].observation[0].content.startswith("b" * 10 + "\n…[truncated 40")

    def test_overrides_from_make(self) -> None:
        agentgym.register("agtest/Counter-v0", CounterEnv, max_turns=3, max_observation_chars=10)
        assert agentgym.make("agtest/Counter-v0", max_turns=7).max_turns == 7
        bare = agentgym.make("agtest/Counter-v0", max_turns=None, max_observation_chars=None)
        assert type(bare) is CounterEnv


def test_registered_ids_are_in_gymnasium() -> None:
    agentgym.register("agtest/Counter-v0", CounterEnv)
    gym_spec = gymnasium.registry["agtest/Counter-v0"]
    assert gym_spec.entry_point == "agentgym.gym_bridge:make_gymnasium"
    assert gym_spec.kwargs == {"env_id": "agtest/Counter-v0"}
    missing = [env_id for env_id in registry if env_id not in gymnasium.registry]
    assert missing == []


# -- third-party plugins through the `agentgym.envs` entry-point group ---------------------
PLUGIN_MODULE = textwrap.dedent('''
    import agentgym
    from agentgym import BaseEnv, Message, StepResult

    class PluginEnv(BaseEnv):
        async def _reset(self, seed, options):
            return [Message("user", "plugin")], {}

        async def _step(self, action):
            return StepResult((Message("user", "done"),), reward=1.0, terminated=True)

    def register_envs():
        agentgym.register("dummyplugin/Plugin-v0", PluginEnv, description="from a plugin")
''')
MODULE_STYLE_PLUGIN = textwrap.dedent('''
    import agentgym
    from dummy_agentgym_plugin_mod import PluginEnv

    agentgym.register("dummyplugin/ModuleStyle-v0", PluginEnv)
''')


def _install_dist(root: Path, dist: str, entry_points: str) -> None:
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[agentgym.envs]\n{entry_points}\n")


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "dummy_agentgym_plugin_mod.py").write_text(PLUGIN_MODULE)
    (tmp_path / "dummy_agentgym_plugin_mod2.py").write_text(MODULE_STYLE_PLUGIN)
    _install_dist(tmp_path, "dummy_agentgym_plugin",
                  "dummy = dummy_agentgym_plugin_mod:register_envs\n"
                  "dummy_module = dummy_agentgym_plugin_mod2")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, "_loaded", False)  # restored afterwards
    yield tmp_path
    for name in ("dummy_agentgym_plugin_mod", "dummy_agentgym_plugin_mod2",
                 "broken_agentgym_plugin_mod"):
        sys.modules.pop(name, None)


async def test_plugin_envs_are_registered(plugin_dir: Path) -> None:
    assert "dummyplugin/Plugin-v0" not in registry._specs
    assert "dummyplugin/Plugin-v0" in registry  # the first read loads the plugins
    assert "dummyplugin/ModuleStyle-v0" in registry
    assert registry._loaded
    assert registry["dummyplugin/Plugin-v0"].description == "from a plugin"
    assert "dummyplugin/Plugin-v0" in gymnasium.registry
    env = agentgym.make("dummyplugin/Plugin-v0")
    obs, _ = await env.reset(seed=0)
    assert obs == [Message("user", "plugin")]
    assert (await env.step(Message("assistant", "x"))).reward == 1.0


def test_plugins_load_once(plugin_dir: Path) -> None:
    registry._ensure_loaded()
    del registry._specs["dummyplugin/Plugin-v0"]
    registry._ensure_loaded()
    assert "dummyplugin/Plugin-v0" not in registry


def test_fresh_registry_instance_loads_plugins(plugin_dir: Path) -> None:
    fresh = _Registry()
    assert not fresh._loaded
    fresh._ensure_loaded()  # plugins register through agentgym.register, i.e. the global one
    assert fresh._loaded
    assert "dummyplugin/Plugin-v0" in registry._specs


def test_broken_plugin_warns_and_hides_nothing(plugin_dir: Path) -> None:
    (plugin_dir / "broken_agentgym_plugin_mod.py").write_text(
        "def register_envs():\n    raise RuntimeError('boom in plugin')\n")
    _install_dist(plugin_dir, "broken_agentgym_plugin",
                  "broken = broken_agentgym_plugin_mod:register_envs\n"
                  "missing = agtest_module_that_does_not_exist")
    importlib.invalidate_caches()
    with pytest.warns(RuntimeWarning) as record:
        registry._ensure_loaded()
    messages = [str(w.message) for w in record if issubclass(w.category, RuntimeWarning)]
    assert any("'broken'" in m and "boom in plugin" in m for m in messages)
    assert any("'missing'" in m and "agtest_module_that_does_not_exist" in m for m in messages)
    assert all("its envs are not registered" in m for m in messages)
    assert "dummyplugin/Plugin-v0" in registry
    assert "dummyplugin/ModuleStyle-v0" in registry
    assert "agentgym/Sokoban-v0" in registry


def test_alias_ids_configure_a_registered_env() -> None:
    agentgym.register("agtest/Counter-v0", CounterEnv, size=5)
    alias = agentgym.register("agtest/Counter9-v0", CounterEnv, alias_of="agtest/Counter-v0",
                              size=9)
    assert alias.alias_of == "agtest/Counter-v0" and agentgym.spec("agtest/Counter-v0").alias_of \
        is None
    assert agentgym.make("agtest/Counter9-v0").unwrapped.size == 9
    with pytest.raises(RegistrationError, match="is not registered"):
        agentgym.register("agtest/Orphan-v0", CounterEnv, alias_of="agtest/Nothing-v0")
    with pytest.raises(RegistrationError, match="has another entry point"):
        agentgym.register("agtest/Other-v0", counter_factory, alias_of="agtest/Counter-v0")
    assert "agtest/Orphan-v0" not in registry and "agtest/Other-v0" not in registry
