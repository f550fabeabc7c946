r"""SALT advantages: the base advantage averaged over the trajectories that share an edge.

Each step is an edge of the group's trajectory graph (state context, action, next state).

    A_{i,t} = (1 / |T(e)|) · Σ_{j ∈ T(e)} A_j − λ·1[¬valid_t],   e = e_{i,t}
    e_{i,t} = (S(τ_i, t), a_{i,t}, s_{i,t+1})        s_{i,T} = an end marker with the outcome
    T(e)    = the group's trajectories that contain e (each counted once)
    A_j     = the base advantage of trajectory j: GRPO, RLOO, or GiGPO's episode term

Averaging keeps each edge's total: the steps of e carry Σ_{j∈T(e)} A_j between them, as
under the base (a trajectory that loops through e excepted). So where the steps of an edge
also share their input (prompt and action tokens: a context the state key fixes), the policy
gradient Σ A·∇log π is the base's; SALT changes the update through the steps whose contexts
differ (history the key leaves out, ``history`` < the context's).

Paper: "SALT: Step-level Advantage Assignment via Trajectory Graph" (credit-assignment spec
§4), arXiv 2510.20022. No public code exists; this follows the mechanism the paper and
follow-up work describe. An edge every trajectory shares gets the group mean of A (0 for the
centred bases); a unique edge keeps A_i, so no sign is flipped there.

Choices the paper leaves open, and what we do:

- **Base** (``base``): ``grpo`` (default), ``rloo``, or ``gigpo`` = GiGPO's episode term with
  ``episode_stats`` (``trajectory`` by default, which equals ``grpo``; ``step`` weighs long
  trajectories more, as verl-agent). ``mode`` defaults to the base's own (``mean_norm`` for
  RLOO, ``mean_std_norm`` otherwise); std as in the base (unbiased).
- **State context S** (``history``): ``0`` = the current ``state_key`` (default); an integer
  k = the current state plus the last k (action, state) pairs, fewer at early steps (no
  padding: the whole prefix then); ``all`` = the whole prefix from s_0 (a prefix tree).
- **Canonical action**: the parsed env action, never the raw completion. Tool calls come
  from ``Step.action.tool_calls``, else from ``agentgym.parsing.parse_tool_calls`` on the
  text (formats hermes, action, json: the ``ToolBox`` default); the key is the list of
  (name, arguments) as JSON with sorted keys and no whitespace between tokens. Call ids are
  ignored; string values are kept exactly (whitespace inside code or paths can matter).
  Plain-text envs: a *valid* step whose text holds no tool-call marker is keyed by its text
  with runs of whitespace collapsed to one space and the ends stripped (case kept: the env
  decides whether "Go north" is "go north"); reasoning around the action makes such keys
  rarely repeat, which only costs merging, never a wrong merge.
- **Unmergeable steps** keep A_i: no call parsed and a tool-call marker present, an invalid
  step with no call, empty text, and any step whose S or next state holds a ``None`` key
  (``None`` matches nothing). An invalid step whose call did parse is mergeable.
- **End marker**: the last step's next state is "end with outcome R_i", so a win and a loss
  from the same state and action are different edges. Every base's A_j is a function of R_j
  alone, so a last step always keeps A_i: merging adds nothing there. Truncated and
  terminated endings share the marker (splitting them could not change a value).
- **Set semantics**: a trajectory that holds an edge several times (a loop) counts once in
  T(e) and each of its occurrences gets the same mean. No extra normalization.
- **Invalid-action penalty** λ: taken from the invalid step's own advantage after the
  average (the base's placement, see ``base``); the A_j averaged carry no penalty.
- **Unscorable and small groups**: error trajectories enter no statistic and get no entry;
  a group with fewer than 2 scorable trajectories gives zeros.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym.errors import ConfigError
from agentgym.parsing import marked_blocks, parse_tool_calls
from agentgym.trainers.advantages.base import (
    Advantages,
    EstimatorOptions,
    Flat,
    Mode,
    flatten,
    register_estimator,
    unflatten,
)
from agentgym.trainers.advantages.gigpo import EpisodeStats, episode_term
from agentgym.trainers.advantages.grpo import grpo_trajectory_advantages
from agentgym.trainers.advantages.hgpo import pair_ids, positions, state_ids
from agentgym.trainers.advantages.rloo import rloo_trajectory_advantages
from agentgym.types import Group, Step, ToolCall

Base = Literal["grpo", "rloo", "gigpo"]
ActionKey = tuple[str, str]  # ("calls", JSON) or ("text", normalized text)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            default=repr)


@dataclass(frozen=True)
class SALTOptions(EstimatorOptions):
    """SALT options: the shared ones plus the base estimator and the history of S."""

    base: Base = "grpo"
    """Trajectory-level base: ``grpo``, ``rloo`` or ``gigpo`` (GiGPO's episode term)."""
    history: int | Literal["all"] = 0
    """S: 0 = the current state; k = plus the last k (action, state) pairs; all = prefix."""
    mode: Mode | None = None
    """The base's ``mode``; None = the base's default (``mean_norm`` for RLOO)."""
    episode_stats: EpisodeStats | None = None
    """Only with ``base=gigpo``: its ``episode_stats``; None = ``trajectory``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.history != "all" and self.history < 0:
            raise ConfigError(f"history must be an integer >= 0 or 'all', got {self.history}; "
                              "history=0 keys an edge by the current state alone")
        if self.episode_stats is not None and self.base != "gigpo":
            raise ConfigError(f"episode_stats applies to base='gigpo' only, got base="
                              f"{self.base!r}; drop episode_stats or set base=gigpo")


def calls_key(calls: Sequence[ToolCall]) -> ActionKey:
    """The canonical key of some tool calls: names and arguments, sorted-key JSON, no ids."""
    return "calls", _ENCODER.encode([[c.name, c.arguments] for c in calls])


def text_action(text: str) -> tuple[ActionKey | None, bool]:
    """(key, whether it holds tool calls) for an action given as text; key None = unparsed."""
    parsed = parse_tool_calls(text)
    if parsed.calls:
        return calls_key(parsed.calls), True
    words = " ".join(text.split())
    return (("text", words) if parsed.format is None and words else None), False


def canonical_action(step: Step, cache: dict[object, tuple[ActionKey | None, bool]]
                     ) -> ActionKey | None:
    """The step's canonical action (module docstring), or None when it cannot be merged.

    Args:
        step: The step.
        cache: Parses already made, shared across one call. A text with tool-call markers is
            filed under its marked blocks, which alone decide its parse: model text varies
            around the same call, so each distinct call is parsed once, not each step.

    Example:
        >>> from agentgym.types import Message, Step, StepResult
        >>> text = '<tool_call>{"name": "go", "arguments": {"to": "a", "by": 1}}</tool_call>'
        >>> canonical_action(Step(0, Message("assistant", text), StepResult(())), {})
        ('calls', '[["go",{"by":1,"to":"a"}]]')
    """
    if step.action.tool_calls:
        return calls_key(step.action.tool_calls)
    text = step.action.content
    slot = marked_blocks(text) or text
    if slot not in cache:
        cache[slot] = text_action(text)
    key, is_call = cache[slot]
    return key if is_call or step.valid else None


def base_advantages(flat: Flat, options: SALTOptions) -> np.ndarray:
    """``(N,)`` the base estimator's A_j, one per trajectory, before any penalty."""
    if options.base == "rloo":
        return rloo_trajectory_advantages(flat, options.mode or "mean_norm")
    mode = options.mode or "mean_std_norm"
    if options.base == "grpo":
        return grpo_trajectory_advantages(flat, mode)
    per_step = episode_term(flat, mode, options.episode_stats or "trajectory")  # (S,)
    out = np.zeros(len(flat.ids))
    out[flat.step_traj] = per_step  # constant over a trajectory's steps
    return out


def context_labels(pos: np.ndarray, state: np.ndarray, action: np.ndarray,
                   history: int | Literal["all"]) -> np.ndarray:
    """``(S,)`` dense ids of S(τ, t): equal ids = equal state context (module docstring)."""
    pair = pair_ids(state, action)  # (S,) (s_u, a_u)
    if history == "all":  # prefix tree: P_t = (P_{t−1}, s_{t−1}, a_{t−1}), one t at a time
        out, offset = np.empty_like(state), 0
        steps_at = np.argsort(pos, kind="stable")  # (S,) steps by position
        bounds = np.cumsum(np.bincount(pos)) if len(pos) else np.zeros(0, dtype=np.int64)
        for t, (lo, hi) in enumerate(zip(np.r_[0, bounds[:-1]], bounds, strict=True)):
            idx = steps_at[lo:hi]
            label = state[idx] if t == 0 else pair_ids(out[idx - 1], pair[idx - 1])
            out[idx] = label + offset  # prefixes of different lengths never match
            offset += int(label.max()) + 1
        return pair_ids(out, state)  # append s_t
    label = state
    for j in range(1, history + 1):  # window: prepend (s_{t−j}, a_{t−j}); 0 pads past s_0
        back = np.maximum(np.arange(len(pos)) - j, 0)
        label = pair_ids(label, np.where(pos >= j, pair[back] + 1, 0))
    return label


def salt_step_advantages(flat: Flat, options: SALTOptions) -> np.ndarray:
    """``(S,)`` SALT advantages of the flattened steps (module docstring).

    Args:
        flat: The flattened groups (``base.flatten``).
        options: The estimator options.

    Returns:
        One advantage per step, λ included; groups with < 2 scorable are zeroed later.
    """
    n_steps, base = len(flat.steps), base_advantages(flat, options)  # (N,)
    if n_steps == 0:
        return np.zeros(0)
    pos, state = positions(flat), state_ids(flat)  # (S,), (S,)
    cache: dict[object, tuple[ActionKey | None, bool]] = {}
    keys: dict[object, int] = {}
    action = np.fromiter(  # (S,) canonical action ids; an unmergeable step gets its own id
        (keys.setdefault(a if a is not None else ("unmergeable", k), len(keys))
         for k, a in enumerate(canonical_action(s, cache) for s in flat.steps)),
        dtype=np.int64, count=n_steps)
    last = np.cumsum(flat.lengths)[flat.lengths > 0] - 1  # (M,) last step of each trajectory
    traj_end = np.stack([flat.group, flat.outcome])[:, flat.step_traj[last]]  # (2, M)
    end_ids = np.unique(traj_end, axis=1, return_inverse=True)[1].reshape(-1)  # (group, R_i)
    nxt = np.append(state[1:], 0)  # (S,) the next state, or …
    nxt[last] = int(state.max()) + 1 + end_ids  # … the end marker of the trajectory
    edge = pair_ids(pair_ids(context_labels(pos, state, action, options.history), action), nxt)
    # T(e) as a set: one (edge, trajectory) entry per trajectory, however often it loops
    _, first = np.unique(edge * len(flat.ids) + flat.step_traj, return_index=True)
    e, traj = edge[first], flat.step_traj[first]
    total = np.bincount(e, base[traj], minlength=n_steps)  # (E,) Σ_{j∈T(e)} A_j
    count = np.bincount(e, minlength=n_steps)  # (E,) |T(e)|
    return total[edge] / count[edge] - flat.penalty


@register_estimator("salt", options=SALTOptions)
class SALT:
    """SALT advantages (module docstring).

    Example:
        >>> from agentgym.trainers.advantages import get_estimator
        >>> estimate = get_estimator("salt", base="rloo", history="all")
        >>> estimate([])
        {}
    """

    def __init__(self, options: SALTOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"SALT({self.options})"

    def __call__(self, groups: Sequence[Group]) -> Advantages:
        """Advantages of every scorable trajectory in ``groups``, one per step.

        Raises:
            SchemaError: A trajectory's steps are out of order, or ids repeat.
        """
        o = self.options
        flat = flatten(groups, gamma=o.gamma, invalid_penalty=o.invalid_penalty)
        return unflatten(flat, salt_step_advantages(flat, o))
