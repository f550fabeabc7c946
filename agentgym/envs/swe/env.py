"""SWE: fix a bug in a real repository, judged by its tests run in a sandbox.

An episode: the agent reads an issue, explores and edits the repository with ``bash`` and
``editor``, and calls ``submit``. The submit step runs the hidden tests
(:mod:`agentgym.envs.swe.evaluation`) and ends the episode with reward 1.0 when the patch
resolves the task (every FAIL_TO_PASS and PASS_TO_PASS test passes), else 0.0; earlier
steps are not scored (``None``). An episode cut off by the turn limit never submits.

The submit step's info carries what the G-RA SWE encoding
(``agentgym.envs.swe.rewards.swe_components``, spec §6) needs — ``submitted``,
``patch_empty``, ``resolved`` — so ``algorithm.reward_accumulation=gated`` scores no
submit / empty patch / failing patch / resolved as −1 / −0.5 / 0 / +1, gating the per-turn
±0.1 for valid / malformed turns (``info["valid"]``: every tool call parsed and ran; a
command that merely exits non-zero is a valid turn, one that ran past its time limit is
not). The trainer logs completion, modification and resolve rates from the same keys, which
every step reports (``submitted=False`` until the submit step).

``state_key`` hashes the task, the working-tree diff and the last tool call, so two
rollouts that reached the same code by different routes, then ran the same command, share
a key (GiGPO/HGPO/SALT group on it). Sandboxes: a registered provider
(:mod:`agentgym.sandboxes.providers`: ``"local"``, subprocesses, not isolation, for
development; ``"docker"``, containers from the warm pool) or a callable ``task -> Sandbox``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from agentgym.env import BaseEnv
from agentgym.envs.swe.edits import patch_edits
from agentgym.envs.swe.evaluation import Evaluation, evaluate, heredoc
from agentgym.envs.swe.task import (
    SPLITS,
    SWETask,
    load_tasks,
    real_tasks,
    select_split,
    shipped_tasks,
)
from agentgym.envs.swe.tools import Workspace, bash, editor, submit
from agentgym.errors import ConfigError
from agentgym.sandboxes.base import Sandbox, SandboxError
from agentgym.sandboxes.local import GIT_IDENTITY
from agentgym.sandboxes.providers import get_provider, provider_names
from agentgym.task_data import is_data_source
from agentgym.tools import ToolBox, tool
from agentgym.types import Message, StepResult, ToolCall

SandboxFactory = Callable[[SWETask], "Sandbox | Awaitable[Sandbox]"]
_EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n"
_MUTATING = {"bash", "editor"}

PROMPT = """You are fixing an issue in the repository in your working directory ({workdir}).

<issue>
{issue}
</issue>

Find the cause, change the source code so the issue is resolved, and check your fix (for
example by writing and running a small script, or by running the existing tests with
`python -m pytest -q`). Do not modify the existing tests. Use paths relative to the
repository root. Tools:
- bash(command): run a shell command at the repository root.
- editor(command, path, ...): view, create, str_replace, insert or undo_edit a file.
- submit(): submit your changes when you are done; this ends the episode.
Call one tool per turn, for example:
<tool_call>{{"name": "bash", "arguments": {{"command": "ls"}}}}</tool_call>"""


class SWEEnv(BaseEnv):
    """Bug-fix tasks in a sandbox, judged by tests; see the module docstring.

    Args:
        split: ``train``, ``test`` or ``all`` tasks (tasks without a split are in each).
        tasks: ``None`` for the shipped tasks, ``"real"`` for the tasks mined from real
            packages (Docker only), a SWE-bench-style JSON, JSONL, CSV or Parquet path, a
            ``datasets.Dataset`` of instances (:mod:`agentgym.task_data`), or tasks.
        sandbox: ``"local"``, ``"docker"``, or a callable ``task -> Sandbox`` (may be async).
        image: Docker image for tasks that name none: for a task file, the image holding
            each repository (``{instance_id}`` is filled in); for the shipped tasks, the
            image their repository is copied into (default: the agentgym base image).
        command_timeout: Seconds one ``bash`` command may run.
        test_timeout: Seconds the tests may run at submission.
        max_output_chars: Longer tool output keeps its head and tail.
        task_ids: Only these instance ids (after the split filter), e.g. a quick subset.
        pool_size: Warm containers per image in the process's Docker pool (``docker`` only;
            about the number of episodes run at once).
        expert: How :meth:`expert_action` applies the reference patch: ``"patch"``, one
            ``git apply`` of the whole diff; ``"editor"``, one ``editor`` call per hunk
            (:mod:`agentgym.envs.swe.edits`), shorter demonstrations in the tool a model
            edits with.

    Example:
        >>> import asyncio, agentgym
        >>> async def main():
        ...     async with agentgym.make("agentgym/SWE-v0", split="test") as env:
        ...         await env.reset(seed=0)
        ...         while not (result := await env.step(env.expert_action())).done:
        ...             pass
        ...         return result.reward, result.info["resolved"]
        >>> asyncio.run(main())
        (1.0, True)
    """

    def __init__(self, split: Literal["train", "test", "all"] = "train",
                 tasks: str | Path | Sequence[SWETask] | Any | None = None,
                 sandbox: str | SandboxFactory = "local", image: str | None = None,
                 command_timeout: float = 60.0, test_timeout: float = 300.0,
                 max_output_chars: int = 6000, task_ids: Sequence[str] | None = None,
                 pool_size: int = 2, expert: Literal["patch", "editor"] = "patch") -> None:
        super().__init__()
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        if expert not in ("patch", "editor"):
            raise ConfigError(f"expert must be 'patch' (git apply) or 'editor' (one "
                              f"str_replace per hunk), got {expert!r}")
        if not callable(sandbox):
            if not isinstance(sandbox, str):
                raise ConfigError(f"sandbox must be a provider name ({', '.join(provider_names())})"
                                  f" or a callable task -> Sandbox, got {sandbox!r}")
            get_provider(sandbox)  # an unknown name fails here, with a did-you-mean
        if command_timeout <= 0 or test_timeout <= 0:
            raise ConfigError(f"timeouts must be positive, got command_timeout="
                              f"{command_timeout} and test_timeout={test_timeout}")
        every = shipped_tasks() if tasks is None else real_tasks() if (
            isinstance(tasks, str) and tasks == "real") else (
            load_tasks(tasks, image=image) if is_data_source(tasks)
            else list(cast("Sequence[SWETask]", tasks)))  # not a path or dataset: the tasks
        chosen = select_split(every, split)
        if task_ids is not None:
            known = {t.instance_id: t for t in chosen}
            missing = [i for i in task_ids if i not in known]
            if missing:
                raise ConfigError(f"task_ids {missing} are not in split {split!r}; it has "
                                  f"{sorted(known)}")
            chosen = [known[i] for i in task_ids]
        if not chosen:
            raise ConfigError(f"no tasks in split {split!r}; use split='all' or give tasks")
        self.tasks: tuple[SWETask, ...] = tuple(chosen)
        self.sandbox_kind = sandbox
        self.image = image
        self.command_timeout, self.test_timeout = float(command_timeout), float(test_timeout)
        self.max_output_chars = max_output_chars
        self.pool_size = pool_size
        self.expert = expert
        self.toolbox = ToolBox([tool(bash, timeout=command_timeout + 30), tool(editor, timeout=120),
                                tool(submit, timeout=120)], max_output_chars=max_output_chars + 500)
        self.tools = self.toolbox.specs
        self.task: SWETask | None = None
        self.sandbox: Sandbox | None = None
        self.workspace: Workspace | None = None
        self.evaluation: Evaluation | None = None
        self._diff = ""
        self._last_call = ""
        self._oracle: list[ToolCall] | None = None  # the oracle's edit calls, by turn

    # -- episode ----------------------------------------------------------------------
    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[Sequence[Message], dict[str, Any]]:
        task = self._select(seed, options)
        await self._release()  # a new episode never sees the last one's sandbox
        self.sandbox = await self._open(task)
        await self._prepare(task)
        self.task, self.evaluation = task, None
        self.workspace = Workspace(self.sandbox, task.workdir, self.command_timeout,
                                   self.max_output_chars, dict(task.env))
        self._diff, self._last_call, self._oracle = "", "", None
        prompt = PROMPT.format(workdir=task.workdir, issue=task.problem_statement.strip())
        return [Message("user", prompt)], {"task_id": task.instance_id}

    def _select(self, seed: int | None, options: Mapping[str, Any]) -> SWETask:
        if "task_id" in options:
            for task in self.tasks:
                if task.instance_id == options["task_id"]:
                    return task
            raise ConfigError(f"reset(options={{'task_id': {options['task_id']!r}}}): no such "
                              f"task; this env has {[t.instance_id for t in self.tasks]}")
        index = seed if seed is not None else int(self.np_random.integers(len(self.tasks)))
        return self.tasks[index % len(self.tasks)]

    async def _open(self, task: SWETask) -> Sandbox:
        if callable(self.sandbox_kind):
            box = self.sandbox_kind(task)
            return await box if inspect.isawaitable(box) else box
        from agentgym.envs.swe.docker import open_task_sandbox

        try:
            return await open_task_sandbox(self.sandbox_kind, task, self.image,
                                           pool_size=self.pool_size)
        except ConfigError as exc:
            raise ConfigError(f"task {task.instance_id}: {exc}") from None

    async def _prepare(self, task: SWETask) -> None:
        """Put the repository at the workdir and commit it as the base the diff is against."""
        assert self.sandbox is not None
        script = f"mkdir -p .git/info && printf %s {shlex.quote(_EXCLUDES)} >> .git/info/exclude"
        if task.repo_dir is not None or task.setup_patch:
            if task.repo_dir is not None:
                await self.sandbox.copy_in(task.repo_dir, task.workdir)
            # A setup patch (a mined bug) goes in before the one base commit, so no history
            # shows it.
            setup = ("set -e\n" + heredoc("git apply -", task.setup_patch)
                     if task.setup_patch else "")
            script = (setup + "git init -q . && " + script + " && git add -A && "
                      "git commit -q --no-verify -m base")
        result = await self.sandbox.exec(script, timeout=120, workdir=task.workdir,
                                         env=dict(GIT_IDENTITY))
        if not result.ok:
            raise SandboxError(f"task {task.instance_id}: could not prepare the repository at "
                               f"{task.workdir}: {(result.stderr or result.stdout)[-500:]}")

    async def _step(self, action: Message) -> StepResult:
        assert self.workspace is not None and self.task is not None
        ws = self.workspace
        outcome = await self.toolbox.run(action, state=ws)
        if ws.fault is not None:  # the sandbox failed, not the agent: an error trajectory
            raise ws.fault
        info: dict[str, Any] = {"valid": outcome.valid}
        if outcome.calls:
            last = outcome.calls[-1]
            self._last_call = json.dumps([last.name, dict(last.arguments)], sort_keys=True)
        if ws.submitted:
            assert ws.patch is not None and self.sandbox is not None
            self.evaluation = await evaluate(self.sandbox, self.task, ws.patch,
                                             timeout=self.test_timeout)
            info.update(self.evaluation.info(self.task))
            return StepResult(outcome.messages, 1.0 if self.evaluation.resolved else 0.0,
                              terminated=True, info=info)
        if any(c.name in _MUTATING for c in outcome.calls):
            self._diff = await self.sandbox.diff(self.task.workdir) if self.sandbox else ""
        # The outcome keys on every step, so an episode cut off by the turn limit reports
        # "no submission" and the trainer's completion/modification/resolve rates see it.
        info.update(submitted=False, resolved=False, patch_empty=not self._diff.strip())
        return StepResult(outcome.messages, None, info=info)

    def state_key(self) -> str | None:
        """Hash of the task, the working-tree diff and the last tool call."""
        if self.task is None:
            return None
        digest = hashlib.sha256("\0".join((self.task.instance_id, self._diff,
                                           self._last_call)).encode())
        return digest.hexdigest()[:16]

    def expert_action(self) -> Message:
        """The oracle: apply the reference patch (see ``expert``), then submit.

        The action for the episode's current turn: its edit calls on the first turns, then
        ``submit``.
        """
        assert self.task is not None, "call reset() before expert_action()"
        if not self.task.patch:
            raise ConfigError(f"task {self.task.instance_id} has no reference patch")
        if self._oracle is None:
            self._oracle = self._oracle_calls(self.task)
        call = (self._oracle[self.turn] if self.turn < len(self._oracle)
                else ToolCall("call_0", "submit", {}))
        return Message("assistant", "", tool_calls=(call,))

    def _oracle_calls(self, task: SWETask) -> list[ToolCall]:
        apply = [ToolCall("call_0", "bash", {"command": heredoc("git apply -", task.patch)})]
        if self.expert == "patch":
            return apply
        host = Path(task.repo_dir) if task.repo_dir and not task.setup_patch else None

        def read(path: str) -> str | None:  # the file before the patch, where the host has it
            return (host / path).read_text() if host and (host / path).is_file() else None

        try:
            return [ToolCall("call_0", "editor", args) for args in patch_edits(task.patch, read)]
        except ValueError:  # a deletion or rename: the diff itself
            return apply

    # -- lifetime ---------------------------------------------------------------------
    async def _release(self) -> None:
        box, self.sandbox, self.workspace = self.sandbox, None, None
        if box is not None:
            await box.aclose()

    async def _close(self) -> None:
        await self._release()
