"""Differential check: the BFCL envs against BFCL's own inference loop and eval runner.

For one entry and one scripted sequence of model replies (each a set of tool calls, or text)
there are two runs:

- **BFCL**: its OpenAI function-calling handler (``OpenAICompletionsHandler``, the profile the
  envs score as) runs its own inference loop (``inference_multi_turn_FC`` or
  ``inference_single_turn_FC``: turn order, held-out functions, the 20-step force-quit,
  execution through its executor), with its API client replaced by the script; then its eval
  runner (``_evaluate_single_multi_turn_entry``, ``_evaluate_single_ast_entry``,
  ``_evaluate_single_relevance_entry``) scores the responses, as ``bfcl evaluate`` does from
  a result file (the responses go through JSON on the way, as through that file).
- **agentgym**: ``bfcl/MultiTurn-v0`` or ``bfcl/SingleTurn-v0`` made with default kwargs and
  given the same replies as actions, all episodes in flight at once up to the rollout
  default concurrency.

Compared as :class:`~agentgym.fidelity.StepRecord` steps (:func:`records`): at every model
call, what the model is shown before it (the new messages as ``role: content``, and the tools
in OpenAI form); the number of replies the episode took; the verdict (passed, or BFCL's error
type) and the reward. Formatting that is documented and not compared: the env's message after
the last reply ("The conversation is over.", the single-turn verdict line), to which BFCL has
no counterpart because it asks nothing more.

The scripts are BFCL's ground truth and perturbations of it (:mod:`.perturb`); the verdicts
differ between perturbations, and the point is that both runs reach the same one.

Run ``python -m agentgym.envs.bfcl.fidelity --help``; tests in
``tests/envs/bfcl/test_bfcl_fidelity.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import functools
import io
import json
import random
import sys
import time
import types
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.envs.bfcl import data, scoring
from agentgym.envs.bfcl.perturb import Reply, Script, scripts_for
from agentgym.fidelity import Comparison, StepRecord, summarize, summary_line
from agentgym.fidelity import compare as compare_steps
from agentgym.fidelity import table as fidelity_table
from agentgym.types import Message

FAMILY = "bfcl"
END_TURN = "Done."
"""The text reply a script ends a turn with (and what either side gets past the script)."""


@dataclass(frozen=True)
class View:
    """What the model was shown before one reply.

    Attributes:
        messages: The new messages since its last reply, as ``(role, content)``.
        tools: The tools offered, as canonical JSON of their OpenAI form.
    """

    messages: tuple[tuple[str, str], ...]
    tools: tuple[str, ...]


@dataclass(frozen=True)
class Trace:
    """One side's run of a script.

    Attributes:
        views: What the model saw before each reply.
        replies: Replies the episode took (past the script, ``END_TURN`` each).
        passed: The verdict.
        error_type: BFCL's error type when it fails.
    """

    views: tuple[View, ...]
    replies: int
    passed: bool
    error_type: str | None


@dataclass(frozen=True)
class Case:
    """One entry and one script: ``kind`` names the perturbation (``gold`` for none)."""

    task_id: str
    category: str
    kind: str
    script: Script


@dataclass(frozen=True)
class Outcome:
    """Both runs of a case and their comparison.

    Attributes:
        case: The case.
        bfcl: BFCL's own run.
        env: The agentgym env's run.
        comparison: The step-by-step comparison (:func:`agentgym.fidelity.compare`).
    """

    case: Case
    bfcl: Trace
    env: Trace
    comparison: Comparison

    @property
    def agree(self) -> bool:
        """Both runs showed the same, took the same replies and reached the same verdict."""
        return self.comparison.agree

    @property
    def differences(self) -> tuple[str, ...]:
        """Each difference in words (empty when they agree)."""
        return tuple(str(m) for m in self.comparison.mismatches)


# -- BFCL's side ---------------------------------------------------------------------------

@functools.cache
def _bfcl_runner() -> types.SimpleNamespace:
    """BFCL's OpenAI FC handler (scripted) and eval runner, imported once.

    The eval runner imports BFCL's model registry (every provider SDK) for names it does not
    use here; like :func:`.scoring.bfcl`, it gets a one-entry stand-in while it is imported.
    """
    scoring.bfcl()  # first: the AST checker must hold the scoring profile's mapping
    config = "bfcl_eval.constants.model_config"
    standin = config not in sys.modules
    if standin:
        module = types.ModuleType(config)
        module.MODEL_CONFIG_MAPPING = {}  # type: ignore[attr-defined]
        sys.modules[config] = module
    try:
        from bfcl_eval.constants.enums import Language, ReturnFormat
        from bfcl_eval.eval_checker import eval_runner
        from bfcl_eval.model_handler.api_inference.openai_completion import (
            OpenAICompletionsHandler,
        )
    finally:
        if standin:
            sys.modules.pop(config, None)
    from openai.types.chat import ChatCompletion

    class ScriptedHandler(OpenAICompletionsHandler):
        """BFCL's OpenAI FC handler whose API answers from a script and records each query."""

        def __init__(self, replies: Script, name: str) -> None:
            super().__init__(model_name=name, temperature=0.0, registry_name=f"{name}-FC",
                             is_fc_model=True)
            self.script = list(replies)
            self.queries: list[tuple[list[Any], list[dict[str, Any]]]] = []

        def _build_client_kwargs(self) -> dict[str, Any]:  # never called: no network
            return {"api_key": "unused", "base_url": "http://127.0.0.1:9/v1"}

        def generate_with_backoff(self, **kwargs: Any) -> tuple[Any, float]:
            self.queries.append((list(kwargs["messages"]), list(kwargs.get("tools", []))))
            reply = self.script[len(self.queries) - 1] if len(self.queries) <= len(
                self.script) else END_TURN
            return ChatCompletion.model_validate(_completion(reply)), 0.0

    return types.SimpleNamespace(Handler=ScriptedHandler, eval_runner=eval_runner,
                                 Language=Language, ReturnFormat=ReturnFormat)


def _completion(reply: Reply) -> dict[str, Any]:
    """An OpenAI chat completion answering ``reply``."""
    if isinstance(reply, str):
        message: dict[str, Any] = {"role": "assistant", "content": reply}
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(reply)]}
    return {"id": "scripted", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


def _tool_key(tool: Any) -> str:
    """A tool's OpenAI form as canonical JSON (name, description, parameters)."""
    function = tool["function"] if "function" in tool else tool
    return json.dumps({k: function.get(k) for k in ("name", "description", "parameters")},
                      sort_keys=True)


def _bfcl_views(queries: list[tuple[list[Any], list[dict[str, Any]]]]) -> tuple[View, ...]:
    """The handler's queries as views: messages added since the previous query.

    The assistant's own replies (objects, not dicts, in BFCL's history) are left out.
    """
    views, seen = [], 0
    for messages, tools in queries:
        new = [(str(m["role"]), str(m.get("content") or "")) for m in messages[seen:]
               if isinstance(m, dict)]
        views.append(View(tuple(new), tuple(sorted(_tool_key(t) for t in tools))))
        seen = len(messages)
    return tuple(views)


def _forget(prefix: str) -> None:
    """Drop the API instances a run left in BFCL's executor globals."""
    namespace = vars(scoring.bfcl().multi_turn_utils)
    for key in [k for k in list(namespace) if k.startswith(prefix)]:  # see scoring._forget
        namespace.pop(key, None)


def bfcl_run(task: data.BFCLTask, script: Script) -> Trace:
    """BFCL's own inference loop and eval runner on ``script`` (see the module docstring)."""
    r = _bfcl_runner()
    name = f"fidelity_{uuid.uuid4().hex}"
    handler = r.Handler(script, name)
    entry = copy.deepcopy(task.entry)
    try:  # BFCL's loop prints every step: kept off this process's output
        with scoring.isolated_numerics(), contextlib.redirect_stdout(io.StringIO()):
            if task.category.kind == "multi_turn":
                responses, _ = handler.inference_multi_turn_FC(entry, False, True)
                result = r.eval_runner._evaluate_single_multi_turn_entry(
                    handler, task.id, _through_json(responses), copy.deepcopy(task.ground_truth),
                    copy.deepcopy(task.entry), f"{name}_eval", task.category.name)
                error_type = (result.get("error") or {}).get("error_type")
            else:
                responses, _ = handler.inference_single_turn_FC(entry, False)
                result = _score_single(r, handler, task, _through_json(responses))
                error_type = result.get("error_type")
    finally:
        _forget(name)
    return Trace(_bfcl_views(handler.queries), len(handler.queries), bool(result["valid"]),
                 None if result["valid"] else error_type)


def _through_json(value: Any) -> Any:
    """As BFCL's result file hands it to the eval runner."""
    return json.loads(json.dumps(value))


def _score_single(r: types.SimpleNamespace, handler: Any, task: data.BFCLTask,
                  responses: Any) -> dict[str, Any]:
    prompt = copy.deepcopy(task.entry)
    if task.category.kind in ("irrelevance", "relevance"):
        return r.eval_runner._evaluate_single_relevance_entry(
            handler, task.id, responses, prompt, scoring.SCORER_PROFILE, task.category.name)
    return r.eval_runner._evaluate_single_ast_entry(
        handler, task.id, responses, copy.deepcopy(task.ground_truth), prompt,
        scoring.SCORER_PROFILE, task.category.name, language=r.Language.PYTHON,
        return_format=r.ReturnFormat.PYTHON, has_tool_call_tag=False)


# -- agentgym's side -----------------------------------------------------------------------

def _action(reply: Reply, step: int) -> Message:
    if isinstance(reply, str):
        return Message("assistant", reply)
    from agentgym.types import ToolCall

    return Message("assistant", "", tool_calls=tuple(
        ToolCall(f"call_{step}_{i}", name, args) for i, (name, args) in enumerate(reply)))


def _env_view(observation: Sequence[Message], tools: Sequence[Any]) -> View:
    return View(tuple((m.role, m.content) for m in observation),
                tuple(sorted(_tool_key(t.to_openai()) for t in tools)))


async def env_run(task: data.BFCLTask, script: Script) -> Trace:
    """The agentgym env (default kwargs) on ``script``; see the module docstring."""
    import agentgym

    env_id = "bfcl/MultiTurn-v0" if task.category.kind == "multi_turn" else "bfcl/SingleTurn-v0"
    env = agentgym.make(env_id, category=task.category.name)
    try:
        observation, _ = await env.reset(options={"task_id": task.id})
        views, step = [], 0
        while True:
            views.append(_env_view(observation, env.tools))
            reply = script[step] if step < len(script) else END_TURN
            result = await env.step(_action(reply, step))
            step += 1
            if result.done:
                break
            observation = result.observation
        verdict = result.info.get("bfcl") or {}
        passed = result.reward == 1.0
        return Trace(tuple(views), step, passed, None if passed else verdict.get("error_type"))
    finally:
        await env.aclose()


# -- both ----------------------------------------------------------------------------------

def records(trace: Trace, script: Script) -> list[StepRecord]:
    """A run as steps: the reset, then one per reply.

    A step's observation is what the model was shown next (its new messages as ``role:
    content`` lines, then the tools offered); the last step's is the verdict (``passed`` or
    BFCL's error type), in place of the env's closing message, which BFCL has no counterpart
    for. The reward is the verdict on the last step, None before.
    """
    def shown(view: View) -> str:
        lines = [f"{role}: {content}" for role, content in view.messages]
        return "\n".join(lines) + "\ntools: " + json.dumps([json.loads(t) for t in view.tools],
                                                            sort_keys=True)

    out = [StepRecord("(reset)", shown(trace.views[0]) if trace.views else "", None, None,
                      False, False)]
    for i in range(trace.replies):
        reply = script[i] if i < len(script) else END_TURN
        last = i == trace.replies - 1
        observation = ("verdict: " + ("passed" if trace.passed else str(trace.error_type))
                       if last else shown(trace.views[i + 1]) if i + 1 < len(trace.views) else "")
        out.append(StepRecord(_reply_text(reply), observation,
                              float(trace.passed) if last else None, None, last, False))
    return out


def _reply_text(reply: Reply) -> str:
    if isinstance(reply, str):
        return reply
    return "; ".join(f"{name}({json.dumps(args, sort_keys=True)})" for name, args in reply)


def outcome(case: Case, bfcl: Trace, env: Trace) -> Outcome:
    """Compare the two runs of a case step by step."""
    return Outcome(case, bfcl, env, compare_steps(
        FAMILY, case.category, f"{case.task_id} [{case.kind}]", records(bfcl, case.script),
        records(env, case.script), reference_success=bfcl.passed, agentgym_success=env.passed))


def cases(categories: Sequence[str], per_category: int | None, seed: int) -> list[Case]:
    """Cases: ``per_category`` random entries per category (None: all), every script each.

    The scripts are those of :func:`.perturb.scripts_for`.
    """
    rng = random.Random(seed)
    out = []
    for name in categories:
        ids = data.task_ids(name)
        chosen = ids if per_category is None else sorted(
            rng.sample(ids, min(per_category, len(ids))), key=ids.index)
        for task_id in chosen:
            task = data.get_task(name, task_id=task_id)
            for kind, script in scripts_for(task, random.Random(f"{seed}:{task_id}")):
                out.append(Case(task_id, name, kind, script))
    return out


async def compare(all_cases: Sequence[Case], concurrency: int | None = None) -> list[Outcome]:
    """Run every case on both sides.

    The env runs up to ``concurrency`` episodes at once (default: the rollout default).
    """
    from agentgym.rollout import RolloutConfig

    limit = asyncio.Semaphore(concurrency or RolloutConfig().concurrency)
    tasks = {(c.category, c.task_id): data.get_task(c.category, task_id=c.task_id)
             for c in all_cases}
    # BFCL's side first, in this thread: its handler runs the process's MathAPI as BFCL does
    references = [bfcl_run(tasks[(c.category, c.task_id)], c.script) for c in all_cases]

    async def one(case: Case) -> Trace:
        async with limit:
            return await env_run(tasks[(case.category, case.task_id)], case.script)

    envs = await asyncio.gather(*(one(c) for c in all_cases))
    return [outcome(c, ref, got) for c, ref, got in zip(all_cases, references, envs, strict=True)]


def summary(outcomes: Sequence[Outcome]) -> str:
    """One line: cases, categories, agreement, successes on each side."""
    return summary_line(FAMILY, [o.comparison for o in outcomes])


def table(outcomes: Sequence[Outcome]) -> str:
    """Markdown table per category: cases, agreeing, BFCL's and the env's successes."""
    return fidelity_table(summarize([o.comparison for o in outcomes]))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the check, print the table, the differences and a summary line."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.envs.bfcl.fidelity",
        description="Replay BFCL's ground truth and perturbations of it through BFCL's own "
                    "inference loop and eval runner and through the agentgym envs; compare.")
    parser.add_argument("--categories", nargs="*", default=list(data.CATEGORIES),
                        help="BFCL categories (default: every supported one)")
    parser.add_argument("--per-category", type=int, default=20,
                        help="random entries per category (0: every entry)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    chosen = cases(args.categories, args.per_category or None, args.seed)
    outcomes = asyncio.run(compare(chosen))
    print(table(outcomes))
    kinds = Counter(o.case.kind for o in outcomes)
    print("scripts: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for o in outcomes:
        if not o.agree:
            print(f"DIFFERS {o.case.task_id} [{o.case.kind}]: " + "; ".join(o.differences))
    print(f"{summary(outcomes)} ({time.perf_counter() - start:.0f} s)")
    return 0 if all(o.agree for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
