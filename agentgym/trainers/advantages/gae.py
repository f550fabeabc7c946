r"""GAE advantages: dense step rewards against a learned value V(s_t), whitened over the batch.

    δ_t = r_t + γ·V(s_{t+1}) − V(s_t)              V(s_T) = 0 after the last step
    A_t = Σ_{l≥0} (γλ)^l·δ_{t+l} = δ_t + γλ·A_{t+1}
    R̂_t = A_t + V(s_t)                             the value head's target (the λ-return)
    A_t ← (A_t − mean_B A) / (std_B A + ε) − λ_inv·1[¬valid_t]     B = every step of the batch

Paper: Schulman, Moritz, Levine, Jordan, Abbeel 2016, "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", ICLR 2016, arXiv 1506.02438. λ = 1 gives the
return-to-go less V(s_t); λ = 0 the one-step TD error; V ≡ 0 gives the return-to-go with
discount γλ. SPA (arXiv 2505.20732, credit-assignment spec §5) trains its dense progress
rewards this way as its PPO option: ``algorithm.estimator=spa`` with ``advantage=gae``.

Choices, and what we do:

- **Time index = one step** (one policy call), as every agentgym estimator: all completion
  tokens of step t carry A_t. V(s_t) is the value head's output at the last *prompt* token
  of step t (before the action), written into ``step.result.info["value"]`` by the trainer
  (:mod:`agentgym.trainers.critic`) before the estimator runs.
- **Rewards** of the ``gae`` estimator: the env's step rewards (``None`` as 0), with the
  outcome on the last step when the env reports it apart from them (so Σ_t r_t = R_i, the
  outcome score of spec §0). SPA uses its own dense rewards instead.
- **No bootstrap** after the last step, whether the episode ended or was cut off (spec §0).
- **Whitening** over every step of every scorable trajectory of the batch (PPO practice,
  and the released SPA trainer's ``masked_whiten``); ``mode=mean_norm`` only centres.
  Unbiased std (n − 1) plus ε = 1e-6; a batch of fewer than 2 steps gives zeros.
- **Invalid-action penalty** λ_inv (default 0): subtracted from the step's own advantage
  after whitening, never propagated to earlier steps or into R̂_t (spec §0).
- **Group**: no group baseline (the value is the baseline), so a lone rollout gets values
  too; the training loop still drops groups with fewer than 2 scorable rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from agentgym.errors import ConfigError, SchemaError
from agentgym.trainers.advantages.base import (
    EPS,
    Advantages,
    EstimatorOptions,
    outcome_score,
    register_estimator,
)
from agentgym.types import Group, Trajectory


@runtime_checkable
class ValueEstimator(Protocol):
    """An estimator that reads V(s_t) (GAE): the trainer fits a value head to its returns."""

    @property
    def uses_values(self) -> bool:
        """Whether V(s_t) must be written into the steps before calling it."""
        ...

    def returns(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Trajectory id -> ``(T,)`` the value head's targets R̂_t."""
        ...

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """The advantages."""
        ...

VALUE_KEY = "value"
"""``step.result.info`` key holding the value head's V(s_t)."""


def gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lam: float
        ) -> tuple[np.ndarray, np.ndarray]:
    """``(A, R̂)`` of one trajectory: GAE advantages and value targets, both ``(T,)``.

    Example:
        >>> a, r = gae(np.array([0.0, 1.0]), np.array([0.5, 0.5]), gamma=1.0, lam=1.0)
        >>> a.tolist(), r.tolist()
        ([0.5, 0.5], [1.0, 1.0])
    """
    rewards, values = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {rewards.shape} and values {values.shape} must match")
    nxt = np.append(values[1:], 0.0)  # (T,) V(s_{t+1}), 0 after the last step
    delta = rewards + gamma * nxt - values  # (T,)
    adv, acc = np.zeros_like(delta), 0.0
    for t in range(len(delta) - 1, -1, -1):
        acc = delta[t] + gamma * lam * acc
        adv[t] = acc
    return adv, adv + values


def values_of(traj: Trajectory) -> np.ndarray:
    """``(T,)`` V(s_t) from ``info["value"]``; raises SchemaError naming how to get them."""
    out = []
    for s in traj.steps:
        value = s.result.info.get(VALUE_KEY)
        if value is None:
            raise SchemaError(
                f"trajectory {traj.id!r} step {s.index} has no info[{VALUE_KEY!r}]; GAE reads "
                "the value head's V(s_t), which 'agentgym train' writes before the estimator "
                "runs (algorithm.value); outside training use a return-to-go estimator")
        out.append(float(value))
    return np.asarray(out, dtype=np.float64)


def whiten(values: Mapping[str, np.ndarray], mode: str) -> Advantages:
    """Centre (and in ``mean_std_norm`` scale) every step of the batch together."""
    flat = np.concatenate(list(values.values())) if values else np.zeros(0)  # (S,)
    if len(flat) < 2:
        return {i: np.zeros_like(v) for i, v in values.items()}
    dev = flat - flat.mean()
    if mode == "mean_std_norm":
        dev = dev / (flat.std(ddof=1) + EPS)
    parts = np.split(dev, np.cumsum([len(v) for v in values.values()])[:-1])
    return {i: p.astype(np.float64, copy=True) for i, p in zip(values, parts, strict=True)}


def env_rewards(traj: Trajectory) -> np.ndarray:
    """``(T,)`` the env's step rewards, the outcome's remainder added to the last step."""
    r = np.array([s.result.reward or 0.0 for s in traj.steps], dtype=np.float64)
    if len(r):
        r[-1] += outcome_score(traj) - r.sum()  # 0 unless the env reports the outcome apart
    return r


@dataclass(frozen=True)
class GAEOptions(EstimatorOptions):
    """GAE options: γ, ``lam`` (λ of GAE), λ_inv (``invalid_penalty``, default 0), mode."""

    gamma: float = 1.0
    """Discount γ, in [0, 1]."""
    invalid_penalty: float = 0.0
    """λ_inv ≥ 0 taken from an invalid step's own advantage; 0 by default."""
    lam: float = 0.95
    """GAE's λ in [0, 1]: 1 = Monte Carlo return less V, 0 = one-step TD error."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"lam must be in [0, 1], got {self.lam}; PPO's usual is 0.95")


@register_estimator("gae", options=GAEOptions, group_baseline=False, needs=("value_model",))
class GAE:
    """GAE over the env's step rewards (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("gae", gamma=1.0, lam=0.95)
    """

    def __init__(self, options: GAEOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"GAE({self.options})"

    @property
    def uses_values(self) -> bool:
        """Always: GAE needs V(s_t)."""
        return True

    def rewards(self, traj: Trajectory) -> np.ndarray:
        """``(T,)`` the dense rewards GAE runs on."""
        return env_rewards(traj)

    def raw(self, groups: Sequence[Group]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Trajectory id -> (A, R̂) before whitening."""
        return gae_of(groups, self.rewards, self.options.gamma, self.options.lam)

    def returns(self, groups: Sequence[Group]) -> dict[str, np.ndarray]:
        """Trajectory id -> ``(T,)`` R̂_t, the value head's regression targets."""
        return {i: r for i, (_, r) in self.raw(groups).items()}

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Whitened GAE advantages of every scorable trajectory, one per step."""
        return penalized(whiten({i: a for i, (a, _) in self.raw(groups).items()},
                                self.options.mode), groups, self.options.invalid_penalty)


def gae_of(groups: Sequence[Group], rewards_of: Callable[[Trajectory], np.ndarray],
           gamma: float, lam: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(A, R̂) per scorable trajectory, rewards from ``rewards_of(traj)``, V from the steps."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for group in groups:
        for traj in group.scorable:
            if traj.id in out:
                raise SchemaError(f"trajectory ids must be unique across groups; repeated: "
                                  f"{traj.id!r}")
            out[traj.id] = gae(rewards_of(traj), values_of(traj), gamma, lam)
    return out


def penalized(adv: Advantages, groups: Sequence[Group], penalty: float) -> Advantages:
    """``adv`` less λ on each invalid step's own value (no-op at λ = 0)."""
    if penalty == 0:
        return adv
    valid = {t.id: np.fromiter((s.valid for s in t.steps), bool, len(t.steps))
             for g in groups for t in g.scorable}
    return {i: a - penalty * ~valid[i] for i, a in adv.items()}
