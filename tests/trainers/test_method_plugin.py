"""A new training method is one folder plus a registration: the example plug-in trains,
checkpoints its state and resumes without touching the trainer."""

import importlib.util
import sys
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.trainers import methods
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.config import TrainConfig, from_dict

PLUGIN = Path(__file__).parent / "plugins" / "length_penalty" / "__init__.py"


def _load_plugin():
    """Import the plug-in folder as a user's package would (importing registers it)."""
    spec = importlib.util.spec_from_file_location(
        "length_penalty_plugin", PLUGIN, submodule_search_locations=[str(PLUGIN.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


plugin = _load_plugin()


def test_registered_with_its_metadata():
    assert {"gra", "gae", "spa", "supo", "length_penalty"} <= set(methods.method_names())
    info = {m.name: m for m in methods.methods()}["length_penalty"]
    assert info.options is plugin.LengthPenaltyOptions and info.order == 100
    orders = [m.name for m in methods.methods()]  # transforms run in registry order
    assert orders.index("gra") < orders.index("gae") < orders.index("spa") \
        < orders.index("length_penalty")


def test_the_config_turns_it_on_and_checks_its_options():
    cfg = from_dict(TrainConfig, {"methods": {"length_penalty": {"coef": 0.2}}})
    hooks = methods.build_hooks(cfg, None, get_estimator("grpo"))
    [hook] = hooks.transforms
    assert isinstance(hook, plugin.LengthPenalty) and hook.options.coef == 0.2
    assert hooks.after_update == (hook,) and hooks.state == (hook,)
    # nothing is on by default: the built-ins read their own sections, plug-ins need naming
    assert methods.build_hooks(TrainConfig(), None, get_estimator("grpo")) == methods.Hooks()
    with pytest.raises(ConfigError, match="did you mean 'length_penalty'"):
        from_dict(TrainConfig, {"methods": {"length_penalti": {}}})
    with pytest.raises(ConfigError, match="no option 'cof'.*did you mean 'coef'"):
        from_dict(TrainConfig, {"methods": {"length_penalty": {"cof": 1}}})
    with pytest.raises(ConfigError, match="coef must be a finite number >= 0"):
        from_dict(TrainConfig, {"methods": {"length_penalty": {"coef": -1}}})
    with pytest.raises(ConfigError, match="own section"):
        from_dict(TrainConfig, {"methods": {"gra": {}}})


def test_trains_checkpoints_its_state_and_resumes(tmp_path, tiny_model_dir):
    from agentgym.trainers.loop import train
    from agentgym.trainers.metrics import read_metrics

    data = {
        "run_dir": str(tmp_path / "run"), "steps": 1, "save_every": 1, "tensorboard": False,
        "resumable_checkpoints": True, "env": {"id": "agentgym/Sokoban-v0", "max_turns": 2},
        "model": {"path": str(tiny_model_dir)},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_tokens": 6},
        "algorithm": {"drop_zero_variance_groups": False}, "optim": {"lr": 1e-3},
        "methods": {"length_penalty": {"coef": 0.1}}}
    run = train(from_dict(TrainConfig, data))
    [first] = read_metrics(run)
    assert first["length_penalty/mean"] > 0 and first["length_penalty/trained_rollouts"] == 4
    assert (run / "length_penalty" / "step-1.json").exists()
    train(from_dict(TrainConfig, {**data, "steps": 2}), resume=True)
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["length_penalty/trained_rollouts"] == 8  # counted on from the saved 4
