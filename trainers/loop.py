"""The training loop: collect groups → estimate advantages → PPO-clip update → sync → log.

One step, top to bottom (``train`` below):

1. Collect ``tasks_per_step`` groups of ``group_size`` rollouts with the rollout engine,
   sampling from the current policy (the generation backend shares the trained model's
   weights in-process, so "weight sync" is a version bump).
2. Drop error trajectories from everything (and stop if too many errored); count groups
   whose rollouts all scored the same and, by default, drop them (dynamic sampling).
3. Advantages from the configured estimator (pure numpy over groups).
4. PPO-clip on the recorded tokens: ``epochs`` passes, ``mini_batches`` optimizer steps per
   pass, micro-batches by token budget with gradient accumulation, grad-norm clipping.
5. Bump the policy version, log metrics (JSONL, TensorBoard, progress bar), checkpoint.

The collaborators are typed and built once by :func:`build` into a :class:`Run`; a driver
(:mod:`agentgym.trainers.async_loop`) changes where rollouts come from and where the update
runs, never the run's fields. The update itself is :func:`agentgym.trainers.update.ppo_update`
for every driver. docs/architecture.md draws the path of one step.

Held-out evaluation (greedy, one rollout per seed) runs before the first step, every
``eval_every`` steps and after the last.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

import agentgym
from agentgym.errors import AgentGymError, ConfigError
from agentgym.memory import fix_mmap_threshold
from agentgym.policies.hf import TransformersPolicy
from agentgym.trainers import checkpoint, heldout
from agentgym.trainers.advantages import Estimator, estimator_info, get_estimator
from agentgym.trainers.advantages.gae import ValueEstimator
from agentgym.trainers.async_loop import RolloutDriver, make_driver
from agentgym.trainers.batching import samples_from_groups
from agentgym.trainers.checkpoint import Checkpointer, TrainState
from agentgym.trainers.collect import collect, evaluate_mix, make_agent
from agentgym.trainers.config import TrainConfig, save_config
from agentgym.trainers.critic import Critic
from agentgym.trainers.lora import with_lora
from agentgym.trainers.metrics import MetricsLog, is_zero_variance, rollout_metrics, succeeded
from agentgym.trainers.mixture import per_env_metrics
from agentgym.trainers.models import load_trained_model
from agentgym.trainers.preflight import check_model
from agentgym.trainers.progress_train import ProgressFitter, build_fitter
from agentgym.trainers.rewards import (
    RewardComponent,
    SWERewardConfig,
    accumulation_metrics,
    estimator_options,
    rescore_groups,
    swe_components,
    swe_metrics,
)
from agentgym.trainers.supo import check_estimator, supo_metrics, supo_samples
from agentgym.trainers.update import Learner, UpdateConfig, ppo_update_in_thread
from agentgym.trainers.wandb_log import from_config as wandb_sink
from agentgym.types import Group, Trajectory


class TrainingError(AgentGymError, RuntimeError):
    """The run cannot go on (for example: too many rollouts errored)."""


@dataclass
class Run:
    """The typed collaborators of one training run; built by :func:`build`.

    Only :func:`train_step` advances ``state``; no other field changes after :func:`build`.
    """

    config: TrainConfig
    """The resolved config."""
    learner: Learner
    """The trained model, its optimizer and the KL reference (sharded under FSDP)."""
    policy: TransformersPolicy
    """The generation backend rollouts sample from (shares the learner's weights in the
    embedded loop; a copy, synced after each update, under async or FSDP training)."""
    weights: torch.nn.Module
    """The full trained weights that checkpoints save and resume into."""
    estimator: Estimator
    """Advantages from groups (pure numpy)."""
    rewards: tuple[RewardComponent, ...] | None
    """G-RA / D-RA reward components, or None."""
    progress: ProgressFitter | None
    """SPA's progress-estimator fitter, or None."""
    log: MetricsLog
    """Metrics JSONL and TensorBoard."""
    checkpointer: Checkpointer
    """Writes checkpoints every ``save_every`` steps and at the end."""
    driver: RolloutDriver | None
    """Ray rollouts, async overlap or multi-GPU updates; None for the embedded loop."""
    state: TrainState
    """Where the run stands (the step and the next training seed)."""
    critic: Critic | None = None
    """GAE's value head, or None (trainers/critic.py)."""

    @property
    def model(self) -> torch.nn.Module:
        """The full trained weights (:attr:`weights`)."""
        return self.weights


def build(config: TrainConfig, resume: bool = False) -> Run:
    """Load the model, optimizer and (when resuming) the latest checkpoint."""
    run_dir = Path(config.run_dir)
    last = checkpoint.resume_point(run_dir, resume)  # checked before any model loads
    for env in config.envs or (config.env,):
        for kwargs in (env.kwargs, {**env.kwargs, **env.eval_kwargs}):
            agentgym.make(env.id, **kwargs)  # bad env id/kwargs fail before loading
    # G-RA/D-RA already charge a malformed turn: one penalty unless the options name λ too
    options = estimator_options(config.algorithm.options, config.algorithm.reward_accumulation)
    if "history_length" in estimator_info(config.algorithm.estimator).needs \
            and config.rollout.context == "window":
        options.setdefault("history_length", config.rollout.history_length)
    estimator = get_estimator(config.algorithm.estimator, **options)
    if config.rollout.context == "summarize":  # SUPO shares a rollout's advantage: say so
        check_estimator(config.algorithm.estimator, config.algorithm.supo)
    rewards = None
    if config.algorithm.reward_accumulation != "none":
        try:
            rewards = tuple(swe_components(SWERewardConfig(**config.algorithm.reward_options)))
        except TypeError as exc:
            raise ConfigError(f"algorithm.reward_options: {exc}") from exc
    check_model(config.model)  # a folder that is no model, a device torch lacks: now
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    _seed_everything(config.seed)
    fix_mmap_threshold()  # freed step tensors go back to the system (agentgym/memory.py)
    model, tokenizer = load_trained_model(config.model.path, device=config.model.device,
                                          dtype=config.model.dtype)
    reference = _frozen_copy(model) if config.loss.kl_coef > 0 else None
    progress = build_fitter(config, model, last)  # copies the initial policy
    critic = (Critic.from_policy(model, config.algorithm.value)  # GAE's value head
              if isinstance(estimator, ValueEstimator) and estimator.uses_values else None)
    if config.model.lora.enabled:
        model = with_lora(model, config.model.lora)
    policy = TransformersPolicy(model, tokenizer, max_batch_size=config.model.max_batch_size,
                                seed=config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.optim.lr,
                                  weight_decay=config.optim.weight_decay)
    state = TrainState(0, config.env.first_seed)
    if last is not None:
        state = checkpoint.load(last, model, optimizer)
        policy.policy_version = state.step  # one update per step: go on counting from there
        if critic is not None:
            critic.load(run_dir, state.step)
    learner = Learner(model, optimizer, reference, policy.device, tokenizer.pad_token_id)
    driver = make_driver(config, state, learner, policy)
    if driver is not None:  # rollouts read the driver's generation copy of the weights
        policy, learner = driver.policy, driver.learner
    sharded = driver is not None and driver.distributed is not None
    weights: Any = policy.model if sharded else model  # full weights (rank 0 keeps a copy)
    checkpointer = Checkpointer(run_dir, config.save_every,
                                resumable=config.resumable_checkpoints)
    log = MetricsLog(run_dir, config.tensorboard, wandb_sink(config), start_step=state.step)
    return Run(config, learner, policy, weights, estimator, rewards, progress,
               log, checkpointer, driver, state,
               critic=critic)


def train(config: TrainConfig, resume: bool = False, progress: Any = None) -> Path:
    """Run (or resume) training; returns the run directory."""
    run = build(config, resume)
    try:
        asyncio.run(_run(run, progress))
    finally:
        run.log.close()
    return Path(config.run_dir)


async def _run(run: Run, progress: Any) -> None:
    cfg = run.config
    task = progress.add_task("training", total=cfg.steps, completed=run.state.step) \
        if progress is not None else None
    try:
        evaluating = bool(cfg.eval.suite) or any(e.eval_seeds for e in cfg.envs or (cfg.env,))
        if run.state.step == 0 and evaluating:
            run.log.log(0, await evaluate(run))
        while run.state.step < cfg.steps:
            metrics = await train_step(run, progress)
            step = run.state.step
            if evaluating and cfg.eval_every and step % cfg.eval_every == 0 \
                    and step < cfg.steps:
                metrics.update(await evaluate(run))
            if step == cfg.steps and evaluating:
                metrics.update(await evaluate(run))
            run.log.log(step, metrics)
            if run.checkpointer.due(step, last=cfg.steps):
                run.checkpointer.save(run.state, run.weights, run.learner.optimizer)
                if run.progress is not None:
                    run.progress.save(Path(cfg.run_dir), step)
                if run.critic is not None:
                    run.critic.save(Path(cfg.run_dir), step)
            if task is not None and progress is not None:
                progress.update(task, completed=step, description=(
                    f"step {step} reward {metrics['reward_mean']:.3f} "
                    f"success {metrics['success_rate']:.0%} loss {metrics.get('loss', 0):.4f}"))
    finally:
        if run.driver is not None:
            await run.driver.aclose()
        await run.policy.aclose()


async def train_step(run: Run, progress: Any = None) -> dict[str, float]:
    """One step: collect → drop errors → rewards → advantages → update → sync.

    ``progress`` (a rich ``Progress`` or :class:`agentgym.phases.Phases`) shows the update's
    micro-batches as they finish.
    """
    cfg, start, step = run.config, time.perf_counter(), run.state.step
    horizon = cfg.rollout.horizon_schedule.at(step)  # ScalingInter-RL's turn cap, or None
    if run.driver is not None:
        trajs = await run.driver.collect(step, run.state.next_seed)
    else:
        seeds = range(run.state.next_seed, run.state.next_seed + cfg.rollout.tasks_per_step)
        trajs = await collect(cfg, run.policy, seeds, cfg.rollout.group_size,
                              cfg.rollout.temperature, seed=cfg.seed * 100_003 + step,
                              max_turns=horizon)
    rollout_s = time.perf_counter() - start
    groups = Group.from_trajectories(trajs)
    metrics = rollout_metrics(trajs, groups)
    run.log.trajectories(step + 1, trajs)  # W&B's table, logged beside this step's metrics
    if cfg.envs:  # several envs: env/<label>/... besides the totals
        metrics.update(per_env_metrics(cfg, trajs))
    if horizon is not None:
        metrics["horizon/max_turns"] = float(horizon)
    if metrics["error_rate"] > cfg.algorithm.max_error_rate:
        errors = sorted({x.error or "" for x in trajs if not x.scorable})[:3]
        raise TrainingError(
            f"{metrics['error_rate']:.0%} of step {step}'s rollouts errored (limit "
            f"algorithm.max_error_rate={cfg.algorithm.max_error_rate}); first errors: {errors}")
    metrics.update(swe_metrics(trajs))  # completion/modification/resolve, when reported
    accumulation = cfg.algorithm.reward_accumulation
    if run.rewards is not None and accumulation != "none":  # G-RA / D-RA: rewritten rewards
        groups = rescore_groups(groups, run.rewards, accumulation)
        metrics.update(accumulation_metrics(groups))
    if run.critic is not None:  # GAE: V(s_t) into every step, where the estimator reads it
        groups = run.critic.annotate(groups)
    if run.progress is not None:  # SPA: refit the progress estimator, write ĉ_t into the steps
        groups = await run.progress.on_groups(step, groups, metrics, _explorer(run))
    least = 2 if estimator_info(cfg.algorithm.estimator).group_baseline else 1
    kept = [g for g in groups if len(g.scorable) >= least
            and not (cfg.algorithm.drop_zero_variance_groups and is_zero_variance(g))]
    if cfg.rollout.context == "summarize":  # SUPO: one sequence per working context
        metrics.update(supo_metrics(trajs))
        samples = supo_samples(kept, run.estimator(kept), cfg.algorithm.supo,
                               skip_zero_advantage=False) if kept else []
    else:
        # zero-advantage steps stay: the update skips their forward pass, not their tokens
        samples = samples_from_groups(kept, run.estimator(kept)) if kept else []
    update_start = time.perf_counter()
    driver = run.driver
    if driver is not None:  # async: update in a thread while rollouts go on; then sync
        metrics.update(await driver.update(samples, step, kept))
        metrics.update(await driver.sync())  # sync_s: the weights' way to the generator
    else:
        # in a thread, so that Ctrl-C during a long update ends the run at once
        metrics.update(await ppo_update_in_thread(run.learner, samples, UpdateConfig.of(cfg),
                                                  step=step, progress=progress))
        await run.policy.update_weights([])  # it shares the trained weights: a new version
    if run.critic is not None and kept:  # after the policy update, on the same targets
        metrics.update(run.critic.fit(kept, cast(ValueEstimator, run.estimator).returns(kept)))
    next_seed = run.state.next_seed + cfg.rollout.tasks_per_step
    if driver is not None and driver.april is not None:  # APRIL takes seeds as it needs
        next_seed = driver.april.next_seed
    run.state = TrainState(step + 1, next_seed)
    metrics.update(groups_trained=float(len(kept)), samples=float(len(samples)),
                   trained_tokens=float(sum(x.length for x in samples)),
                   rollout_s=rollout_s, update_s=time.perf_counter() - update_start,
                   policy_version=float(run.policy.policy_version))
    return metrics


def _explorer(run: Run) -> Any:
    """SPA's exploration rollouts: training-temperature groups of the given seeds."""
    cfg = run.config
    runner = run.driver.run_groups if run.driver is not None else None

    async def explore(seeds: range) -> list[Trajectory]:
        return await collect(cfg, run.policy, seeds, cfg.rollout.group_size,
                             cfg.rollout.temperature, seed=cfg.seed * 100_003 + 99_991,
                             runner=runner)
    return explore


@torch.no_grad()
async def evaluate(run: Run) -> dict[str, float]:
    """Greedy success rate and mean reward on the held-out seeds, and the eval suite if set."""
    out: dict[str, float] = {}
    cfg = run.config
    if cfg.eval.suite:  # agentgym.evaluation: eval/<suite>/<entry>/... metrics
        from agentgym.evaluation.training import evaluate_suite

        # greedy, with the agent training and held-out evaluation use (its context included)
        agent = make_agent(cfg, run.policy, temperature=0.0, seed=0, evaluation=True,
                           max_tokens=cfg.eval.max_tokens)
        out.update(await evaluate_suite(cfg, agent, run.state.step))
    runner = run.driver.run_groups if run.driver is not None else None
    return {**out, **await evaluate_held_out(cfg, run.policy, runner, step=run.state.step)}


@torch.no_grad()
async def evaluate_held_out(config: TrainConfig, policy: TransformersPolicy,
                            runner: Any = None, step: int | None = None) -> dict[str, float]:
    """Success rate and mean reward on the ``env.eval_seeds`` held-out seeds.

    Greedy, or sampled at ``env.eval_temperature`` (``env.eval_draws`` episodes per seed).

    With ``step``, each task's outcome is kept in the run folder (:mod:`.heldout`), and
    after the first step the gain over the evaluation before training comes with its
    95% interval (``heldout/*``).
    """
    if config.envs:  # several envs: each its own held-out seeds
        out, outcomes = await evaluate_mix(config, policy, runner)
        if step is not None and outcomes:  # paired over every env's tasks (label:seed)
            heldout.write_outcomes(config.run_dir, step, outcomes)
            out.update(heldout.run_gain(config.run_dir, step))
        return out
    cfg = config.env
    if not cfg.eval_seeds:
        return {}
    seeds = range(cfg.eval_first_seed, cfg.eval_first_seed + cfg.eval_seeds)
    trajs = [x for x in await collect(config, policy, seeds, cfg.eval_draws,
                                      cfg.eval_temperature, seed=0,
                                      evaluation=True, runner=runner) if x.scorable]
    n = max(len(trajs), 1)
    out = {"eval/success_rate": sum(map(succeeded, trajs)) / n,
           "eval/reward_mean": sum(x.outcome_reward or 0.0 for x in trajs) / n}
    if step is not None:
        heldout.record_outcomes(config.run_dir, step, trajs)
        out.update(heldout.run_gain(config.run_dir, step))
    return out


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference
