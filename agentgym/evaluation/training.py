"""Suite evaluation inside a training run (``eval.suite`` in the training config).

The trainer calls :func:`evaluate_suite` before the first step, every ``eval_every`` steps
and after the last, with the agent it trains (its live policy and context): greedy decoding,
one rollout per task, at most ``eval.tasks`` tasks per entry. Episodes go to
``<run_dir>/eval/step-<N>/results.jsonl`` (browse them with ``agentgym view``); the metrics
come back flat for ``metrics.jsonl``:
``eval/<suite>/success_rate`` and ``eval/<suite>/<entry>/success_rate`` (and mean reward,
invalid-action and error rates), which ``agentgym eval --train-run`` plots as a curve.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgym.evaluation.metrics import summarize_by_entry
from agentgym.evaluation.runner import run_suite
from agentgym.evaluation.suites import get_suite
from agentgym.files import atomic_write
from agentgym.rollout import Agent

LOGGED = ("success_rate", "mean_reward", "invalid_action_rate", "error_rate")


async def evaluate_suite(config: Any, agent: Agent, step: int) -> dict[str, float]:
    """Run the configured suite with ``agent``; flat ``eval/...`` metrics.

    Args:
        config: The ``TrainConfig`` (reads ``eval``, ``rollout`` and ``run_dir``).
        agent: The agent the trainer evaluates with (its live policy, greedy, the run's own
            context: ``agentgym.trainers.collect.make_agent``).
        step: The training step, naming the output folder.
    """
    section, rollout = config.eval, config.rollout
    # One rollout per task: greedy decoding would only repeat the same episode.
    suite = get_suite(section.suite).with_overrides(tasks=section.tasks, rollouts=1)
    out_dir = Path(config.run_dir) / "eval" / f"step-{step}"
    if (out_dir / "results.jsonl").exists():  # a resumed run re-evaluates this step afresh
        (out_dir / "results.jsonl").unlink()
    trajs = await run_suite(suite, agent, out_dir,
                            concurrency=rollout.concurrency, step_timeout=rollout.step_timeout)
    metrics = summarize_by_entry(trajs, [e.name for e in suite.entries])
    atomic_write(out_dir / "metrics.json", json.dumps(
        {"suite": suite.to_dict(), "step": step, "metrics": metrics}, indent=2))
    out: dict[str, float] = {}
    for name, m in metrics.items():
        prefix = f"eval/{suite.name}" if name == "overall" else f"eval/{suite.name}/{name}"
        for key in LOGGED:
            if m.get(key) is not None:
                out[f"{prefix}/{key}"] = float(m[key])
    return out
