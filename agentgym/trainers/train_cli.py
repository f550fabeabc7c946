"""``agentgym train``, ``sft`` and ``export`` (registered on ``agentgym``'s app).

    agentgym sft examples/sft_agent_calendar.yaml      # demonstrations -> a warm start
    agentgym train examples/agent_calendar.yaml        # group-based RL, held-out gain printed
    agentgym export runs/agent_calendar --merge --out runs/agent_calendar_model

Each training command shows its held-out evaluations as the run logs them and ends with the
gain's 95% paired interval; torch is imported only inside the commands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agentgym.errors import ConfigError
from agentgym.files import same_file

console = Console()
err = Console(stderr=True)


def _run_showing_held_out(run_dir: str | Path, job: Callable[[Any], Path]) -> Path:
    """Run a training job under a progress display; each held-out score shows when logged.

    Ctrl-C ends the command at once, saying the run's checkpoints resume with --resume.
    """
    from agentgym.phases import JsonlTail, Phases, exit_interrupted

    try:
        with Phases(err) as progress:  # a bar on a terminal, log lines otherwise
            def note(row: dict[str, Any]) -> None:
                line = held_out_line(row)
                if line is not None:
                    progress.note(line)

            # Each held-out evaluation is shown when the run logs it (before training, too).
            with JsonlTail(Path(run_dir) / "metrics.jsonl", note):
                return job(progress)
    except KeyboardInterrupt:
        exit_interrupted(err, f"the checkpoints so far are in {run_dir}; --resume goes on")


def train(
    config: Annotated[Path | None, typer.Argument(
        help="Training config YAML (see examples/); omitted = all defaults. An empty file "
             "is refused (usually one not saved yet or cut short).")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Dotted overrides, e.g. optim.lr=3e-6 rollout.group_size=8.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the run's latest checkpoint.")
                      ] = False,
) -> None:
    """Train a policy with group-based RL; metrics, checkpoints and config go to run_dir."""
    from agentgym.trainers.config import load_config

    cfg = load_config(config, overrides or [])
    own = Path(cfg.run_dir) / "config.yaml"
    if config is not None and same_file(config, own) and load_config(config) != cfg:
        raise ConfigError(
            f"{str(config)!r} is the run's own resolved config, which train rewrites with the "
            "overrides applied; that would destroy the input. Copy it elsewhere and train from "
            "the copy, or set run_dir to a new folder")
    from agentgym.trainers.loop import train as run_training  # imports torch

    run_dir = _run_showing_held_out(
        cfg.run_dir, lambda progress: run_training(cfg, resume=resume, progress=progress))
    _train_summary(run_dir)


def sft(
    config: Annotated[Path, typer.Argument(
        help="SFT config YAML (see examples/sft_sokoban.yaml).")],
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Dotted overrides, e.g. optim.lr=1e-4 data.success_only=true.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the run's latest checkpoint.")
                      ] = False,
) -> None:
    """Fine-tune a policy on demonstrations (expert or filtered rollouts) before RL.

    The run's checkpoints load into train as model.path; run_dir/model is the fine-tuned
    model as a Hugging Face folder (for hf:PATH policies and agentgym eval).
    """
    from agentgym.trainers.sft_config import load_sft_config

    cfg = load_sft_config(config, overrides or [])  # mistakes fail here, before torch loads
    from agentgym.trainers.sft import sft as run_sft  # imports torch

    run_dir = _run_showing_held_out(
        cfg.run_dir, lambda progress: run_sft(cfg, resume=resume, progress=progress))
    console.print(f"fine-tuned model: {run_dir / 'checkpoints'} (train: model.path="
                  f"{run_dir / 'model'})", soft_wrap=True)


def export(
    run_dir: Annotated[Path, typer.Argument(
        help="A training run folder (the run_dir of agentgym train).")],
    out: Annotated[Path, typer.Option(
        help="Folder to create (must not exist, or be empty; outside RUN_DIR).")],
    step: Annotated[int | None, typer.Option(
        help="The checkpoint's step (default: the newest).")] = None,
    merge: Annotated[bool, typer.Option(
        help="LoRA runs: merge the adapters into a full model folder.")] = False,
    base: Annotated[str | None, typer.Option(
        help="The base model folder (default: the run's model.path).")] = None,
) -> None:
    """Write a run's checkpoint as a Hugging Face model folder (PEFT adapters for LoRA runs).

    RUN_DIR is only read. agentgym serve, transformers and peft load the result.
    """
    from agentgym.trainers.export import export_run  # imports torch

    done = export_run(run_dir, out, step=step, merge=merge, base=base)
    what = "PEFT adapter folder" if done.kind == "adapter" else "Hugging Face model folder"
    console.print(f"step {done.step} of {run_dir} → {what} [bold]{done.out}[/bold]",
                  soft_wrap=True)
    console.print(f"[dim]serve it: agentgym serve {done.out}[/dim]", soft_wrap=True)


def held_out_line(row: dict[str, Any]) -> str | None:
    """The held-out success rates of a training metrics row, as one line (None if none)."""
    rates = [(k.removeprefix("eval/").removesuffix("success_rate").rstrip("/") or "held-out", v)
             for k, v in row.items()
             if k.startswith("eval/") and k.endswith("success_rate") and v is not None]
    if not rates:
        return None
    from agentgym.trainers.heldout import gain_line

    step = int(row.get("step", 0))
    when = "before training" if step == 0 else f"after step {step}"
    line = f"{when}: " + ", ".join(f"{name} success {value:.1%}" for name, value in rates)
    if row.get("eval/recorded"):  # agentgym/trainers/heldout_record.py
        line += " (the starting model's own evaluation, kept with its weights: not run again)"
    gain = gain_line(row)  # the paired interval, once there is a before and an after
    return line if gain is None else f"{line}\n{gain}"


def _train_summary(run_dir: Path) -> None:
    from agentgym.trainers.metrics import read_metrics

    rows = read_metrics(run_dir)
    table = Table(title=f"training run {run_dir}")
    for col in ("step", "reward", "success", "held-out success", "loss", "seconds"):
        table.add_column(col, justify="right")
    def cell(row: dict[str, float], key: str, fmt: str) -> str:
        return format(row[key], fmt) if key in row else ""  # step 0 holds only the eval

    for r in rows:
        table.add_row(str(r["step"]), cell(r, "reward_mean", ".3f"), cell(r, "success_rate", ".0%"),
                      cell(r, "eval/success_rate", ".0%"), cell(r, "loss", ".4f"),
                      f"{r.get('rollout_s', 0) + r.get('update_s', 0):.0f}")
    console.print(table)
    from agentgym.trainers.heldout import gain_line

    gains = [line for r in rows if (line := gain_line(r)) is not None]
    if gains:  # before/after over the same held-out tasks, with the gain's 95% interval
        console.print(gains[-1], markup=False, highlight=False, soft_wrap=True)


def register_commands(app: typer.Typer) -> None:
    """Add ``train``, ``sft`` and ``export`` to the ``agentgym`` app."""
    app.command("train")(train)
    app.command("sft")(sft)
    app.command("export")(export)
