"""The help of the commands that run a model names every policy kind and the default limits."""

from __future__ import annotations

from typer.testing import CliRunner

from agentgym.cli import app


def test_rollout_and_eval_help_list_every_policy_kind() -> None:
    for command in ("rollout", "eval"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "240"},
                                    terminal_width=240)
        assert result.exit_code == 0, result.output
        for kind in ("smollm2", "hf:", "vllm:", "openai:"):
            assert kind in result.output, (command, kind)
        assert "no limit for in-process models" in result.output
