"""Where a training method plugs into the step: small protocols, and the hooks one method gives.

A training step reads top to bottom (``agentgym/trainers/loop.py:train_step``)::

    collect → transforms → estimate → build samples → before-update hooks → update
            → after-update hooks → sync

A method that keeps state or acts around the estimator (G-RA, GAE's critic, SPA's progress
estimator, SUPO's sequences, the off-policy correction with VCPO) is a folder under
``trainers/methods/`` whose ``build`` returns a :class:`Hooks`: the group transforms it adds
before the estimator, the sample builder that replaces the default one, the hooks run just
before and after the policy update, and the state saved beside each checkpoint. The loop
composes every active method's hooks and has no branch of its own for any of them
(docs/architecture.md, "add a method").

This module sits at the bottom of the trainer package: it imports records (and, to build the
default samples, batching), so every method and the loop can import it, and reading a
config that names methods loads no torch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agentgym.errors import ConfigError
from agentgym.types import Group, Trajectory

if TYPE_CHECKING:  # batching imports torch; a config is read (and checked) without it
    from agentgym.trainers.batching import Sample

Explore = Callable[[range], Awaitable[list[Trajectory]]]
"""Rolls out groups of the given task seeds with the current policy, at the training
temperature (SPA's exploration phase)."""

Draw = Callable[[int], Awaitable[list[Trajectory]]]
"""Rolls out that many more groups of fresh training tasks (the run's next seeds, which
the seed stream then moves past) with the current policy, at the training temperature."""


class Updater(Protocol):
    """The policy update a step's samples go to (in this process, or sharded with FSDP)."""

    @property
    def learner(self) -> Any:
        """The trained model and its optimizer (:class:`agentgym.trainers.update.Learner`)."""
        ...

    def proximal(self, samples: list[Sample]) -> list[Sample]:
        """The samples with the log-probs of the current weights (no update)."""
        ...


@dataclass(frozen=True)
class StepContext:
    """What a hook may know about the step it runs in."""

    step: int
    """The training step (0-based) the groups belong to."""
    explore: Explore
    """More rollouts with the current policy, outside the step's own tasks."""
    trajectories: tuple[Trajectory, ...] = ()
    """Every rollout the step collected (error ones included), as collected."""
    version: int = 0
    """The policy version of the weights being trained (weight syncs so far)."""
    updater: Updater | None = None
    """The update the samples go to (read by before-update hooks)."""
    draw: Draw | None = None
    """More groups of fresh training tasks (dynamic sampling's refills)."""


class TaskSampler(Protocol):
    """Picks the task seeds each step trains on (default: the next ones in order)."""

    def tasks(self, step: int, next_seed: int, n: int) -> tuple[list[int], int]:
        """The step's ``n`` task seeds, and the first seed not yet handed out after them.

        Args:
            step: The training step (0-based).
            next_seed: The first seed of the stream not yet handed out.
            n: ``rollout.tasks_per_step``.
        """
        ...


class SequentialTasks:
    """The default task sampler: the next ``n`` seeds of the stream."""

    def tasks(self, step: int, next_seed: int, n: int) -> tuple[list[int], int]:
        """``next_seed … next_seed + n - 1``."""
        return list(range(next_seed, next_seed + n)), next_seed + n


class GroupTransform(Protocol):
    """Rewrites or annotates a step's groups before the estimator reads them."""

    async def transform(self, ctx: StepContext, groups: Sequence[Group],
                        metrics: dict[str, float]) -> list[Group]:
        """The groups the estimator reads.

        Args:
            ctx: The step.
            groups: The step's groups (error trajectories included: they stay unscored).
            metrics: The step's metrics, updated in place with the method's own.
        """
        ...


class SampleBuilder(Protocol):
    """Turns the kept groups and their advantages into training samples."""

    def samples(self, ctx: StepContext, groups: Sequence[Group],
                advantages: Mapping[str, np.ndarray], metrics: dict[str, float]
                ) -> list[Sample]:
        """The step's training samples (token ids, masks, behaviour log-probs, advantages).

        Args:
            ctx: The step.
            groups: The groups kept for the update (enough scorable rollouts; maybe none).
            advantages: The estimator's per-step advantages of every scorable trajectory.
            metrics: The step's metrics, updated in place with the builder's own.
        """
        ...


class BeforeUpdate(Protocol):
    """Reweights the step's samples just before the update (in the update's thread)."""

    def before_update(self, ctx: StepContext, samples: list[Sample], groups: Sequence[Group],
                      lr_scale: float, metrics: dict[str, float]
                      ) -> tuple[list[Sample], float]:
        """The samples to train on and the learning-rate factor of this update.

        Args:
            ctx: The step.
            samples: The samples so far (the builder's, or an earlier hook's).
            groups: The groups trained on.
            lr_scale: The factor so far (1.0 before any hook).
            metrics: The step's metrics, updated in place with the hook's own.
        """
        ...


class UpdateHook(Protocol):
    """Runs after the policy update, on the groups it trained on."""

    def after_update(self, ctx: StepContext, groups: Sequence[Group],
                     metrics: dict[str, float]) -> None:
        """Update the method's own model or statistics (metrics updated in place)."""
        ...


class Stateful(Protocol):
    """State a method keeps across steps: saved beside each run checkpoint, loaded on resume."""

    def save(self, run_dir: Path, step: int) -> object:
        """Write the state of ``step`` under ``run_dir`` (atomically)."""
        ...

    def load(self, run_dir: Path, step: int) -> None:
        """Restore the state saved at ``step``."""
        ...


@dataclass(frozen=True)
class Hooks:
    """What one method adds to the training step; every slot may stay empty."""

    transforms: tuple[GroupTransform, ...] = ()
    """Run in order before the estimator (methods in registry order)."""
    sample_builder: SampleBuilder | None = None
    """Replaces the default one-sample-per-step builder (at most one method may)."""
    before_update: tuple[BeforeUpdate, ...] = ()
    """Run in order just before the policy update (importance corrections, VCPO)."""
    after_update: tuple[UpdateHook, ...] = ()
    """Run in order after the policy update."""
    state: tuple[Stateful, ...] = ()
    """Saved with every checkpoint (after the weights), loaded on resume."""
    task_sampler: TaskSampler | None = None
    """Replaces the default in-order task seeds (at most one method may)."""

    def __add__(self, other: Hooks) -> Hooks:
        """Both methods' hooks, this one's first.

        Raises:
            ConfigError: Both replace the sample builder, or both the task sampler.
        """
        for slot in ("sample_builder", "task_sampler"):
            mine, theirs = getattr(self, slot), getattr(other, slot)
            if mine is not None and theirs is not None:
                raise ConfigError(f"two of the run's methods replace the {slot.replace('_', ' ')}"
                                  f" ({type(mine).__name__}, {type(theirs).__name__}); turn "
                                  "one off")
        return Hooks(self.transforms + other.transforms,
                     self.sample_builder or other.sample_builder,
                     self.before_update + other.before_update,
                     self.after_update + other.after_update, self.state + other.state,
                     self.task_sampler or other.task_sampler)


class StepSamples:
    """The default sample builder: one sample per step (full-history episodes packed).

    Zero-advantage steps stay: the update skips their forward pass, not their tokens.
    """

    def samples(self, ctx: StepContext, groups: Sequence[Group],
                advantages: Mapping[str, np.ndarray], metrics: dict[str, float]
                ) -> list[Sample]:
        """:func:`agentgym.trainers.batching.samples_from_groups` of the kept groups."""
        from agentgym.trainers.batching import samples_from_groups

        return samples_from_groups(groups, advantages) if groups else []
