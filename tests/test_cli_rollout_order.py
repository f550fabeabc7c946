"""``agentgym rollout`` lists episodes as started, whatever order they finished in."""

import asyncio
import json

from typer.testing import CliRunner

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.cli import app


class _LaterSeedsFinishFirst(BaseEnv):
    """Seed s takes (3 - s) × 50 ms to reset: seed 3 finishes first, seed 0 last."""

    async def _reset(self, seed, options):
        await asyncio.sleep(0.05 * (3 - seed))
        self.seed = seed
        return [Message("user", f"task {seed}")], {}

    def expert_action(self):
        return Message("assistant", "done")

    async def _step(self, action):
        return StepResult((Message("user", "ok"),), float(self.seed), terminated=True)


def test_the_file_lists_episodes_in_the_order_they_started(tmp_path):
    agentgym.register("agtest/LaterFirst-v0", _LaterSeedsFinishFirst)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["rollout", "agtest/LaterFirst-v0", "--policy", "expert",
                                      "--episodes", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["seed"] for line in out.read_text().splitlines()] == [0, 1, 2, 3]
