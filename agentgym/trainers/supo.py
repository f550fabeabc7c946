"""SUPO: training on rollouts that summarize their own context (Lu et al. 2025, arXiv 2510.06727).

A rollout with I summaries made I+1 working contexts (rollout side: ``summarize`` in
:mod:`agentgym.context`). Each becomes one training sequence, and every policy token in it
(actions and the summary that closes it) carries the rollout's advantage:

    A_i = (R_i − mean_{j∈G} R_j) / (std_{j∈G} R_j + ε)      over the G *rollouts* of a task
    J   = Σ_i Σ_{k=1}^{I_i+1} Σ_{t ∈ policy tokens of sequence k} min(ρ_t A_i, clip(ρ_t) A_i)

The statistics are over rollouts: the estimator runs on trajectories (one per rollout id)
before any split, so a rollout that summarized more does not weigh more. Overlong masking
(default on): a rollout stopped by H, S or the context limit without a final answer gets no
gradient but still counts in its group's statistics.

Choices and deviations:

- The estimator is any registered one; its per-step output goes to each turn's tokens. For
  trajectory-level estimators (GRPO, RLOO, with or without G-RA rewards) that is A_i on every
  turn, minus the invalid-action penalty λ on an invalid turn's own tokens (spec §0; a summary
  that calls a tool is invalid). Step-level estimators (GiGPO, HGPO, SALT, SPA) are refused
  unless ``step_level="per_step"``: each turn then keeps its own step advantage inside the
  packed sequence, and summary turns, which have no env state (``state_key=None``), get
  whatever the estimator gives a keyless step (docs/supo.md).
- A sequence is the last turn's recorded ``prompt_ids + completion_ids``; the earlier turns of
  the working context appear in it verbatim (the context continues sampled ids exactly), so
  their tokens are trained in place. A turn that does not (the template re-rendered the
  history) becomes its own extra sequence rather than being lost.
- The turn dropped before a summary (its text left the context; the env kept its effects) is
  in no sequence and is not trained, as in the paper's I+1 sequences.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from agentgym.errors import ConfigError
from agentgym.parsing import parse_tool_calls
from agentgym.types import Group, Step, Trajectory

if TYPE_CHECKING:
    from agentgym.trainers.batching import Sample

@dataclass(frozen=True)
class SUPOOptions:
    """How summarized rollouts are trained (used when ``rollout.context`` is ``summarize``)."""

    overlong_mask: bool = True
    """Rollouts cut off without an answer (H, S, the context limit, the env's turn limit,
    the engine's step cap) get no gradient (still in the stats)."""
    mask_rescored: bool = False
    """With G-RA/D-RA rewards (``algorithm.reward_accumulation``), whether overlong masking
    still applies. False (default): a rescored rollout that never submitted is trained, so
    the no-submit penalty, the signal the gate is there to give, reaches the policy; True
    masks it as without rewards."""
    step_level: Literal["error", "per_step"] = "error"
    """With a step-level estimator: ``error`` refuses the run; ``per_step`` gives each turn
    of a packed sequence its own step advantage (docs/supo.md)."""


def check_estimator(name: str, options: SUPOOptions) -> None:
    """Refuse a step-level estimator unless ``step_level="per_step"`` says it is meant.

    Raises:
        ConfigError: ``name`` is not trajectory-level and ``options.step_level`` is ``error``.
    """
    from agentgym.trainers.advantages import estimator_info, estimator_names

    if estimator_info(name).level == "trajectory" or options.step_level == "per_step":
        return
    shared = [n for n in estimator_names() if estimator_info(n).level == "trajectory"]
    raise ConfigError(
        f"estimator {name!r} gives step-level advantages, but SUPO (rollout.context=summarize) "
        f"shares one rollout advantage across its sequences; use one of {shared}, or set "
        "algorithm.supo.step_level=per_step to give each turn its own step advantage inside "
        "the packed sequences (see docs/supo.md)")


def is_overlong(traj: Trajectory) -> bool:
    """Whether the rollout was cut off without a final answer.

    Every truncated ending counts: H, S, the context limit, the env's own turn limit
    (``truncated`` from ``env.step``) and the rollout engine's step cap
    (``RolloutConfig.max_steps``); none of them reached an answer the outcome could score.
    """
    return traj.status == "truncated"


def is_rescored(traj: Trajectory) -> bool:
    """Whether ``trainers.rewards.rescore_groups`` wrote this rollout's rewards (G-RA/D-RA)."""
    return any(k.startswith("reward/gate_") for k in traj.metrics)


def working_contexts(traj: Trajectory) -> list[list[Step]]:
    """The rollout's steps split into working contexts; each but the last ends with a summary."""
    parts: list[list[Step]] = [[]]
    for step in traj.steps:
        parts[-1].append(step)
        if step.summary:
            parts.append([])
    return [p for p in parts if p]


def _pack(traj: Trajectory, part: list[Step], adv: Mapping[int, float]) -> list[Sample]:
    """One sequence for a working context (plus one per turn that is not in it verbatim)."""
    from agentgym.trainers.batching import Sample, TrainingDataError

    missing = [s.index for s in part if s.tokens is None]
    if missing:
        raise TrainingDataError(
            f"{traj.id!r} steps {missing} have no recorded tokens; SUPO trains on recorded "
            "tokens: record rollouts with a model policy (TransformersPolicy, vLLM, or an "
            "OpenAI-compatible server that returns token ids)")
    last = part[-1].tokens
    assert last is not None
    ids = last.prompt_ids + last.completion_ids  # (L,)
    spans: list[tuple[int, Step]] = []
    extra: list[Sample] = []
    for k, step in enumerate(part):
        tok = step.tokens
        assert tok is not None
        if not tok.completion_ids:
            continue
        p, c = len(tok.prompt_ids), len(tok.completion_ids)
        if ids[:p] == tok.prompt_ids and ids[p:p + c] == tok.completion_ids:
            spans.append((p, step))
        elif k + 2 == len(part) and part[-1].summary:
            continue  # the turn dropped before the summary: in no working context
        else:  # re-rendered history: train the turn as its own sequence
            logprobs = tok.logprobs or (math.nan,) * c
            extra.append(Sample(traj.id, traj.group_id, step.index, tok.prompt_ids +
                                tok.completion_ids, p, adv[step.index], tuple(logprobs)))
    if not spans:
        return extra
    start = spans[0][0]
    n = len(ids) - start
    mask, advs, logps = np.zeros(n), np.zeros(n), np.zeros(n)
    for p, step in spans:
        tok = step.tokens
        assert tok is not None
        c = len(tok.completion_ids)
        mask[p - start:p - start + c] = 1.0
        advs[p - start:p - start + c] = adv[step.index]
        logps[p - start:p - start + c] = tok.logprobs or (math.nan,) * c
    return [Sample(traj.id, traj.group_id, part[-1].index, ids, start,
                   adv[part[-1].index], tuple(logps.tolist()), tuple(mask.tolist()),
                   tuple(advs.tolist())), *extra]


def supo_samples(groups: Iterable[Group], advantages: Mapping[str, np.ndarray],
                 options: SUPOOptions = SUPOOptions(), *,
                 skip_zero_advantage: bool = True) -> list[Sample]:
    """Training sequences of summarized rollouts: I+1 per rollout (module docstring).

    Args:
        groups: The groups the advantages were computed on (one trajectory per rollout).
        advantages: Trajectory id -> ``(num_steps,)`` step advantages from the estimator.
        options: Overlong masking.
        skip_zero_advantage: Drop sequences whose every trained token has advantage 0
            (their tokens then leave the ``token_mean`` normalizer too; the trainer passes
            False and lets the update skip their forward pass, which keeps it).

    Returns:
        The samples, in group / rollout / working-context order.

    Raises:
        TrainingDataError: A scorable rollout has no (or wrongly shaped) advantages, or
            steps without recorded tokens.
    """
    from agentgym.trainers.batching import TrainingDataError

    out: list[Sample] = []
    for group in groups:
        for traj in group.scorable:
            adv = np.asarray(advantages.get(traj.id, ()), dtype=np.float64)  # (T,)
            if adv.shape != (len(traj.steps),) or not np.isfinite(adv).all():
                raise TrainingDataError(
                    f"rollout {traj.id!r} needs {len(traj.steps)} finite step advantages, got "
                    f"{adv.tolist()!r}; compute them with an estimator over the same groups")
            if options.overlong_mask and is_overlong(traj) and (
                    options.mask_rescored or not is_rescored(traj)):
                continue
            by_index = {s.index: float(a) for s, a in zip(traj.steps, adv, strict=True)}
            for part in working_contexts(traj):
                for sample in _pack(traj, part, by_index):
                    if skip_zero_advantage and not np.any(sample.advantages):
                        continue
                    out.append(sample)
    return out


def tool_calls(step: Step) -> int:
    """Tool calls in an env step's action (structured, else parsed from its text)."""
    if step.action.tool_calls:
        return len(step.action.tool_calls)
    return len(parse_tool_calls(step.action.content).calls)


def supo_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Summaries and sequences per rollout, overlong share, context tokens, tool calls.

    ``supo/context_tokens_per_call`` is the mean prompt length of a policy call (summary calls
    included): the working context the model attended to.
    """
    ok = [t for t in trajs if t.scorable]
    n = max(len(ok), 1)
    calls = [s for t in ok for s in t.steps if s.tokens is not None]
    summaries = [sum(s.summary for s in t.steps) for t in ok]
    return {
        "supo/summaries_per_episode": sum(summaries) / n,
        "supo/sequences_per_rollout": sum(k + 1 for k in summaries) / n,
        "supo/overlong_fraction": sum(map(is_overlong, ok)) / n,
        "supo/context_tokens_per_call": (sum(len(s.tokens.prompt_ids) for s in calls)  # type: ignore[union-attr]
                                         / max(len(calls), 1)),
        "supo/tool_calls_per_episode": sum(tool_calls(s) for t in ok for s in t.steps
                                           if not s.summary) / n,
    }
