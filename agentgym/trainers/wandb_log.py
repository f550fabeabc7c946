"""Weights & Biases logging of a training run (``logging.wandb: true``).

The same scalars that go to ``metrics.jsonl`` and TensorBoard go to a W&B run (at the
training step as W&B's step), with the resolved config as the run's config, plus a table
of sample trajectories each step (``trajectories``: task, status, reward, turns and the whole
conversation as text). The W&B files live in ``<run_dir>/wandb/``.

``logging.wandb_mode: offline`` (or ``WANDB_MODE=offline``) needs no account: the run is
written to disk only, and ``wandb sync <run_dir>/wandb/offline-run-*`` uploads it later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import MissingExtraError
from agentgym.evaluation.metrics import succeeded
from agentgym.trainers.config import TrainConfig, to_dict
from agentgym.types import Message, Trajectory

COLUMNS = ["step", "task_id", "group_id", "status", "reward", "success", "turns",
           "conversation"]


def _text(message: Message) -> str:
    calls = "".join(f"\n  call {c.name}({c.arguments})" for c in message.tool_calls)
    return f"[{message.role}] {message.content or ''}{calls}"


def conversation(traj: Trajectory) -> str:
    """The episode as plain text: the prompt, then each action and what the env answered."""
    lines = [_text(m) for m in traj.prompt]
    for step in traj.steps:
        lines.append(_text(step.action))
        lines.extend(_text(m) for m in step.result.observation)
    if traj.error:
        lines.append(f"[error] {traj.error}")
    return "\n".join(lines)


class WandbSink:
    """One W&B run that receives a training run's metrics and sample trajectories.

    Args:
        run_dir: The training run folder (W&B writes under ``run_dir/wandb``).
        config: The resolved config, as a plain dict (the W&B run's config).
        project: The W&B project.
        name: The W&B run name (default: the run folder's name).
        mode: ``online``, ``offline`` or None (``WANDB_MODE``, else W&B's default).
        samples: Trajectories per step in the ``trajectories`` table (0 = none).
    """

    def __init__(self, run_dir: Path, config: Mapping[str, Any], *, project: str,
                 name: str | None = None, mode: str | None = None, samples: int = 4) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise MissingExtraError("wandb", "wandb", "logging.wandb") from exc
        self._wandb, self.samples = wandb, samples
        kwargs: dict[str, Any] = {"mode": mode} if mode else {}
        self.run = wandb.init(project=project, name=name or Path(run_dir).resolve().name,
                              dir=str(run_dir), config=dict(config), reinit="create_new",
                              **kwargs)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """The step's scalars."""
        self.run.log(dict(metrics), step=step)

    def trajectories(self, step: int, trajs: Sequence[Trajectory]) -> None:
        """The first ``samples`` trajectories of the step, as the ``trajectories`` table."""
        if self.samples <= 0 or not trajs:
            return
        rows = [[step, t.task_id, t.group_id, t.status, t.outcome_reward,
                 succeeded(t) if t.scorable else None, len(t.steps), conversation(t)]
                for t in trajs[:self.samples]]
        table = self._wandb.Table(columns=COLUMNS, data=rows)
        self.run.log({"trajectories": table}, step=step, commit=False)  # the scalars commit it

    def close(self) -> None:
        """Finish the W&B run (flushes its files)."""
        self.run.finish()


def from_config(config: TrainConfig) -> WandbSink | None:
    """The W&B sink a training config asks for (``logging.wandb``), or None."""
    log = config.logging
    if not log.wandb:
        return None
    return WandbSink(Path(config.run_dir), to_dict(config), project=log.wandb_project,
                     name=log.wandb_run_name, mode=log.wandb_mode,
                     samples=log.sample_trajectories)
