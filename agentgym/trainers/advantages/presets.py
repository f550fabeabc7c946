"""Named option presets for the estimators: ``verl_agent_compat`` reproduces verl-agent.

verl-agent (the reference code of GiGPO) differs from agentgym's defaults in two places that
change its numbers (docs/estimators.md has the full option table):

- its group statistics take one entry per step record (``compute_mean_std_cross_steps``,
  on by default), where agentgym takes one per trajectory;
- its invalid-action penalty is subtracted from the invalid step's episode entry before the
  statistics, where agentgym takes it from that step after them (``base``).

``verl_agent_compat`` turns both on, with verl-agent's defaults of γ and mode where the
estimator has them; the parity tests (tests/trainers/test_verl_agent_parity.py) hold these
options to numbers recorded from verl-agent's own functions.

    >>> verl_agent_compat("grpo")
    {'cross_steps': True, 'penalty_placement': 'before_stats'}
"""

from __future__ import annotations

from typing import Any

from agentgym.errors import ConfigError, did_you_mean

VERL_AGENT_COMPAT: dict[str, dict[str, Any]] = {
    "grpo": {"cross_steps": True, "penalty_placement": "before_stats"},
    "rloo": {"cross_steps": True, "penalty_placement": "before_stats"},
    # verl-agent's GiGPO: mean_norm and γ = 0.95 in its released scripts
    "gigpo": {"episode_stats": "step", "penalty_placement": "before_stats",
              "mode": "mean_norm", "gamma": 0.95},
    # HGPO's levels already hold λ in the step's own return, as verl-agent's step_rewards;
    # only its optional base_group term keeps agentgym's placement
    "hgpo": {"gamma": 0.95},
}


def verl_agent_compat(estimator: str, **overrides: Any) -> dict[str, Any]:
    """Options that make ``estimator`` compute verl-agent's numbers.

    Args:
        estimator: ``grpo``, ``rloo``, ``gigpo`` or ``hgpo``.
        **overrides: Options to set on top (e.g. ``invalid_penalty``).

    Returns:
        Options for ``get_estimator(estimator, **options)`` or ``algorithm.options``.

    Raises:
        ConfigError: An estimator verl-agent has no counterpart of.
    """
    if estimator not in VERL_AGENT_COMPAT:
        raise ConfigError(f"verl_agent_compat covers {', '.join(VERL_AGENT_COMPAT)}, got "
                          f"{estimator!r}{did_you_mean(estimator, VERL_AGENT_COMPAT)}")
    return {**VERL_AGENT_COMPAT[estimator], **overrides}


SPA_RELEASED: dict[str, Any] = {"variant": "released", "advantage": "gae", "gamma": 1.0,
                                "lam": 0.95, "mode": "mean_std_norm"}
"""SPA as its public trainer runs it (``advantages/spa.py`` says what is matched)."""


def spa_released(**overrides: Any) -> dict[str, Any]:
    """Options that make ``spa`` build the released SPA-RL-Agent trainer's advantages.

    >>> spa_released()["advantage"]
    'gae'
    """
    return {**SPA_RELEASED, **overrides}
