from pathlib import Path

import pytest
import yaml

import agentgym
from agentgym.errors import ConfigError, UnknownEnvError
from agentgym.evaluation import suites
from agentgym.evaluation.suites import (
    builtin_dir,
    get_suite,
    load_suite_file,
    parse_suite,
    register_suite,
    suite_names,
)

BUILTIN = sorted(p.name for p in builtin_dir().glob("*.yaml"))


@pytest.fixture
def clean_registry():
    before = dict(suites._REGISTERED)
    yield
    suites._REGISTERED.clear()
    suites._REGISTERED.update(before)


@pytest.mark.parametrize("filename", BUILTIN)
def test_every_suite_file_loads_and_names_registered_envs(filename):
    suite = load_suite_file(builtin_dir() / filename)
    assert suite.name == filename.removesuffix(".yaml"), "name the file after the suite"
    resolved = suite.resolve()
    assert resolved.entries
    for entry in resolved.entries:
        assert entry.env in agentgym.registry
        assert entry.seeds and entry.rollouts >= 1


def test_all_local_includes_every_local_family_suite_and_no_other():
    all_local = get_suite("all-local")
    local = []
    for name in suite_names():
        raw = get_suite(name, resolve=False)
        if raw.includes or raw.requires:
            continue
        local.append(name)
    assert {"arithmetic", "sokoban"} <= set(local)
    expected = {e.name for name in local for e in get_suite(name).entries}
    assert {e.name for e in all_local.entries} == expected
    assert all_local.requires == ()
    assert {"agentgym/Arithmetic-v0", "agentgym/MentalMath-v0", "agentgym/Sokoban-v0"} <= {
        e.env for e in all_local.entries}


def test_arithmetic_suite_fields():
    suite = get_suite("arithmetic")
    assert suite.tag == "arithmetic@1"
    arith = suite.entries[0]
    assert (arith.env, arith.split, arith.seeds[:2], arith.rollouts) == (
        "agentgym/Arithmetic-v0", "test", (0, 1), 1)
    assert arith.make_kwargs() == {"split": "test"}
    assert arith.suite == "arithmetic@1"


def test_unknown_suite_suggests_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'all-local'"):
        get_suite("all-locl")


def test_unknown_env_in_a_suite_suggests_the_closest(clean_registry):
    register_suite({"name": "typo", "entries": [{"env": "agentgym/Sokobn-v0", "tasks": 2}]})
    with pytest.raises(UnknownEnvError, match="did you mean 'agentgym/Sokoban-v0'"):
        get_suite("typo")


def test_glob_skips_a_broken_family_suite_with_a_warning(clean_registry):
    register_suite({"name": "broken-family", "entries": [{"env": "nope/Missing-v0", "tasks": 1}]})
    register_suite({"name": "needs-docker", "requires": ["docker"],
                    "entries": [{"env": "agentgym/Sokoban-v0", "tasks": 1, "name": "dock"}]})
    with pytest.warns(RuntimeWarning, match="skipped the suite 'broken-family'"):
        suite = get_suite("all-local")
    names = {e.name for e in suite.entries}
    assert "dock" not in names and "sokoban" in names


def test_register_from_code_and_includes_by_name(clean_registry):
    tiny = register_suite(suites.Suite("tiny", 3, (suites.SuiteEntry(
        "agentgym/MentalMath-v0", "mm", (5, 9), 2, "test"),)))
    assert get_suite("tiny") == tiny.resolve()
    combo = register_suite({"name": "combo", "version": 2, "includes": ["tiny", "sokoban"]})
    resolved = get_suite(combo.name)
    assert [e.name for e in resolved.entries] == ["mm", "sokoban"]
    assert resolved.entries[0].suite == "tiny@3"
    with pytest.raises(ConfigError, match="includes unknown suite 'sokobn'.*did you mean"):
        register_suite({"name": "bad", "includes": ["sokobn"]}).resolve()


def test_suite_from_a_yaml_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "version": 1, "entries": [
        {"env": "agentgym/Sokoban-v0", "seeds": [3, 1, 4], "kwargs": {"size": 5}}]}))
    suite = get_suite(str(path))
    assert suite.entries[0].seeds == (3, 1, 4)
    assert suite.entries[0].kwargs == {"size": 5}


@pytest.mark.parametrize("data,message", [
    ({"name": "x", "entries": [{"env": "agentgym/Sokoban-v0", "taks": 3}]},
     "unknown key 'taks'; did you mean 'tasks'"),
    ({"name": "x", "entries": [{"env": "agentgym/Sokoban-v0"}]}, "`tasks` must be a positive"),
    ({"name": "x", "entries": [{"env": "agentgym/Sokoban-v0", "tasks": 2, "rollouts": 0}]},
     "`rollouts` must be"),
    ({"name": "x", "version": "1", "entries": []}, "`version` must be a positive integer"),
    ({"name": "x", "requires": ["dockr"], "entries": [{"env": "a/B-v0", "tasks": 1}]},
     "did you mean 'docker'"),
    ({"name": "x"}, "needs `entries`"),
    ({"name": "x", "entries": [{"env": "agentgym/Sokoban-v0", "seeds": [1], "tasks": 2}]},
     "tasks=2 but 1 seeds"),
])
def test_bad_suite_fields_name_the_fix(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_suite(data, "test")


def test_split_on_an_env_without_splits_is_rejected():
    suite = parse_suite({"name": "x", "entries": [
        {"env": "agentgym/Sokoban-v0", "tasks": 1, "split": "test"}]}, "test")
    with pytest.raises(ConfigError, match="takes no `split`"):
        suite.resolve()
    bad_kw = parse_suite({"name": "x", "entries": [
        {"env": "agentgym/Sokoban-v0", "tasks": 1, "kwargs": {"sise": 5}}]}, "test")
    with pytest.raises(ConfigError, match="did you mean 'size'"):
        bad_kw.resolve()


def test_duplicate_labels_in_a_composite_are_rejected(clean_registry):
    register_suite({"name": "again", "entries": [{"env": "agentgym/Sokoban-v0", "tasks": 1,
                                                  "name": "sokoban"}]})
    register_suite({"name": "dup", "includes": ["again", "sokoban"]})
    with pytest.raises(ConfigError, match="label 'sokoban' appears in both"):
        get_suite("dup")


def test_overrides_cap_tasks_and_raise_rollouts():
    suite = get_suite("sokoban").with_overrides(tasks=3, min_rollouts=4)
    assert len(suite.entries[0].seeds) == 3 and suite.entries[0].rollouts == 4
    assert get_suite("sokoban").with_overrides(rollouts=1).entries[0].rollouts == 1


def test_max_turns_override_never_lengthens_episodes():
    suite = get_suite("all-local").with_overrides(max_turns=4)
    turns = {e.name: e.max_turns for e in suite.entries}
    assert turns["sokoban"] == 4 and turns["mental-math"] == 2  # MentalMath's own limit is 2


@pytest.mark.parametrize("filename,prefix,suffix", [("bfcl_nonlive.yaml", "Non-Live", ""),
                                                    ("bfcl_live_ast.yaml", "Live", "AST")])
def test_bfcl_subset_suites_are_the_single_turn_suites_entries(filename, prefix, suffix):
    subset = load_suite_file(Path(__file__).parents[2] / "benchmarks" / filename).resolve()
    full = get_suite("bfcl-single-turn").resolve()
    wanted = [e for e in full.entries if e.name.startswith(prefix) and e.name.endswith(suffix)]
    key = [(e.env, e.name, e.seeds, e.rollouts, e.kwargs) for e in subset.entries]
    assert key == [(e.env, e.name, e.seeds, e.rollouts, e.kwargs) for e in wanted]
