"""Run a suite with the rollout engine: resumable, streamed to JSONL, summarized.

:func:`run_suite` is the async core (the trainer calls it with its own agent);
:func:`evaluate` is what ``agentgym eval`` runs: it resolves the suite, checks the output
folder against what it holds, builds the policy (and checks a server answers before any
episode starts), runs what is missing, and writes ``results.json`` plus the report.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import agentgym
from agentgym.errors import ConfigError
from agentgym.evaluation.inputs import check_output_dir, check_policy_spec
from agentgym.evaluation.metrics import episode_key, group_id, summarize_by_entry
from agentgym.evaluation.results import RESULTS_FILE, load_results, repair_results
from agentgym.evaluation.suites import MAX_SEED, Suite, SuiteEntry, get_suite
from agentgym.files import atomic_write
from agentgym.jsonl import TrajectoryWriter
from agentgym.policies.constrained import check_spec
from agentgym.rollout import Agent, RolloutConfig, run_groups
from agentgym.types import Trajectory

MAX_CONCURRENCY = 100_000
"""Most episodes in flight per entry (each holds an env; more only exhausts memory)."""
MANIFEST_FILE = "manifest.json"
TIMING_FILE = "timing.json"
"""Wall time spent on an eval folder so far, updated as episodes finish."""


@dataclass(frozen=True)
class EvalConfig:
    """An ``agentgym eval`` run."""

    suite: str
    """Suite name (``agentgym eval --list``) or a suite YAML file."""
    policy: str
    """Policy spec, as for ``agentgym rollout``: random, scripted, smollm2, hf:PATH, ..."""
    k: int = 1
    """The k of pass@k / avg@k; each task gets at least k rollouts."""
    seed: int = 0
    """Seeds the policy's sampling (and the random policy)."""
    temperature: float | None = None
    """Sampling temperature; None = greedy (0) with one rollout per task, else 1.0."""
    max_tokens: int = 256
    """Most tokens per policy call."""
    constrain_tool_calls: bool = False
    """Sample each ``<tool_call>`` block from a grammar of the offered tools (vllm: only)."""
    tasks: int | None = None
    """At most this many tasks per entry (None = the suite's count)."""
    concurrency: int = 16
    """Episodes in flight per entry."""
    model: str | None = None
    """Served model name for openai: policies."""
    context: str = "full"
    """Context manager: full | window."""
    history_length: int = 2
    """K for the window context."""
    step_timeout: float | None = None
    """Seconds per policy call or env step before the episode is an error (None = no limit
    for in-process models, 300 s for a server: :mod:`agentgym.policies.limits`)."""
    retries: int = 1
    """Times an error episode is run again before it is recorded as an error."""
    max_turns: int | None = None
    """At most this many turns per episode (None = each env's own limit); for quick runs."""
    rerun_errors: bool = False
    """On resume, run again the episodes an earlier run recorded as errors (by default they
    are kept: counted as errors, not run a second time)."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.tasks is not None and self.tasks < 1:
            raise ConfigError(f"--tasks must be >= 1, got {self.tasks}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"--concurrency (episodes in flight per env) must be in [1, "
                              f"{MAX_CONCURRENCY:,}], got {self.concurrency}")
        if not 0 <= self.retries <= 100:
            raise ConfigError(f"--retries must be in [0, 100] (0 = no second attempt), got "
                              f"{self.retries}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"--max-turns must be >= 1 (leave it out for each env's own "
                              f"limit), got {self.max_turns}")
        if self.step_timeout is not None and not 0 < self.step_timeout < float("inf"):
            raise ConfigError(f"--step-timeout must be a number of seconds > 0, got "
                              f"{self.step_timeout}; leave it out for the default")
        if not 0 <= self.seed < MAX_SEED:
            raise ConfigError(f"--seed must be in [0, 2**63), got {self.seed}")
        if self.history_length < 1:
            raise ConfigError(f"history_length must be >= 1, got {self.history_length}")
        if self.constrain_tool_calls:
            check_spec(self.policy)

    def resolved_temperature(self, suite: Suite) -> float:
        """The temperature actually used (greedy when every task has one rollout)."""
        if self.temperature is not None:
            return self.temperature
        return 0.0 if all(e.rollouts == 1 for e in suite.entries) else 1.0


def _jobs(suite: Suite, done: set[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """Per entry, the ``(seed, rollout)`` pairs not yet in ``done``."""
    return {e.name: [(s, r) for s in e.seeds for r in range(e.rollouts)
                     if (e.name, s, r) not in done] for e in suite.entries}


async def run_suite(suite: Suite, agent: Agent, out_dir: str | Path | None = None, *,
                    concurrency: int = 16, step_timeout: float | None = 300.0, retries: int = 1,
                    episode_timeout: float | None = 1800.0, rerun_errors: bool = True,
                    on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Run every missing episode of a resolved suite; returns all of them (old and new).

    Args:
        suite: A resolved suite (:func:`get_suite`).
        agent: The agent (an ``LMAgent`` or a model-free policy).
        out_dir: Where ``results.jsonl`` is appended; episodes already there are skipped
            (error ones are run again). None keeps everything in memory.
        concurrency: Episodes in flight per entry.
        step_timeout: Seconds per policy call or env step.
        episode_timeout: Seconds per episode.
        rerun_errors: Run again the error episodes already in ``out_dir`` (else they stay).
        retries: Extra attempts for an episode that ended in error.
        on_done: Called with each finished trajectory.

    Returns:
        One trajectory per ``(entry, seed, rollout)``, the latest attempt of each.
    """
    path = Path(out_dir) / RESULTS_FILE if out_dir is not None else None
    results: dict[tuple[str, int, int], Trajectory] = {}
    if path is not None:
        results = {episode_key(t): t for t in load_results(path).trajectories}
    writer = TrajectoryWriter(path, append=True) if path is not None else None
    entries = {e.name: e for e in suite.entries}
    config = RolloutConfig(concurrency=concurrency, step_timeout=step_timeout,
                           episode_timeout=episode_timeout)
    kept = set() if rerun_errors else {k for k, t in results.items() if not t.scorable}
    try:
        for _attempt in range(retries + 1):
            done = {key for key, t in results.items() if t.scorable or key in kept}
            jobs = {name: js for name, js in _jobs(suite, done).items() if js}
            if not jobs:
                break
            await asyncio.gather(*(
                _run_entry(entries[name], js, agent, config, results, writer, on_done)
                for name, js in jobs.items()))
    finally:
        if writer is not None:
            writer.close()
    order = {e.name: i for i, e in enumerate(suite.entries)}
    return sorted((t for key, t in results.items() if key[0] in order),
                  key=lambda t: (order[episode_key(t)[0]], episode_key(t)[1:]))


async def _run_entry(entry: SuiteEntry, jobs: list[tuple[int, int]], agent: Agent,
                     config: RolloutConfig, results: dict[tuple[str, int, int], Trajectory],
                     writer: TrajectoryWriter | None,
                     on_done: Callable[[Trajectory], None] | None) -> None:
    # Rollouts of one seed are exchangeable: each finished one takes the next free index.
    free: dict[int, list[int]] = {}
    for seed, r in jobs:
        free.setdefault(seed, []).append(r)
    kwargs = entry.make_kwargs()

    def done(traj: Trajectory) -> None:
        seed = int(traj.seed or 0)
        rollout = free[seed].pop(0)
        traj = replace(traj, group_id=group_id(entry.name, seed),
                       metrics={**traj.metrics, "rollout": float(rollout)})
        results[(entry.name, seed, rollout)] = traj
        if writer is not None:
            writer.write(traj)
        if on_done is not None:
            on_done(traj)

    await run_groups(lambda: agentgym.make(entry.env, **kwargs), agent,
                     [seed for seed, _ in jobs], config, env_id=entry.env, on_done=done)


def prepare_out_dir(out_dir: Path, manifest: dict[str, Any]) -> bool:
    """Check ``out_dir`` holds nothing or an eval with the same manifest; write it.

    Returns:
        Whether earlier results are there to resume from.

    Raises:
        ConfigError: The folder holds an eval of another suite, policy or setting.
    """
    path = out_dir / MANIFEST_FILE
    theirs = [n for n in (RESULTS_FILE, "results.json", "report.md", TIMING_FILE)
              if (out_dir / n).exists()]
    if theirs and not path.exists():
        raise ConfigError(f"--out {str(out_dir)!r} holds {', '.join(theirs)} but no "
                          f"{MANIFEST_FILE}: not an eval this command can resume, and it would "
                          "write over those files; choose a new --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    if path.exists():
        try:
            old = json.loads(path.read_bytes())
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ConfigError(f"{path} is damaged (not JSON), so the eval in {out_dir} cannot "
                              "be resumed safely; choose a new --out folder") from None
        if not isinstance(old, dict):
            raise ConfigError(f"{path} is not an eval manifest (a JSON object); choose a new "
                              "--out folder")
        if old != manifest:
            diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
            raise ConfigError(
                f"{out_dir} holds an eval with different settings ({', '.join(diff)}); pass "
                "the same arguments to resume it, or choose a new --out folder")
    else:
        atomic_write(path, json.dumps(manifest, indent=2))
    return (out_dir / RESULTS_FILE).exists()


def evaluate(config: EvalConfig, out_dir: str | Path, *, log: Callable[[str], None] = print,
             progress: Any = None) -> dict[str, Any]:
    """Run ``config`` into ``out_dir`` (resuming what is there) and write the report.

    Returns:
        The ``results.json`` content: manifest, per-entry and overall metrics, wall time.
    """
    out_dir = Path(out_dir)
    check_output_dir(out_dir, "--out")
    check_policy_spec(config.policy)  # a folder that is no model: now, not mid-load
    suite = get_suite(config.suite).with_overrides(tasks=config.tasks, min_rollouts=config.k,
                                                   max_turns=config.max_turns)
    for entry in suite.entries:  # bad kwargs fail here, before a model loads
        asyncio.run(agentgym.make(entry.env, **entry.make_kwargs()).aclose())
    temperature = config.resolved_temperature(suite)
    manifest = {"suite": suite.to_dict(), "policy": config.policy, "model": config.model,
                "k": config.k, "seed": config.seed, "temperature": temperature,
                "max_tokens": config.max_tokens, "context": config.context,
                "history_length": config.history_length}
    if config.constrain_tool_calls:  # only when set: folders from before the option resume
        manifest["constrain_tool_calls"] = True
    resuming = prepare_out_dir(out_dir, manifest)
    if resuming:
        loaded = load_results(out_dir / RESULTS_FILE)
        for problem in loaded.problems:
            log(f"warning: {out_dir / RESULTS_FILE} {problem}; that line is dropped")
        backup = repair_results(out_dir / RESULTS_FILE, loaded)
        if backup is not None:
            log(f"kept {len(loaded.valid_lines)} valid lines; the original file is at {backup}")
        errors = sum(not t.scorable for t in loaded.trajectories)
        if not config.rerun_errors and errors:
            log(f"resuming: {len(loaded.trajectories)} episodes already in {out_dir}, "
                f"{errors} of them errors that are kept (--rerun-errors runs them again)")
        else:
            log(f"resuming: {len(loaded.trajectories) - errors} episodes already in {out_dir}"
                + (f"; {errors} that ended in error run again" if errors else ""))
    from agentgym.evaluation.report import require_plots, write_report

    require_plots()  # the report needs matplotlib: say so now, not after the episodes
    agent = _make_agent(config, temperature)
    total = sum(len(e.seeds) * e.rollouts for e in suite.entries)
    previous, start = _previous_wall(out_dir), time.perf_counter()

    def clock() -> None:  # wall time so far, kept on disk: an interrupted run still counts
        atomic_write(out_dir / TIMING_FILE, json.dumps(
            {"wall_s": previous + time.perf_counter() - start}))

    trajs = asyncio.run(_run_with_policy(suite, agent, out_dir, config, total, progress,
                                         clock))
    wall_s = time.perf_counter() - start
    clock()
    results = {**manifest, "suite_tag": suite.tag,
               "metrics": summarize_by_entry(trajs, [e.name for e in suite.entries], config.k),
               "wall_s": previous + wall_s, "wall_s_this_run": wall_s,
               "config": asdict(config)}
    write_report(results, out_dir)
    return results


def _previous_wall(out_dir: Path) -> float:
    """Seconds earlier runs into ``out_dir`` took (finished or interrupted)."""
    for name in (TIMING_FILE, "results.json"):
        path = out_dir / name
        if path.exists():
            try:
                return float(json.loads(path.read_text(encoding="utf-8")).get("wall_s", 0.0))
            except (ValueError, AttributeError):
                continue
    return 0.0


def _make_agent(config: EvalConfig, temperature: float) -> Any:
    from agentgym.context import ContextConfig
    from agentgym.policies import SamplingParams, make_agent

    sampling = SamplingParams(temperature=temperature, max_tokens=config.max_tokens,
                              seed=config.seed, constrain_tool_calls=config.constrain_tool_calls)
    ctx = ContextConfig(mode=config.context, history_length=config.history_length)  # type: ignore[arg-type]
    return make_agent(config.policy, seed=config.seed, sampling=sampling, context=ctx,
                      model=config.model)


async def _run_with_policy(suite: Suite, agent: Any, out_dir: Path, config: EvalConfig,
                           total: int, progress: Any, clock: Callable[[], None]
                           ) -> list[Trajectory]:
    from agentgym.policies.limits import default_timeouts

    backend = getattr(agent, "policy", None)
    step_s, episode_s = default_timeouts(agent, config.step_timeout)
    task = None
    if progress is not None:
        recorded = load_results(out_dir / RESULTS_FILE).trajectories
        already = sum(t.scorable or not config.rerun_errors for t in recorded)
        task = progress.add_task(f"eval {suite.name} · {config.policy}", total=total,
                                 completed=already)

    def done(_traj: Trajectory) -> None:
        clock()
        if task is not None and progress is not None:
            progress.advance(task)

    try:
        check = getattr(backend, "check", None)
        if check is not None:  # a dead endpoint: one clear error before any episode
            await check()
        return await run_suite(
            suite, agent, out_dir, concurrency=config.concurrency, step_timeout=step_s,
            episode_timeout=episode_s, retries=config.retries,
            rerun_errors=config.rerun_errors, on_done=done)
    finally:
        if backend is not None and hasattr(backend, "aclose"):
            await backend.aclose()
