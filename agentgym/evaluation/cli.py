"""The ``eval``, ``compare`` and ``view`` commands (registered on ``agentgym``'s app)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()
err = Console(stderr=True)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "policy"


def eval_command(
    suite: Annotated[str | None, typer.Option(
        help="Suite name or suite YAML file (--list shows them).")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        help="random | scripted | smollm2 | hf:PATH | vllm:PATH | openai:URL; repeat it to "
             "evaluate several checkpoints (a learning curve is plotted).")] = None,
    k: Annotated[int, typer.Option("-k", help="pass@k / avg@k; each task gets >= k rollouts."
                                   )] = 1,
    out: Annotated[Path | None, typer.Option(
        help="Output folder (default runs/eval/SUITE-POLICY); an existing one is resumed.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed of the policy.")] = 0,
    tasks: Annotated[int | None, typer.Option(
        help="At most this many tasks per env (smaller, quicker runs).")] = None,
    temperature: Annotated[float | None, typer.Option(
        help="Sampling temperature (default: greedy with one rollout per task, else 1.0).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per policy call.")] = 256,
    constrain_tool_calls: Annotated[bool, typer.Option(
        help="Sample each <tool_call> block from a grammar of the offered tools (vllm:PATH "
             "policies; docs/vllm.md).")] = False,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight per env.")] = 16,
    retries: Annotated[int, typer.Option(
        help="Times an episode that ended in error is run again.")] = 1,
    max_turns: Annotated[int | None, typer.Option(
        help="At most this many turns per episode (default: each env's limit).")] = None,
    step_timeout: Annotated[float | None, typer.Option(
        help="Seconds a policy call or env step may take before the episode is an error "
             "(default: no limit for in-process models, 300 s for a server).")] = None,
    rerun_errors: Annotated[bool, typer.Option(
        help="On resume, run again the episodes an earlier run recorded as errors.")] = False,
    model: Annotated[str | None, typer.Option(help="Model name for openai: policies.")] = None,
    train_run: Annotated[Path | None, typer.Option(
        help="A training run_dir: plot its logged evaluations as a learning curve.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the suites and exit.")] = False,
) -> None:
    """Evaluate a policy on a suite: metrics per env, pass@k, report with plots; resumable."""
    from agentgym.errors import ConfigError
    from agentgym.evaluation import report
    from agentgym.evaluation.inputs import check_output_dir, check_policy_spec
    from agentgym.evaluation.runner import EvalConfig, evaluate
    from agentgym.evaluation.suites import get_suite, suite_names

    if list_:
        _list_suites(suite_names(), get_suite)
        return
    if not policy and train_run is None:
        raise typer.BadParameter("pass --policy SPEC (or --train-run DIR for a learning curve)",
                                 param_hint="--policy")
    if policy and suite is None:
        raise typer.BadParameter("pass --suite NAME (agentgym eval --list shows them)",
                                 param_hint="--suite")
    base = out or Path("runs/eval") / _safe(f"{Path(suite or 'run').stem}-{'+'.join(policy or [])}")
    check_output_dir(base, "--out")
    if train_run is not None:
        if not (train_run / "metrics.jsonl").is_file():
            raise ConfigError(f"--train-run {str(train_run)!r} holds no metrics.jsonl; pass the "
                              "run_dir of `agentgym train`")
        report.run_curve(train_run)  # a damaged file or no evaluation: before any eval runs
    configs = [EvalConfig(suite=str(suite), policy=spec, k=k, seed=seed, tasks=tasks,
                          temperature=temperature, max_tokens=max_tokens,
                          constrain_tool_calls=constrain_tool_calls,
                          concurrency=concurrency, model=model, step_timeout=step_timeout,
                          max_turns=max_turns, retries=retries, rerun_errors=rerun_errors)
               for spec in policy or []]
    for config in configs:  # every spec checked before the first one runs
        check_policy_spec(config.policy)
    runs: list[tuple[float, dict[str, Any]]] = []
    for i, (spec, config) in enumerate(zip(policy or [], configs, strict=True)):
        folder = base if len(policy or []) == 1 else base / f"{i:02d}-{_safe(spec)}"
        from agentgym.phases import Phases, exit_interrupted

        try:
            with Phases(err) as progress:
                results = evaluate(config, folder, log=progress.note, progress=progress)
        except KeyboardInterrupt:
            exit_interrupted(err, f"the finished episodes are in {folder / 'results.jsonl'}; "
                                  "the same command resumes")
        print_results(results, folder)
        runs.append((float(i), results))
    base.mkdir(parents=True, exist_ok=True)
    if len(runs) > 1:
        path = report.learning_curve_from_evals(runs, base / "learning_curve.png")
        console.print(f"learning curve → {path}")
    if train_run is not None:
        path = report.learning_curve_from_run(train_run, base / "learning_curve.png")
        console.print(f"learning curve of {train_run} → {path}")
    if runs and (base / "results.json").exists():  # put the curve into the report
        report.write_report(json.loads((base / "results.json").read_text()), base)


def _list_suites(names: list[str], get_suite: Any) -> None:
    table = Table(title="evaluation suites")
    for col in ("suite", "version", "envs", "episodes", "requires", "description"):
        table.add_column(col)
    for name in names:
        try:
            s = get_suite(name)
        except Exception as exc:
            table.add_row(name, "", f"[red]cannot load: {exc}[/red]", "", "", "")
            continue
        table.add_row(name, str(s.version), ", ".join(e.name for e in s.entries),
                      str(sum(len(e.seeds) * e.rollouts for e in s.entries)),
                      ", ".join(s.requires) or "-", s.description)
    console.print(table)


def print_results(results: dict[str, Any], folder: Path) -> None:
    """The metrics table of one eval."""
    from agentgym.evaluation.report import columns, fmt, headline, mean_line, rows

    cols = columns(int(results.get("k", 1)))
    table = Table(title=f"{results['suite_tag']} · {results['policy']} → {folder} "
                        f"({results['wall_s']:.1f} s)")
    table.add_column("env", style="bold")
    for name, _, _ in cols:
        table.add_column(name, justify="right")
    for name, m in rows(results):
        table.add_row(name, *(fmt(m.get(key), spec) for _, key, spec in cols))
    console.print(table)
    console.print(f"overall: {headline(results)}", markup=False, highlight=False)
    for line in mean_line(results):
        console.print(line.removeprefix("- "), markup=False, highlight=False, soft_wrap=True)


def compare_command(
    run_a: Annotated[Path, typer.Argument(help="An `agentgym eval` output folder (A).")],
    run_b: Annotated[Path, typer.Argument(help="Another one (B); differences are B - A.")],
) -> None:
    """Side by side: success and mean reward of two eval runs, B - A with 95% intervals."""
    from agentgym.evaluation.compare import compare, load_run, warnings_for
    from agentgym.evaluation.report import fmt

    a, rewards_a = load_run(run_a)
    b, rewards_b = load_run(run_b)
    rows = compare(a, b, rewards_a, rewards_b)  # runs with no entry in common: refused
    for note in warnings_for(a, b):
        err.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
    table = Table(title=f"A = {run_a} ({a.get('policy')})   B = {run_b} ({b.get('policy')})",
                  caption="95% intervals: Newcombe hybrid score (success), percentile bootstrap "
                          "(reward); * excludes 0")
    for col in ("env", "success A", "success B", "B - A [95% CI]", "reward A", "reward B",
                "B - A [95% CI]"):
        table.add_column(col, justify="left" if col == "env" else "right")

    def cell(d: Any, spec: str) -> str:
        if d.diff is None:
            return "-"
        if d.low is None:
            return fmt(d.diff, spec)
        mark = " *" if d.significant else ""
        return f"{fmt(d.diff, spec)} [{fmt(d.low, spec)}, {fmt(d.high, spec)}]{mark}"

    for name, diff in rows.items():
        s, r = diff["success"], diff["reward"]
        table.add_row(name, fmt(s.a, "%"), fmt(s.b, "%"), cell(s, "+.1%"), fmt(r.a, ".3f"),
                      fmt(r.b, ".3f"), cell(r, "+.3f"))
    console.print(table)


def view_command(
    trajectories: Annotated[Path, typer.Argument(
        help="Trajectory JSONL (agentgym rollout output, or an eval's results.jsonl).")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="HTML file to write "
                                             "(default: next to the input, .html).")] = None,
    advantages: Annotated[Path | None, typer.Option(
        help="`agentgym advantages` output, to show per-step advantages.")] = None,
    limit: Annotated[int | None, typer.Option(help="Show at most this many episodes.")] = None,
) -> None:
    """Write a self-contained HTML page to browse episodes (open it in any browser)."""
    from agentgym.evaluation.viewer import write_viewer

    path = write_viewer(trajectories, out, advantages, limit)
    console.print(f"viewer → {path}  ({path.stat().st_size / 1e6:.1f} MB)")


def register_commands(app: typer.Typer) -> None:
    """Add ``eval``, ``compare`` and ``view`` to the ``agentgym`` app."""
    app.command("eval")(eval_command)
    app.command("compare")(compare_command)
    app.command("view")(view_command)
