"""The training loop: collect → transforms → estimate → samples → update → sync → log.

One step, top to bottom (:func:`train_step`):

1. Collect ``tasks_per_step`` groups of ``group_size`` rollouts from the run's collector
   (:mod:`agentgym.trainers.collectors`: in this process with the trained weights, on an
   engine, APRIL's pool, or ahead of the update); stop if too many errored.
2. The run's methods' group transforms (G-RA rescoring, GAE's V(s_t), SPA's ĉ_t: each a
   folder under ``trainers/methods/``); count groups whose rollouts all scored the same and,
   by default, drop them (dynamic sampling).
3. Advantages from the configured estimator (pure numpy over groups), then samples (one
   per step, or a method's builder: SUPO's sequence per working context).
4. The methods' before-update hooks (the off-policy correction, VCPO), then PPO-clip on the
   recorded tokens: ``epochs`` passes, ``mini_batches`` optimizer steps per pass,
   micro-batches by token budget with gradient accumulation, grad-norm clipping
   (:func:`agentgym.trainers.update.ppo_update`, in this process or on every FSDP rank).
   Then the methods' after-update hooks (GAE's value loss).
5. Sync the weights to the generator (a new policy version), log metrics (JSONL,
   TensorBoard, progress bar), checkpoint (with every method's state).

The collaborators are typed and built once by :func:`build` into a :class:`Run`
(:mod:`agentgym.trainers.scale_out` picks the collector, updater and weight sync).
docs/architecture.md draws the path of one step.

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
from typing import Any

import numpy as np
import torch

import agentgym
from agentgym.errors import AgentGymError
from agentgym.memory import fix_mmap_threshold
from agentgym.policies.base import Policy, TrainablePolicy
from agentgym.policies.hf import TransformersPolicy
from agentgym.reward_presets import preset_metrics
from agentgym.trainers import checkpoint, heldout, heldout_record, methods
from agentgym.trainers.advantages import Estimator, estimator_info, get_estimator
from agentgym.trainers.checkpoint import Checkpointer, TrainState
from agentgym.trainers.collect import Runner, collect, evaluate_mix, make_agent
from agentgym.trainers.collectors import Collector
from agentgym.trainers.config import TrainConfig, save_config
from agentgym.trainers.hooks import Hooks, SequentialTasks, StepContext, StepSamples
from agentgym.trainers.lora import with_lora
from agentgym.trainers.metrics import MetricsLog, is_zero_variance, rollout_metrics, succeeded
from agentgym.trainers.mixture import per_env_metrics
from agentgym.trainers.models import checkpoint_activations, load_trained_model
from agentgym.trainers.preflight import check_model
from agentgym.trainers.rewards import estimator_options
from agentgym.trainers.scale_out import WeightSync, scale_out
from agentgym.trainers.update import Learner, LocalUpdater, in_update_thread
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
    policy: TrainablePolicy
    """The generation backend rollouts sample from (shares the learner's weights in the
    embedded loop; a copy or a vLLM engine, synced after each update, elsewhere)."""
    weights: torch.nn.Module
    """The full trained weights that checkpoints save and resume into."""
    estimator: Estimator
    """Advantages from groups (pure numpy)."""
    hooks: Hooks
    """What the run's methods add to the step (``agentgym/trainers/methods/``: G-RA's rescoring,
    GAE's critic, SPA's progress estimator, SUPO's sequences, plug-ins)."""
    log: MetricsLog
    """Metrics JSONL and TensorBoard."""
    checkpointer: Checkpointer
    """Writes checkpoints every ``save_every`` steps and at the end."""
    collector: Collector
    """Where each step's rollouts come from (:mod:`agentgym.trainers.collectors`)."""
    updater: Any
    """Where the update runs: :class:`~agentgym.trainers.update.LocalUpdater`, or the FSDP
    shards (:class:`~agentgym.trainers.distributed.FSDPUpdater`)."""
    sync: WeightSync
    """Sends the trained weights to the generator after each update."""
    state: TrainState
    """Where the run stands (the step and the next training seed)."""

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
    methods.check(config)  # e.g. G-RA's reward options, SUPO's estimator level: before loading
    check_model(config.model)  # a folder that is no model, a device torch lacks: now
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    _seed_everything(config.seed)
    fix_mmap_threshold()  # freed step tensors go back to the system (agentgym/memory.py)
    model, tokenizer = load_trained_model(config.model.path, device=config.model.device,
                                          dtype=config.model.dtype)
    reference = _frozen_copy(model) if config.loss.kl_coef > 0 else None
    hooks = methods.build_hooks(config, model, estimator)  # SPA, GAE copy the initial policy
    if config.model.lora.enabled:
        model = with_lora(model, config.model.lora)
    if config.optim.gradient_checkpointing:
        checkpoint_activations(model)
    policy = TransformersPolicy(model, tokenizer, max_batch_size=config.model.max_batch_size,
                                seed=config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.optim.lr,
                                  weight_decay=config.optim.weight_decay)
    state = TrainState(0, config.env.first_seed)
    if last is not None:
        state = checkpoint.load(last, model, optimizer)
        policy.policy_version = state.step  # one update per step: go on counting from there
        for part in hooks.state:  # the methods' own models and buffers of that step
            part.load(run_dir, state.step)
    learner = Learner(model, optimizer, reference, policy.device, tokenizer.pad_token_id)
    parts = scale_out(config, state, learner, policy)
    sharded = not isinstance(parts.updater, LocalUpdater)
    # the full weights checkpoints save: under FSDP, rank 0's generation copy
    weights: Any = getattr(parts.collector.policy, "model", None) if sharded else model
    checkpointer = Checkpointer(run_dir, config.save_every,
                                resumable=config.resumable_checkpoints)
    log = MetricsLog(run_dir, config.tensorboard, wandb_sink(config), start_step=state.step,
                     rollouts=config.logging.rollouts)
    return Run(config, parts.learner, parts.collector.policy, weights, estimator, hooks, log,
               checkpointer, parts.collector, parts.updater, parts.sync, state)


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
        evaluating = bool(cfg.eval.suite) or holds_out(cfg)
        await run.sync.start()  # a generator in another process gets the trained weights
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
                for part in run.hooks.state:
                    part.save(Path(cfg.run_dir), step)
            if task is not None and progress is not None:
                progress.update(task, completed=step, description=(
                    f"step {step} reward {metrics['reward_mean']:.3f} "
                    f"success {metrics['success_rate']:.0%} loss {metrics.get('loss', 0):.4f}"))
    finally:
        await run.collector.aclose()
        run.updater.close()
        await run.policy.aclose()


async def train_step(run: Run, progress: Any = None) -> dict[str, float]:
    """One step: collect → transforms → estimate → samples → update → after-update → sync.

    The run's methods act through ``run.hooks`` (:mod:`agentgym.trainers.hooks`): their
    group transforms before the estimator, their sample builder, their hooks just before
    and after the update.

    ``progress`` (a rich ``Progress`` or :class:`agentgym.phases.Phases`) shows the update's
    micro-batches as they finish.
    """
    cfg, start, step = run.config, time.perf_counter(), run.state.step
    await run.sync.start()  # before the first rollout only
    sampler = run.hooks.task_sampler or SequentialTasks()  # e.g. a difficulty curriculum
    seeds, next_seed = sampler.tasks(step, run.state.next_seed, cfg.rollout.tasks_per_step)
    got = await run.collector.collect(step, seeds)
    stream = [got.next_seed if got.next_seed is not None else next_seed]  # APRIL's own
    trajs = got.trajectories
    rollout_s = time.perf_counter() - start
    groups = Group.from_trajectories(trajs)
    metrics = {**got.metrics, **rollout_metrics(trajs, groups)}
    run.log.trajectories(step + 1, trajs)  # W&B's table, logged beside this step's metrics
    metrics.update(per_env_metrics(cfg, trajs))  # several envs: env/<label>/... (else none)
    if metrics["error_rate"] > cfg.algorithm.max_error_rate:
        errors = sorted({x.error or "" for x in trajs if not x.scorable})[:3]
        raise TrainingError(
            f"{metrics['error_rate']:.0%} of step {step}'s rollouts errored (limit "
            f"algorithm.max_error_rate={cfg.algorithm.max_error_rate}); first errors: {errors}")
    metrics.update(preset_metrics(trajs))  # e.g. SWE's resolve rate, when the env reports it
    ctx = StepContext(step, _explorer(run), tuple(trajs), run.sync.version, run.updater,
                      _drawer(run, step, stream))
    for hook in run.hooks.transforms:  # G-RA rescoring, GAE's V(s_t), SPA's ĉ_t, plug-ins
        groups = await hook.transform(ctx, groups, metrics)
    least = 2 if estimator_info(cfg.algorithm.estimator).group_baseline else 1
    kept = [g for g in groups if len(g.scorable) >= least
            and not (cfg.algorithm.drop_zero_variance_groups and is_zero_variance(g))]
    advantages = run.estimator(kept) if kept else {}
    builder = run.hooks.sample_builder or StepSamples()  # SUPO: a sequence per context
    samples = builder.samples(ctx, kept, advantages, metrics)
    update_start = time.perf_counter()
    suspend = getattr(run.collector.policy, "suspend", None)
    if suspend is not None and not cfg.async_training.enabled:
        await suspend()  # a llama.cpp server gives its memory to the update; the sync restarts it

    def update(on_micro_batch: Any) -> dict[str, float]:  # in a thread: rollouts go on
        batch, lr_scale = samples, 1.0
        for before in run.hooks.before_update:  # e.g. importance weights for stale steps
            batch, lr_scale = before.before_update(ctx, batch, kept, lr_scale, metrics)
        return run.updater.update(batch, step, lr_scale=lr_scale,
                                  on_micro_batch=on_micro_batch)

    # in a thread, also so that Ctrl-C during a long update ends the run at once
    metrics.update(await in_update_thread(update, progress))
    for after in run.hooks.after_update:  # e.g. GAE's value loss, on the same targets
        after.after_update(ctx, kept, metrics)
    metrics.update(await run.sync())  # sync_s: the weights' way to the generator
    run.state = TrainState(step + 1, stream[0])
    metrics.update(groups_trained=float(len(kept)), samples=float(len(samples)),
                   trained_tokens=float(sum(x.length for x in samples)),
                   rollout_s=rollout_s, update_s=time.perf_counter() - update_start,
                   policy_version=float(run.policy.policy_version))
    return metrics


def _drawer(run: Run, step: int, stream: list[int]) -> Any:
    """More groups of fresh training tasks for this step; ``stream[0]`` moves past them."""
    cfg, rounds = run.config, [0]

    async def draw(n: int) -> list[Trajectory]:
        seeds = range(stream[0], stream[0] + n)
        stream[0] += n
        rounds[0] += 1  # each round its own sampling seed, apart from the step's own
        return await collect(cfg, run.policy, seeds, cfg.rollout.group_size,
                             cfg.rollout.temperature,
                             seed=cfg.seed * 100_003 + 50_021 * rounds[0] + step,
                             runner=run.collector.runner,
                             max_turns=cfg.rollout.horizon_schedule.at(step))
    return draw


def _explorer(run: Run) -> Any:
    """Rollouts outside the step's tasks (SPA's exploration): training-temperature groups."""
    cfg = run.config
    runner = run.collector.runner

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
    recorded = recorded_evaluation(run) if run.state.step == 0 else None
    if recorded is not None:
        return {**out, **recorded}
    return {**out, **await evaluate_held_out(cfg, run.policy, run.collector.runner,
                                             step=run.state.step)}


def recorded_evaluation(run: Run) -> dict[str, float] | None:
    """The starting model's own held-out evaluation, if its folder keeps one.

    One of these very weights under these settings (:mod:`agentgym.trainers.heldout_record`;
    an SFT's export keeps one); its outcomes become this run's step 0. None: evaluate.
    """
    cfg = run.config
    key = heldout_record.evaluation_key(cfg, getattr(run.policy, "tokenizer", None))
    folder = Path(cfg.model.path)
    if key is None or not isinstance(run.updater, LocalUpdater) \
            or not (folder / heldout_record.RECORD).is_file():
        return None
    from agentgym.trainers.vllm_generation import generation_state

    # what the first sync sent the engine, so the digest is of the weights it would evaluate
    digest = heldout_record.weights_digest(generation_state(cfg, run.weights))
    record = heldout_record.read_record(folder, key, digest)
    if record is None:
        return None
    heldout.write_outcomes(cfg.run_dir, 0, record.outcomes)
    return {**record.metrics, "eval/recorded": 1.0}


def holds_out(config: TrainConfig) -> bool:
    """Whether any env of the run has held-out seeds (``eval_seeds``) to evaluate."""
    return any(e.eval_seeds for e in config.envs or (config.env,))


@torch.no_grad()
async def evaluate_held_out(config: TrainConfig, policy: Policy,
                            runner: Runner | None = None, step: int | None = None
                            ) -> dict[str, float]:
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
