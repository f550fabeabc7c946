import pytest
from bfcl_helpers import make, run

from agentgym.envs.bfcl import CATEGORIES, MULTI_TURN, SINGLE_TURN, data, task_ids
from agentgym.errors import ConfigError


def test_categories_cover_the_issue_list():
    assert set(SINGLE_TURN) == {
        "simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
        "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
        "live_irrelevance", "live_relevance"}
    assert set(MULTI_TURN) == {"multi_turn_base", "multi_turn_miss_func",
                               "multi_turn_miss_param", "multi_turn_long_context"}
    assert CATEGORIES["live_relevance"].label == "Live Relevance Detection"


def test_every_category_reads_the_package_files():
    import bfcl_eval.constants.eval_config as cfg

    for name in CATEGORIES:
        with open(cfg.PROMPT_PATH / f"BFCL_v4_{name}.json") as f:
            lines = [line for line in f if line.strip()]
        assert len(task_ids(name)) == len(lines), name


@pytest.mark.parametrize("name", ["multiple", "multi_turn_base"])
def test_splits_are_a_fixed_disjoint_partition(name):
    train, test = set(task_ids(name, "train")), set(task_ids(name, "test"))
    assert train and test and not train & test
    assert train | test == set(task_ids(name))
    assert 0.7 < len(train) / len(task_ids(name)) < 0.9
    assert task_ids(name, "test") == [i for i in task_ids(name) if i in test]  # file order


def test_seed_is_the_index_in_file_order_and_task_id_picks_the_entry():
    env = make("parallel")
    obs, info = run(env.reset(seed=3))
    assert info["task_id"] == "parallel_3"
    obs2, info2 = run(env.reset(options={"task_id": "parallel_7"}))
    assert info2["task_id"] == "parallel_7" and obs2 != obs
    test_env = make("parallel", split="test")
    _, info3 = run(test_env.reset(seed=0))
    assert info3["task_id"] == task_ids("parallel", "test")[0]


def test_unknown_category_and_task_id_say_did_you_mean():
    with pytest.raises(ConfigError, match="did you mean 'parallel_multiple'"):
        make("parallel_multple")
    with pytest.raises(ConfigError, match="multi-turn category: use bfcl/MultiTurn-v0"):
        data.category("multi_turn_base", multi_turn=False)
    with pytest.raises(ConfigError, match="did you mean 'simple_python_12'"):
        run(make("simple_python").reset(options={"task_id": "simple_pyhton_12"}))
    with pytest.raises(ConfigError, match="split must be one of"):
        make("simple_python", split="dev")
    test_only = task_ids("simple_python", "test")[0]
    with pytest.raises(ConfigError, match="not in the 'train' split"):
        run(make("simple_python", split="train").reset(options={"task_id": test_only}))


def test_episodes_get_private_copies_of_the_entry():
    first = data.get_task("multi_turn_base", index=0)
    first.entry["question"].clear()
    assert data.get_task("multi_turn_base", index=0).entry["question"]


def test_without_the_package_make_names_both_install_commands():
    import subprocess
    import sys

    code = (
        "import builtins\n"
        "real = builtins.__import__\n"
        "def fake(name, *a, **k):\n"
        "    if name.startswith('bfcl_eval'):\n"
        "        raise ImportError(name, name='bfcl_eval')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = fake\n"
        "import agentgym\n"
        "from agentgym.errors import MissingExtraError\n"
        "try:\n"
        "    agentgym.make('bfcl/MultiTurn-v0')\n"
        "except MissingExtraError as e:\n"
        "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install 'agentgym[bfcl]'" in out
    assert f"pip install --no-deps bfcl-eval=={data.BFCL_PIN}" in out
