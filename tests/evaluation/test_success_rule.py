"""One success rule: ``agentgym rollout``'s summary, eval, training metrics and RFT agree.

The rule (:func:`agentgym.evaluation.metrics.succeeded`): the env's ``success`` flag on the
last step when it reports one, else a positive outcome reward. ``rollout`` used to read the
flag alone, so an env that reports only a reward showed 0% success there and more in eval.
"""

from typer.testing import CliRunner

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.cli import app
from agentgym.evaluation.metrics import succeeded, summarize
from agentgym.jsonl import read_trajectories
from agentgym.types import Group, Step, Trajectory


class _RewardOnly(BaseEnv):
    """No ``success`` flag: seed s ends at once with reward s % 2 (odd seeds succeed)."""

    async def _reset(self, seed, options):
        self.seed = seed
        return [Message("user", f"task {seed}")], {}

    def expert_action(self):
        return Message("assistant", "done")

    async def _step(self, action):
        return StepResult((Message("user", "ok"),), float(self.seed % 2), terminated=True)


def test_rollout_counts_successes_as_eval_and_training_do(tmp_path):
    from agentgym.trainers.advantages import get_estimator
    from agentgym.trainers.metrics import rollout_metrics

    agentgym.register("agtest/RewardOnly-v0", _RewardOnly)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["rollout", "agtest/RewardOnly-v0", "--policy", "expert",
                                      "--episodes", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    trajs = list(read_trajectories(out))
    assert [succeeded(t) for t in trajs] == [False, True, False, True]
    assert "50.0%" in result.output  # the summary's success column (was 0.0%)
    assert summarize(trajs)["success_rate"] == 0.5
    assert rollout_metrics(trajs, Group.from_trajectories(trajs))["success_rate"] == 0.5
    rft = get_estimator("rft")
    assert [rft.keep(t) for t in trajs] == [succeeded(t) for t in trajs]


def _traj(info, reward, status="terminated", outcome="same"):
    step = Step(0, Message("assistant", "a"), StepResult((), reward, terminated=True, info=info))
    return Trajectory("t", "task", "g", (), (step,), status,
                      reward if outcome == "same" else outcome)


def test_the_flag_wins_then_the_outcome_then_the_step_rewards():
    assert not succeeded(_traj({"success": False}, 1.0))  # the env's verdict first
    assert succeeded(_traj({"success": True}, 0.0))
    assert succeeded(_traj({}, 0.5)) and not succeeded(_traj({}, 0.0))
    assert succeeded(_traj({}, 1.0, outcome=None))  # not yet filled: the shared rule's sum
    assert not succeeded(_traj({"success": True}, None, status="error", outcome=None))
