"""The credit study's page lines for G-RA against direct accumulation (the SWE arm).

    R(τ) = Σ_i g_i(τ)·R^(i)(τ)   (G-RA: g_i = 1 only when every higher-priority R^(j) ≥ δ_j)
    R(τ) = Σ_i R^(i)(τ)          (direct)

An SWE env's own reward is 1 for a resolving patch, so a run that resolves nothing shows
``reward_mean`` 0 and every group zero-variance; the estimator trains on R(τ), whose outcome
term tells a submission from none and whose turn term a valid turn from a malformed one. These
lines report what the runs trained on, per training step, from each record's
``reward_terms`` (the ``reward/…`` and ``accumulated/…`` means the trainer logs).
"""

from __future__ import annotations

from typing import Any

from agentgym.reward_presets import get_reward_preset
from agentgym.trainers.study.page import interval, points, variants
from agentgym.trainers.study.units import SWE_RATES, Setup, Unit

# (record key, column heading) of the accumulated-reward table, one cell per training step
TERMS = (("reward/outcome", "outcome reward R_high"),
         ("reward/turns", "turn reward Σ r_low"),
         ("reward/gate_turns", "turn rewards counted"),
         ("accumulated/zero_variance_groups", "groups with one R(τ)"),
         ("invalid_step_rate", "invalid-step rate"))


def swe_reward_options() -> Any:
    """The ``swe`` reward preset's options at their defaults, as the study's runs used them.

    The SWE env registers the preset (its options are ``SWERewardConfig``); read through the
    registry, since the trainers do not import an env.
    """
    return get_reward_preset("swe").options()


def _series(r: dict[str, Any], key: str) -> list[float | None] | None:
    """One record's per-step values of ``key``: a rate or a reward term."""
    return r.get(key) if key in r else (r.get("reward_terms") or {}).get(key)


def _mean_per_step(rs: list[dict[str, Any]], key: str) -> tuple[list[float], int]:
    """Mean over the records that logged ``key``, per training step, and how many did."""
    series = [[x for x in s if x is not None] for r in rs if (s := _series(r, key))]
    steps = min((len(x) for x in series), default=0)
    return [sum(x[i] for x in series) / len(series) for i in range(steps)], len(series)


def _signed(x: float) -> str:
    return f"{x:+g}" if x else "0"


def _cell(means: list[float], logged: int, seeds: int, percent: bool) -> str:
    if not means:
        return "–"
    text = " → ".join(f"{m:.0%}" if percent else f"{m:+.2f}" for m in means)
    return text + (f" ({logged} of {seeds} seeds)" if logged < seeds else "")


def rates_table(s: Setup, done: list[Unit]) -> list[str]:
    """SWE's completion, modification and resolve rates of the training rollouts, per step."""
    lines = ["Training rollouts, rate at each step (mean over seeds):", "",
             "| run | seeds | " + " | ".join(r.replace("_", " ") for r in SWE_RATES) + " |",
             "|---|---|" + "---|" * len(SWE_RATES)]
    for variant in variants(s):
        rs = [u.result() for u in done if u.variant == variant]
        cells = [_cell(*_mean_per_step(rs, rate), len(rs), True) for rate in SWE_RATES]
        lines.append(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def accumulation_lines(s: Setup, done: list[Unit]) -> list[str]:
    """What the runs trained on: the accumulated reward's terms per step.

    And why a run whose env reward is 0 throughout still has something to learn from.
    """
    c = swe_reward_options()
    rs_all = [u.result() for u in done]
    if not any(_series(r, "reward/outcome") for r in rs_all):
        return []
    success = [x or 0.0 for r in rs_all for x in r.get("train_success", [])]
    lines = ["**What the runs trained on.** " + (
        "The env's reward (1 for a resolving patch) was 0 in every training rollout, so "
        "every group is zero-variance by it; " if not any(success) else
        f"The env's reward (1 for a resolving patch) averaged {sum(success) / len(success):.0%}"
        " over the training rollouts; ")
        + "the estimator trains on the accumulated R(τ) instead: an outcome reward R_high "
        f"({_signed(c.no_submit)} no submission, {_signed(c.empty_patch)} empty patch, "
        f"{_signed(c.failing_patch)} failing patch, {_signed(c.resolved)} resolved) and a "
        f"turn reward ({_signed(c.valid_turn)} per valid turn, {_signed(c.malformed_turn)} "
        "per malformed one), which "
        f"G-RA counts only where R_high ≥ {c.threshold:g} and direct accumulation always. "
        "Per training step, mean over seeds (the share of groups whose rollouts all got one "
        "R(τ) is logged from the runs that record it):", "",
        "| run | seeds | " + " | ".join(head for _, head in TERMS) + " |",
        "|---|---|" + "---|" * len(TERMS)]
    for variant in variants(s):
        rs = [u.result() for u in done if u.variant == variant]
        cells = [_cell(*_mean_per_step(rs, key), len(rs),
                       key not in ("reward/outcome", "reward/turns")) for key, _ in TERMS]
        lines.append(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
    lines += ["", _reading(s, done)]
    return lines


def rate_changes(s: Setup, done: list[Unit], rate: str = "completion_rate"
                 ) -> dict[str, tuple[float, float, int]]:
    """Per variant: the change of a training-rollout rate from a run's first step to its last.

    The rate is one of ``SWE_RATES``; the change as mean and 95% half-width over seeds, and
    the seeds.
    """
    out = {}
    for variant in variants(s):
        changes = [r[-1] - r[0] for u in done if u.variant == variant
                   for r in [[x or 0.0 for x in u.result().get(rate) or []]] if r]
        if changes:
            out[variant] = (*interval(changes), len(changes))
    return out


def accumulation_summary(s: Setup, done: list[Unit]) -> str:
    """The training rollouts' rates for the page's summary bullet.

    Completion always; modification and resolve where some run made a patch or resolved a
    task.
    """
    parts = []
    for rate in SWE_RATES:
        changes = rate_changes(s, done, rate)
        if not changes or (rate != "completion_rate" and not any(
                x for u in done for x in u.result().get(rate) or [])):
            continue
        parts.append(rate.split("_")[0] + " " + ", ".join(
            f"{v} {points(m)}" + (f" ± {100 * w:.1f} ({n} seeds)" if n > 1 else " (1 seed)")
            for v, (m, w, n) in changes.items()))
    if not parts:
        return ""
    text = (" Rates of the training rollouts, change from a run's first step to its last, "
            "mean ± 95% over seeds, in points: " + "; ".join(parts) + ".")
    equal, steps = _equal_rate_steps(done)
    if steps and equal == steps:
        text += (f" Direct and gated runs of one seed had the same rates at all {steps} "
                 "training steps")
        text += (", and G-RA's gate changed no step's mean R(τ): this warm start's rollouts "
                 "gave the accumulations nothing to differ on."
                 if _gate_changed_nothing(done) else ".")
    return text


def _equal_rate_steps(done: list[Unit]) -> tuple[int, int]:
    """Training steps where a gated run's rates equal the direct run's of its seed, of all."""
    direct = {u.seed: u.result() for u in done if u.accumulation == "direct"}
    equal = steps = 0
    for u in done:
        if u.accumulation != "gated" or u.seed not in direct:
            continue
        mine, theirs = u.result(), direct[u.seed]
        rows = [list(zip(mine.get(r) or [], theirs.get(r) or [], strict=False))
                for r in SWE_RATES]
        for step in zip(*rows, strict=False):
            steps += 1
            equal += all(a == b for a, b in step)
    return equal, steps


def _reading(s: Setup, done: list[Unit]) -> str:
    """The table in words: what each accumulation could learn from, and what moved."""
    c = swe_reward_options()
    moves = []
    for variant in variants(s):
        rs = [u.result() for u in done if u.variant == variant]
        done_rate, n = _mean_per_step(rs, "completion_rate")
        more = [(rate.split("_")[0], series) for rate in SWE_RATES[1:]
                if any(series := _mean_per_step(rs, rate)[0])]
        invalid, _ = _mean_per_step(rs, "invalid_step_rate")
        if invalid:
            more.append(("invalid steps", invalid))
        if done_rate:
            moves.append(f"{variant} completion {done_rate[0]:.0%} → {done_rate[-1]:.0%}"
                         + "".join(f", {name} {x[0]:.0%} → {x[-1]:.0%}" for name, x in more)
                         + f" ({n} seed{'s' * (n > 1)})")
    changes = rate_changes(s, done)
    apart = [v for v, (m, w, n) in changes.items() if n > 1 and abs(m) > w]
    resolve = rate_changes(s, done, "resolve_rate")
    resolve_apart = [v for v, (m, w, n) in resolve.items() if n > 1 and abs(m) > w]
    counted = [x for u in done if u.accumulation == "gated"
               for x in _series(u.result(), "reward/gate_turns") or [] if x is not None]
    text = ("From its first training step to its last, mean over seeds: "
            + "; ".join(moves) + ". Each training step trains on its own tasks (seeds "
            f"{s.tasks_per_step}k to {s.tasks_per_step}k + {s.tasks_per_step - 1} at step k + 1, "
            "the same in every run), so a change from the first step to the last mixes what a "
            "run learned with how the warm start does on the later tasks; the accumulations "
            "meet the same tasks at each step, and compare there.")
    if any(n > 1 for *_, n in changes.values()):
        text += (" Over seeds, completion moved beyond its 95% interval in "
                 + (", ".join(apart) if apart else "neither"))
        if any(x for u in done for x in u.result().get("resolve_rate") or []):
            text += (", resolve in " + (", ".join(resolve_apart) if resolve_apart
                                        else "neither"))
        text += "."
    share = sum(counted) / len(counted) if counted else None
    if share == 0:
        text += (" No G-RA rollout reached R_high ≥ "
                 f"{c.threshold:g} (a non-empty patch), so G-RA counted no turn reward: it "
                 f"trained on submitting alone ({_signed(c.empty_patch)} against "
                 f"{_signed(c.no_submit)}), "
                 "direct accumulation on submitting and on making valid turns.")
    elif share is not None and share < 1:
        per_step = s.tasks_per_step * s.group_size
        text += (f" G-RA counted turn rewards in {round(sum(counted) * per_step)} of its "
                 f"{len(counted) * per_step} training rollouts (those whose "
                 f"R_high reached {c.threshold:g}: a non-empty patch); in the rest it trained "
                 f"on the outcome alone ({_signed(c.no_submit)} no submission, "
                 f"{_signed(c.empty_patch)} empty patch), where direct accumulation also "
                 "counted their turns.")
        text += _withheld_line(done)
    text += (" What G-RA guards against, direct accumulation trading submission for turn "
             "rewards, would show as direct's completion rate falling while its turn reward "
             f"rises; a training step holds {s.tasks_per_step * s.group_size} rollouts, so "
             f"one step's rates move by {100 / (s.tasks_per_step * s.group_size):.1f} points "
             "per rollout.")
    return text


def _withheld(done: list[Unit]) -> tuple[list[float], int]:
    """The turn reward G-RA's gate withheld, per gated step that logged it; and the gated steps.

    Its R(τ) is outcome + counted turns, so the withheld reward is ``reward/turns`` −
    (accumulated − outcome).
    """
    withheld, steps = [], 0
    for u in done:
        if u.accumulation != "gated":
            continue
        r = u.result()
        terms = [_series(r, k) or [] for k in ("reward/turns", "accumulated/reward_mean",
                                               "reward/outcome")]
        steps += len(terms[0])
        withheld += [turns - (acc - outcome) for turns, acc, outcome
                     in zip(*terms, strict=False) if None not in (turns, acc, outcome)]
    return withheld, steps


def _gate_changed_nothing(done: list[Unit]) -> bool:
    withheld, _ = _withheld(done)
    return bool(withheld) and all(abs(x) < 1e-9 for x in withheld)


def _withheld_line(done: list[Unit]) -> str:
    """Whether G-RA's gate changed any step's mean R(τ), in words."""
    withheld, steps = _withheld(done)
    if not withheld:
        return ""
    nonzero = sum(abs(x) >= 1e-9 for x in withheld)
    logged = f" (of {steps}; the others did not log it)" if steps > len(withheld) else ""
    if nonzero:
        return (f" The turn reward G-RA withheld was nonzero in {nonzero} of "
                f"{len(withheld)} training steps{logged}, so there its mean R(τ) differed "
                "from what direct accumulation would have given the same rollouts.")
    return (f" Yet in all {len(withheld)} of its training steps{logged} the turn rewards G-RA "
            "withheld summed to zero (its accumulated reward mean equals its outcome reward "
            "mean plus all its turn rewards): its rollouts without a patch made, together, as "
            "many malformed turns as valid ones (as a failed edit, −0.1, then the submission, "
            "+0.1, does), so its mean R(τ) at every step was what direct accumulation would "
            "have given the same rollouts.")
