"""Fitting SPA's progress estimator: exploration phase, rolling buffer, refreshes, checkpoints.

Inside ``agentgym train`` (``algorithm.estimator: spa``), each training step runs
:meth:`ProgressFitter.on_groups` on the step's fresh groups before the advantages:

1. On the first step of a run, the **exploration phase** (``progress.explore_tasks`` groups
   rolled out with the initial policy) fills the buffer and is fitted for
   ``progress.explore_epochs`` passes.
2. The current estimator scores the fresh groups. They have never been fitted on, so
   this is the **held-out** measurement: ``progress/heldout_mse``, ``progress/heldout_corr``
   (Pearson correlation of Σ_t ĉ_t with R) and the mean ĉ on successful and failed
   trajectories (``progress/c_mean_success``, ``progress/c_mean_failure``).
3. The groups join the **rolling buffer** (the newest ``progress.buffer_groups`` groups).
   Every ``progress.refresh_every`` steps the estimator is refitted on the buffer for
   ``progress.epochs`` passes (``progress/loss``: the mean training MSE).
4. The fresh groups are annotated with ĉ_t (rescored when a refresh just happened):
   ``step.result.info["progress"]``, which the ``spa`` estimator turns into step rewards.

Its own checkpoint, ``<run_dir>/progress/step-<N>/`` (estimator folder, optimizer state,
buffer as trajectory JSONL), is written beside every run checkpoint, atomically, and
``--resume`` reloads the one of the run checkpoint's step. Shuffling uses a generator
seeded by (run seed, step), so a resumed run fits on the same order.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.jsonl import read_trajectories, write_trajectories
from agentgym.trainers.advantages.spa import PROGRESS_KEY
from agentgym.trainers.config import ProgressConfig, TrainConfig
from agentgym.trainers.finite import check_fit
from agentgym.trainers.metrics import succeeded
from agentgym.trainers.progress import (
    Packed,
    ProgressModel,
    fit_metrics,
    load_checkpoint,
    micro_batches,
    pack,
    save_checkpoint,
    sum_loss,
    with_step_values,
)
from agentgym.types import Group, Trajectory


def annotate(traj: Trajectory, contributions: np.ndarray) -> Trajectory:
    """``traj`` with ĉ_t written into each step's ``result.info["progress"]``."""
    return with_step_values(traj, PROGRESS_KEY, contributions)


class ProgressFitter:
    """An estimator with its optimizer and buffer; fits on trajectories, annotates groups.

    Example:
        >>> model = ProgressModel.load("smollm2")  # doctest: +SKIP
        >>> fitter = ProgressFitter(model, ProgressConfig())  # doctest: +SKIP
        >>> losses = fitter.fit(trajectories, epochs=3)  # doctest: +SKIP
    """

    def __init__(self, model: ProgressModel, config: ProgressConfig, seed: int = 0) -> None:
        self.model, self.config, self.seed = model, config, seed
        head = list(model.head.parameters())
        backbone = [p for p in model.backbone.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            [{"params": backbone, "lr": config.lr}, {"params": head, "lr": config.head_lr}],
            weight_decay=config.weight_decay)
        self.buffer: deque[Group] = deque(maxlen=max(config.buffer_groups, 1))
        self.explored = False

    # -- fitting --------------------------------------------------------------------------

    def fit(self, trajs: Sequence[Trajectory], epochs: int, rng_key: Sequence[int] = (0,)
            ) -> list[float]:
        """``epochs`` passes of MSE(R − Σĉ) over the scorable ``trajs``; mean loss per pass."""
        packs = [pack(t) for t in trajs if t.scorable and t.steps]
        if not packs:
            return []
        cfg, rng = self.config, np.random.default_rng([self.seed, *rng_key])
        params = [p for p in self.model.parameters() if p.requires_grad]
        losses = []
        self.model.train()
        for _ in range(epochs):
            order = rng.permutation(len(packs))
            total = 0.0
            for start in range(0, len(order), cfg.batch_size):
                batch = [packs[i] for i in order[start:start + cfg.batch_size]]
                total += self._optimizer_step(batch, params) * len(batch)
            losses.append(total / len(packs))
        self.model.eval()
        return losses

    def _optimizer_step(self, batch: list[Packed], params: list[torch.nn.Parameter]) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for part in micro_batches(batch, self.config.max_tokens_per_micro_batch):
            rows = [batch[i] for i in part]
            loss = sum_loss(self.model(rows), [p.target for p in rows]) / len(batch)
            loss.backward()  # accumulate: the sum over parts is the batch mean
            total += float(loss.detach())
        norm = torch.nn.utils.clip_grad_norm_(
            params, self.config.grad_clip if self.config.grad_clip > 0 else float("inf"))
        check_fit("SPA's progress model", total, float(norm),
                  "lower progress.lr or check the rewards for extreme values")
        self.optimizer.step()
        return total

    def score(self, trajs: Sequence[Trajectory]) -> list[np.ndarray]:
        """ĉ per step of each trajectory (error trajectories and empty ones get ``(0,)``)."""
        out: list[np.ndarray] = [np.zeros(0)] * len(trajs)
        live = [i for i, t in enumerate(trajs) if t.scorable and t.steps]
        scored = self.model.contributions([pack(trajs[i]) for i in live],
                                          self.config.max_tokens_per_micro_batch)
        for i, c in zip(live, scored, strict=True):
            out[i] = c
        return out

    # -- inside the training loop ---------------------------------------------------------

    async def on_groups(self, step: int, groups: Sequence[Group], metrics: dict[str, float],
                        explore: Callable[[range], Awaitable[list[Trajectory]]]
                        ) -> list[Group]:
        """Explore (first step), measure, buffer, refresh, annotate (module docstring).

        Args:
            step: The training step (0-based) these groups belong to.
            groups: The step's groups.
            metrics: The step's metrics, updated in place with ``progress/*``.
            explore: Rolls out groups of the given seeds with the current policy (the
                exploration phase, on the first call).
        """
        start = time.perf_counter()
        if not self.explored:
            metrics.update(await self._explore(explore))
        trajs = [t for g in groups for t in g.trajectories]
        scores = self.score(trajs)
        ok = [i for i, t in enumerate(trajs) if t.scorable and t.steps]
        held = fit_metrics([scores[i] for i in ok], [pack(trajs[i]) for i in ok],
                           [succeeded(trajs[i]) for i in ok])
        metrics.update({f"progress/heldout_{k}" if k in ("mse", "corr") else f"progress/{k}": v
                        for k, v in held.items()})
        self.buffer.extend(groups)
        cfg = self.config
        if cfg.refresh_every and (step + 1) % cfg.refresh_every == 0:
            losses = self.fit([t for g in self.buffer for t in g.trajectories], cfg.epochs,
                              rng_key=(step,))
            if losses:
                metrics["progress/loss"] = float(np.mean(losses))
            scores = self.score(trajs)  # annotate with the refreshed estimator
        metrics["progress/buffer_trajectories"] = float(sum(len(g.trajectories)
                                                            for g in self.buffer))
        metrics["progress/fit_s"] = time.perf_counter() - start
        out, k = [], 0
        for g in groups:
            annotated = []
            for t in g.trajectories:
                annotated.append(annotate(t, scores[k]) if t.scorable and t.steps else t)
                k += 1
            out.append(replace(g, trajectories=tuple(annotated)))
        return out

    async def _explore(self, explore: Callable[[range], Awaitable[list[Trajectory]]]
                       ) -> dict[str, float]:
        self.explored = True
        cfg = self.config
        if not cfg.explore_tasks:
            return {}
        seeds = range(cfg.explore_first_seed, cfg.explore_first_seed + cfg.explore_tasks)
        trajs = await explore(seeds)
        self.buffer.extend(Group.from_trajectories(trajs))
        losses = self.fit([t for t in trajs if t.scorable], cfg.explore_epochs, rng_key=(1 << 30,))
        return {"progress/explore_trajectories": float(len(trajs)),
                **({"progress/explore_loss": losses[-1]} if losses else {})}

    # -- checkpoints ----------------------------------------------------------------------

    def save(self, run_dir: Path, step: int, keep: int = 2) -> Path:
        """Write ``<run_dir>/progress/step-<N>/`` atomically; keep the newest ``keep``."""
        def buffer_and_state(folder: Path) -> None:
            write_trajectories(folder / "buffer.jsonl",
                               [t for g in self.buffer for t in g.trajectories])
            (folder / "fitter.json").write_text(json.dumps({"explored": self.explored}))

        return save_checkpoint(Path(run_dir) / "progress", step, self.model, self.optimizer,
                               keep, extra=buffer_and_state)

    def load(self, run_dir: Path, step: int) -> None:
        """Restore the estimator, optimizer and buffer saved at ``step`` of the run."""
        path = load_checkpoint(Path(run_dir) / "progress", step, self.model, self.optimizer,
                               "progress estimator; resume a run that trained with spa")
        self.buffer.clear()
        self.buffer.extend(Group.from_trajectories(list(read_trajectories(path / "buffer.jsonl"))))
        self.explored = bool(json.loads((path / "fitter.json").read_text())["explored"])


def build_fitter(config: TrainConfig, policy_model: Any, resume_from: Path | None
                 ) -> ProgressFitter | None:
    """The run's fitter when the estimator needs a progress model (SPA), else None.

    Call it with the freshly loaded policy (before LoRA wraps it): ``progress.model=policy``
    copies those initial weights. ``resume_from`` is the run checkpoint being resumed.
    """
    from agentgym.trainers.advantages import estimator_info

    if "progress_model" not in estimator_info(config.algorithm.estimator).needs:
        return None
    cfg = config.progress
    if cfg.model == "policy":
        model = ProgressModel.from_causal_lm(policy_model)
    else:
        model = ProgressModel.load(cfg.model, device=config.model.device,
                                   dtype=config.model.dtype)
    fitter = ProgressFitter(model, cfg, seed=config.seed)
    if resume_from is not None:
        step = int(json.loads((Path(resume_from) / "state.json").read_text())["step"])
        fitter.load(Path(config.run_dir), step)
    return fitter
