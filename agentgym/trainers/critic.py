r"""The value head of GAE: a separate critic that reads each step's state, V(s_t).

    V(s_t) = w·h_t + b,     h_t = last hidden state at the last *prompt* token of step t
    L_V    = ½ · mean_t max((V_t − R̂_t)², (V_old,t + clip(V_t − V_old,t, ±ε_V) − R̂_t)²)

R̂_t = A_t + V_old(s_t) are GAE's λ-returns (:mod:`agentgym.trainers.advantages.gae`); the
clipped form is PPO's value loss as in TRL and verl (ε_V = ``algorithm.value.clip``, 0.2 as
TRL's default).

Why a separate critic, not a scalar head on the policy: the policy's forward pass and loss
stay untouched (every policy loss, packing and FSDP path works as before), and the value
loss has its own optimizer and learning rate, so no ``value_coef`` has to balance two
losses on shared weights. The cost is a second backbone in memory. The critic is a copy of
the policy's *initial* backbone (no LM head) with a zero-initialized head, the architecture
of SPA's progress estimator (:class:`agentgym.trainers.progress.ProgressModel`), so an
unfitted critic says V = 0 and GAE starts as the discounted return.

The trainer calls :meth:`Critic.annotate` on each step's groups (it writes V(s_t) into
``step.result.info["value"]``, where the estimator reads it), computes advantages and the
targets ``estimator.returns(groups)``, updates the policy, then calls :meth:`Critic.fit`.
Checkpoints save the critic and its optimizer beside the policy (``<run_dir>/critic/``),
and ``--resume`` restores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.trainers.advantages.gae import VALUE_KEY
from agentgym.trainers.batching import TrainingDataError
from agentgym.trainers.config import ValueConfig
from agentgym.trainers.finite import check_fit
from agentgym.trainers.progress import (
    Packed,
    ProgressModel,
    load_checkpoint,
    micro_batches,
    save_checkpoint,
    with_step_values,
)
from agentgym.types import Group, Trajectory

try:
    import torch
except ImportError as exc:  # pragma: no cover - batching raises first
    raise ImportError("the value head needs torch: pip install 'agentgym[train]'") from exc


def state_pack(traj: Trajectory) -> Packed:
    """Token rows of a trajectory with a mark at the last prompt token of every step.

    Consecutive steps whose sequences extend each other share a row (one forward pass), as
    in :func:`agentgym.trainers.progress.pack`; the mark sits before the action, so V(s_t)
    sees the state only.
    """
    rows: list[tuple[int, ...]] = []
    marks: list[tuple[int, int, int]] = []
    for k, step in enumerate(traj.steps):
        if step.tokens is None or not step.tokens.prompt_ids:
            raise TrainingDataError(f"trajectory {traj.id!r} step {k} has no recorded prompt "
                                    "tokens; the value head reads recorded ids (train with a "
                                    "model policy, which stores Step.tokens)")
        seq = step.tokens.prompt_ids + step.tokens.completion_ids
        if rows and len(seq) >= len(rows[-1]) and seq[:len(rows[-1])] == rows[-1]:
            rows[-1] = seq
        else:
            rows.append(seq)
        marks.append((len(rows) - 1, len(step.tokens.prompt_ids) - 1, k))
    return Packed(traj.id, tuple(rows), tuple(marks), len(traj.steps), float("nan"))


class Critic:
    """A value model, its optimizer and its settings (module docstring)."""

    def __init__(self, model: ProgressModel, config: ValueConfig) -> None:
        self.model, self.config = model, config
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                           lr=config.lr, weight_decay=0.0)

    @classmethod
    def from_policy(cls, lm: Any, config: ValueConfig) -> Critic:
        """A critic on a copy of ``lm``'s backbone (the policy itself stays untouched)."""
        return cls(ProgressModel.from_causal_lm(lm, source="policy"), config)

    def predict(self, trajs: Sequence[Trajectory]) -> list[np.ndarray]:
        """V(s_t) per step of each trajectory, ``(T_i,)`` float64, without gradients."""
        return self.model.contributions([state_pack(t) for t in trajs],
                                        self.config.max_tokens_per_micro_batch)

    def annotate(self, groups: Sequence[Group]) -> list[Group]:
        """``groups`` with V(s_t) in every scorable step's ``info["value"]``."""
        scorable = [t for g in groups for t in g.scorable]
        values = dict(zip((t.id for t in scorable), self.predict(scorable), strict=True))
        out = []
        for g in groups:
            trajs = tuple(with_step_values(t, VALUE_KEY, values[t.id]) if t.id in values else t
                          for t in g.trajectories)
            out.append(replace(g, trajectories=trajs))
        return out

    def fit(self, groups: Sequence[Group], targets: Mapping[str, np.ndarray]
            ) -> dict[str, float]:
        """``config.epochs`` passes of the clipped value loss towards ``targets`` (R̂_t).

        Returns:
            ``value/loss`` (mean over the last epoch), ``value/loss_first`` (first epoch)
            and ``value/explained_variance`` of the values the advantages used.
        """
        trajs = [t for g in groups for t in g.scorable if t.id in targets and t.steps]
        if not trajs:
            return {}
        packs = [state_pack(t) for t in trajs]
        old = [torch.tensor([float(s.result.info[VALUE_KEY]) for s in t.steps]) for t in trajs]
        want = [torch.as_tensor(np.asarray(targets[t.id]), dtype=torch.float32) for t in trajs]
        n = sum(len(w) for w in want)
        losses = [self._epoch(packs, old, want, n) for _ in range(self.config.epochs)]
        r, v = torch.cat(want), torch.cat(old).float()
        explained = 1.0 - float((r - v).var() / r.var()) if n > 1 and r.var() > 0 else 0.0
        return {"value/loss": losses[-1], "value/loss_first": losses[0],
                "value/explained_variance": explained}

    def save(self, run_dir: Path, step: int, keep: int = 2) -> Path:
        """Write ``<run_dir>/critic/step-<N>/`` atomically; keep the newest ``keep``."""
        return save_checkpoint(Path(run_dir) / "critic", step, self.model, self.optimizer, keep)

    def load(self, run_dir: Path, step: int) -> None:
        """Restore the value model and its optimizer saved at ``step`` of the run."""
        load_checkpoint(Path(run_dir) / "critic", step, self.model, self.optimizer,
                        "value head; resume a run that trained with GAE advantages")

    def _epoch(self, packs: list[Packed], old: list[torch.Tensor], want: list[torch.Tensor],
               n: int) -> float:
        """One optimizer step over every step (gradient accumulation); the mean loss."""
        model, eps, total = self.model, self.config.clip, 0.0
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        for part in micro_batches(packs, self.config.max_tokens_per_micro_batch):
            pred = torch.cat(model([packs[i] for i in part]))  # (S,)
            v_old = torch.cat([old[i] for i in part]).to(pred.device)
            target = torch.cat([want[i] for i in part]).to(pred.device)
            clipped = v_old + (pred - v_old).clamp(-eps, eps)
            loss = 0.5 * torch.maximum((pred - target) ** 2, (clipped - target) ** 2).sum() / n
            loss.backward()
            total += float(loss.detach())
        norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                              1.0)
        check_fit("the value model (GAE's critic)", total, float(norm),
                  "lower algorithm.value.lr or check the rewards for extreme values")
        self.optimizer.step()
        model.eval()
        return total

