"""``agentgym progress``: fit SPA's progress estimator offline and look at per-step contributions.

    agentgym progress train runs/rollout.jsonl --model smollm2 --out runs/progress
    agentgym progress score --estimator runs/progress runs/rollout.jsonl --out scored.jsonl

``train`` fits ĉ_t so that Σ_t ĉ_t matches each trajectory's outcome R (docs/spa.md) and
reports held-out figures every epoch; ``score`` prints each step's contribution, which shows
where episodes gain or lose, and can write the scored trajectories for
``agentgym advantages --estimator spa``. Both read the token ids recorded at sampling time,
so the trajectories must come from a model policy. torch is imported only inside commands.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

app = typer.Typer(help="SPA's progress estimator: fit it on trajectories, score their steps.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()

TrajArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                         help="Trajectory JSONL with recorded tokens.")]


def _split(trajs: list[Any], heldout: float, seed: int) -> tuple[list[Any], list[Any]]:
    """Hold out whole groups (rollouts of one task stay together), chosen by ``seed``."""
    import numpy as np

    groups = sorted({t.group_id for t in trajs})
    n_held = math.ceil(heldout * len(groups)) if heldout > 0 and len(groups) >= 2 else 0
    held = {groups[i] for i in np.random.default_rng(seed).permutation(len(groups))[:n_held]}
    return [t for t in trajs if t.group_id not in held], [t for t in trajs if t.group_id in held]


def _fmt(row: dict[str, float], key: str) -> str:
    return f"{row[key]:.4f}" if key in row else "-"


@app.command()
def train(
    trajectories: TrajArg,
    model: Annotated[str, typer.Option(
        help="Backbone: smollm2, a Hugging Face folder, or an estimator folder to refit.")
    ] = "smollm2",
    out: Annotated[Path, typer.Option(help="Folder the fitted estimator is written to.")
                   ] = Path("runs/progress"),
    epochs: Annotated[int, typer.Option(help="Passes over the training trajectories.")] = 3,
    lr: Annotated[float, typer.Option(help="Backbone learning rate.")] = 3e-6,
    head_lr: Annotated[float, typer.Option(help="Scalar head learning rate.")] = 1e-4,
    batch_size: Annotated[int, typer.Option(help="Trajectories per optimizer step.")] = 8,
    heldout: Annotated[float, typer.Option(
        help="Share of groups held out for the held-out figures (0 = none).")] = 0.2,
    device: Annotated[str, typer.Option(help="Torch device.")] = "cpu",
    seed: Annotated[int, typer.Option(help="Seeds the split, shuffling and torch.")] = 0,
) -> None:
    """Fit a progress estimator: MSE of (R − Σ_t ĉ_t) per trajectory."""
    if not 0 <= heldout < 1:
        raise typer.BadParameter(f"expected a share in [0, 1), got {heldout}",
                                 param_hint="--heldout")
    import torch

    from agentgym.jsonl import read_trajectories
    from agentgym.trainers.config import ProgressConfig
    from agentgym.trainers.metrics import succeeded
    from agentgym.trainers.progress import ProgressModel, fit_metrics, pack
    from agentgym.trainers.progress_train import ProgressFitter

    trajs = [t for t in read_trajectories(trajectories) if t.scorable and t.steps]
    if not trajs:
        raise typer.BadParameter("no scorable trajectory with steps in the file",
                                 param_hint="TRAJECTORIES")
    fit_set, held = _split(trajs, heldout, seed)
    held_packs = [pack(t) for t in held]  # fails early on trajectories without tokens
    torch.manual_seed(seed)
    fitter = ProgressFitter(ProgressModel.load(model, device=device),
                            ProgressConfig(lr=lr, head_lr=head_lr, batch_size=batch_size), seed)
    table = Table(title=f"progress estimator on {len(fit_set)} trajectories "
                        f"({len(held)} held out)")
    for col in ("epoch", "train loss", "held-out mse", "held-out corr", "ĉ success",
                "ĉ failure"):
        table.add_column(col, justify="right")
    for epoch in range(1, epochs + 1):
        loss = fitter.fit(fit_set, 1, rng_key=(epoch,))[0]
        row = fit_metrics(fitter.score(held), held_packs, [succeeded(t) for t in held]) \
            if held else {}
        table.add_row(str(epoch), f"{loss:.4f}", _fmt(row, "mse"), _fmt(row, "corr"),
                      _fmt(row, "c_mean_success"), _fmt(row, "c_mean_failure"))
    fitter.model.source = model
    fitter.model.save(out)
    console.print(table)
    console.print(f"estimator written to [cyan]{out}[/cyan]; score steps with: agentgym "
                  f"progress score --estimator {out} {trajectories}", soft_wrap=True)


@app.command()
def score(
    trajectories: TrajArg,
    estimator: Annotated[Path, typer.Option(
        exists=True, file_okay=False, help="Folder written by 'agentgym progress train'.")],
    out: Annotated[Path | None, typer.Option(
        help="Also write the trajectories with info['progress'] = ĉ_t on every step.")] = None,
    limit: Annotated[int, typer.Option(help="Most trajectories printed (all are scored).")
                     ] = 20,
    device: Annotated[str, typer.Option(help="Torch device.")] = "cpu",
) -> None:
    """Print each step's progress contribution ĉ_t (red: the step lost progress)."""
    from agentgym.jsonl import read_trajectories, write_trajectories
    from agentgym.trainers.config import ProgressConfig
    from agentgym.trainers.progress import META, ProgressModel
    from agentgym.trainers.progress_train import ProgressFitter, annotate

    if not (estimator / META).is_file():
        raise typer.BadParameter(f"{estimator} holds no {META}; pass a folder written by "
                                 "'agentgym progress train'", param_hint="--estimator")
    trajs = list(read_trajectories(trajectories))
    fitter = ProgressFitter(ProgressModel.load(estimator, device=device), ProgressConfig())
    scores = fitter.score(trajs)
    shown = 0
    for traj, c in zip(trajs, scores, strict=True):
        if not traj.scorable:
            console.print(f"[dim]{traj.id}: error trajectory, not scored[/dim]")
            continue
        if shown < limit:
            _print_trajectory(traj, c)
            shown += 1
    if out is not None:
        write_trajectories(out, [annotate(t, c) if t.scorable and t.steps else t
                                 for t, c in zip(trajs, scores, strict=True)])
        console.print(f"scored trajectories written to [cyan]{out}[/cyan]")


def _print_trajectory(traj: Any, contributions: Any) -> None:
    outcome = traj.with_outcome().outcome_reward
    table = Table(title=f"{traj.id} · task {traj.task_id} · R = {outcome:g} · "
                        f"Σĉ = {float(contributions.sum()):.3f}", title_justify="left")
    for col, justify in (("step", "right"), ("action", "left"), ("valid", "center"),
                         ("reward", "right"), ("ĉ", "right"), ("Σĉ so far", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    total = 0.0
    for step, c in zip(traj.steps, contributions, strict=True):
        total += float(c)
        action = step.action.content or " ".join(
            f"{call.name}({call.arguments})" for call in step.action.tool_calls)
        action = " ".join(action.split())
        style = "red" if c < 0 else ""
        table.add_row(str(step.index), Text(action[:60] + ("…" if len(action) > 60 else "")),
                      "yes" if step.valid else "[red]no[/red]",
                      "-" if step.result.reward is None else f"{step.result.reward:g}",
                      f"[{style}]{c:+.3f}[/{style}]" if style else f"{c:+.3f}", f"{total:.3f}")
    console.print(table)
