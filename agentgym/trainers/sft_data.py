"""Demonstrations for supervised fine-tuning: trajectory JSONL → token samples.

Sources are any trajectory files: ``agentgym rollout --policy expert`` (the env's own expert)
and model rollouts filtered to the good ones (``data.success_only``, ``data.min_reward``:
rejection-sampling fine-tuning).

**Same tokens as RL.** A step recorded by a model policy keeps its recorded
``prompt_ids + completion_ids`` (what the policy saw and wrote). A step without tokens (an
expert's) is *replayed* through the rollout's own context manager
(:func:`agentgym.context.make_context` with the run's ``rollout`` section): the prompt ids are
exactly those a model policy would be given at that step, and the completion is the action
as the chat template renders an assistant turn, followed by the EOS token, as a model
completion ends (``agentgym.policies.hf`` "Token conventions"). SFT and RL therefore train
on identical prompts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from agentgym.context import ContextConfig, ContextLimitExceeded, make_context
from agentgym.errors import ConfigError
from agentgym.jsonl import read_trajectories
from agentgym.policies.base import Completion, SamplingParams
from agentgym.prompting import render_prompt, to_chat
from agentgym.trainers.batching import Sample
from agentgym.trainers.metrics import succeeded
from agentgym.trainers.sft_config import SFTDataConfig
from agentgym.types import Message, ToolSpec, Trajectory


def keep(traj: Trajectory, config: SFTDataConfig) -> bool:
    """Whether ``traj`` passes the filters (error trajectories never do)."""
    if not traj.scorable or not traj.steps:
        return False
    if config.success_only and not succeeded(traj):
        return False
    reward = traj.outcome_reward if traj.outcome_reward is not None else 0.0
    return config.min_reward is None or reward >= config.min_reward


def load_demonstrations(config: SFTDataConfig) -> tuple[list[Trajectory], int]:
    """The kept trajectories of ``config.paths`` and how many were read in all.

    Raises:
        ConfigError: No trajectory passes the filters.
    """
    read, kept = 0, []
    for path in config.paths:
        for number, traj in enumerate(read_trajectories(path), 1):
            read += 1
            if keep(traj, config):
                bad = lone_surrogate(traj.to_dict())
                if bad is not None:  # no tokenizer encodes it: say where, before loading one
                    raise ConfigError(
                        f"{path}: trajectory {number} ({traj.id}) holds a lone surrogate "
                        f"(\\u{ord(bad[1]):04x}, half of a UTF-16 pair) in {bad[0]}; it is no "
                        "text a tokenizer can encode. Fix or drop that trajectory")
                kept.append(traj)
    kept = kept[:config.max_trajectories]
    if not kept:
        raise ConfigError(
            f"none of the {read} trajectories in {list(config.paths)} passes the filters "
            f"(success_only={config.success_only}, min_reward={config.min_reward}, errors "
            "dropped); record more episodes or loosen data.success_only / data.min_reward")
    return kept, read


def lone_surrogate(value: Any, path: str = "") -> tuple[str, str] | None:
    """``(where, character)`` of the first lone surrogate in a JSON-like value, or None.

    A JSON escape of half a UTF-16 pair decodes to such a character, which is no Unicode
    text: tokenizers cannot encode it.
    """
    if isinstance(value, str):
        for char in value:
            if "\ud800" <= char <= "\udfff":
                return path or "a string", char
    elif isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def action_completion(tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec],
                      action: Message) -> tuple[str, tuple[int, ...]]:
    """The text and token ids a model would have written for ``action`` (with EOS).

    The text is the assistant turn as the chat template renders it after ``messages``;
    templates that do not render it as a plain continuation fall back to agentgym's own
    rendering of tool calls (:func:`agentgym.prompting.to_chat`).
    """
    head = render_prompt(tokenizer, messages, tools)
    full = render_prompt(tokenizer, [*messages, action], tools, add_generation_prompt=False)
    eos = tokenizer.eos_token or ""
    if full.startswith(head) and eos and eos in full[len(head):]:
        text = full[len(head):].split(eos, 1)[0]
    else:
        text = to_chat([action], tools, native_tools=False)[-1]["content"]
    ids = tuple(tokenizer.encode(text, add_special_tokens=False))
    return text, (*ids, tokenizer.eos_token_id)


def replay(traj: Trajectory, tokenizer: Any, context: ContextConfig) -> list[tuple[int, Any]]:
    """``(step index, StepTokens-like (prompt_ids, completion_ids))`` for every step.

    Recorded tokens are kept as they are; other steps are rebuilt through the context
    manager (module docstring). The replay stops at a prompt over ``max_prompt_tokens``.

    Raises:
        ConfigError: A step has no recorded tokens and the context is ``summarize`` (its
            summaries were never written, so its prompts cannot be rebuilt).
    """
    if all(s.tokens is not None for s in traj.steps):
        return [(s.index, (s.tokens.prompt_ids, s.tokens.completion_ids))  # type: ignore[union-attr]
                for s in traj.steps]
    if context.mode == "summarize":
        raise ConfigError("rollout.context=summarize cannot rebuild the prompts of steps "
                          "recorded without tokens (an expert's); use context full or window")
    ctx = make_context(context, tokenizer, traj.prompt, traj.tools)
    out: list[tuple[int, Any]] = []
    for step in traj.steps:
        try:
            request = ctx.request(SamplingParams())
        except ContextLimitExceeded:
            break
        if step.tokens is not None:
            text = step.action.content
            prompt, completion = step.tokens.prompt_ids, step.tokens.completion_ids
        else:
            text, completion = action_completion(tokenizer, request.messages, traj.tools,
                                                 step.action)
            prompt = request.prompt_ids
        out.append((step.index, (prompt, completion)))
        ctx.record(Completion(text, prompt, completion), step.result.observation)
    return out


def demonstration_samples(trajs: Iterable[Trajectory], tokenizer: Any, context: ContextConfig,
                          *, skip_invalid_steps: bool = True) -> list[Sample]:
    """One :class:`Sample` (advantage 1, no behaviour log-probs) per imitated step."""
    samples = []
    for traj in trajs:
        valid = {s.index: s.valid for s in traj.steps}
        for index, (prompt, completion) in replay(traj, tokenizer, context):
            if not completion or not prompt or (skip_invalid_steps and not valid[index]):
                continue
            samples.append(Sample(traj.id, traj.group_id, index, (*prompt, *completion),
                                  len(prompt), 1.0, (math.nan,) * len(completion)))
    return samples
