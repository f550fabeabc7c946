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
from agentgym.context import ContextConfig
from agentgym.errors import AgentGymError, ConfigError
from agentgym.policies.base import SamplingParams
from agentgym.policies.hf import TransformersPolicy
from agentgym.policies.models import load_model
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.trainers import checkpoint
from agentgym.trainers.advantages import get_estimator
from agentgym.trainers.async_loop import proximal_logprobs
from agentgym.trainers.batching import Sample, micro_batches, samples_from_groups
from agentgym.trainers.config import TrainConfig, save_config
from agentgym.trainers.loss import ppo_clip_loss, token_logprobs
from agentgym.trainers.metrics import (
    MetricsLog,
    is_zero_variance,
    rollout_metrics,
    succeeded,
    weighted_mean,
)
from agentgym.trainers.rewards import (
    SWERewardConfig,
    accumulation_metrics,
    rescore_groups,
    swe_components,
    swe_metrics,
)
from agentgym.trainers.supo import check_estimator, supo_metrics, supo_samples
from agentgym.types import Group, Trajectory


class TrainingError(AgentGymError, RuntimeError):
    """The run cannot go on (for example: too many rollouts errored)."""


@dataclass
class Trainer:
    """Everything a run holds; built by :func:`build`, driven by :func:`train`."""

    config: TrainConfig
    model: Any
    policy: TransformersPolicy
    optimizer: torch.optim.Optimizer
    reference: Any
    estimator: Any
    rewards: Any
    state: checkpoint.TrainState
    log: MetricsLog
    spa: Any = None  # SPA's progress-estimator fitter (trainers/progress_train.py), or None
    driver: Any = None  # Ray engine / async overlap / multi-GPU (trainers/async_loop.py), or None


def build(config: TrainConfig, resume: bool = False) -> Trainer:
    """Load the model, optimizer and (when resuming) the latest checkpoint."""
    run_dir = Path(config.run_dir)
    last = checkpoint.latest(run_dir)
    if last is not None and not resume:
        raise ConfigError(f"{run_dir} already holds checkpoints; pass --resume to continue the "
                          "run, or set run_dir to a new folder")
    if resume and last is None:
        raise ConfigError(f"--resume: no checkpoint in {run_dir}; start the run without --resume")
    for kwargs in (config.env.kwargs, {**config.env.kwargs, **config.env.eval_kwargs}):
        agentgym.make(config.env.id, **kwargs)  # bad env id/kwargs fail before loading
    options = dict(config.algorithm.options)
    if config.algorithm.estimator == "hgpo" and config.rollout.context == "window":
        options.setdefault("history_length", config.rollout.history_length)
    estimator = get_estimator(config.algorithm.estimator, **options)
    if config.rollout.context == "summarize":  # SUPO shares a rollout's advantage: say so
        check_estimator(config.algorithm.estimator, config.algorithm.supo)
    rewards = None
    if config.algorithm.reward_accumulation != "none":
        try:
            rewards = swe_components(SWERewardConfig(**config.algorithm.reward_options))
        except TypeError as exc:
            raise ConfigError(f"algorithm.reward_options: {exc}") from exc
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    _seed_everything(config.seed)
    model, tokenizer = load_model(config.model.path, device=config.model.device,
                                  dtype=config.model.dtype)
    reference = _frozen_copy(model) if config.loss.kl_coef > 0 else None
    from agentgym.trainers.progress_train import build_fitter  # SPA: copies the initial policy

    spa = build_fitter(config, model, last if resume else None)
    if config.model.lora.enabled:
        model = _with_lora(model, config)
    policy = TransformersPolicy(model, tokenizer, max_batch_size=config.model.max_batch_size,
                                seed=config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.optim.lr,
                                  weight_decay=config.optim.weight_decay)
    state = checkpoint.TrainState(0, config.env.first_seed)
    if resume and last is not None:
        state = checkpoint.load(last, model, optimizer)
        policy.policy_version = state.step  # one update per step: go on counting from there
    trainer = Trainer(config, model, policy, optimizer, reference, estimator, rewards, state,
                      MetricsLog(run_dir, config.tensorboard), spa=spa)
    from agentgym.trainers.async_loop import make_driver  # None for the embedded loop

    trainer.driver = make_driver(trainer)
    return trainer


def train(config: TrainConfig, resume: bool = False, progress: Any = None) -> Path:
    """Run (or resume) training; returns the run directory."""
    trainer = build(config, resume)
    try:
        asyncio.run(_run(trainer, progress))
    finally:
        trainer.log.close()
    return Path(config.run_dir)


async def _run(t: Trainer, progress: Any) -> None:
    cfg = t.config
    task = progress.add_task("training", total=cfg.steps, completed=t.state.step) \
        if progress is not None else None
    try:
        evaluating = bool(cfg.env.eval_seeds or cfg.eval.suite)
        if t.state.step == 0 and evaluating:
            t.log.log(0, await _evaluate(t))
        while t.state.step < cfg.steps:
            metrics = await _train_step(t)
            step = t.state.step
            if evaluating and cfg.eval_every and step % cfg.eval_every == 0 \
                    and step < cfg.steps:
                metrics.update(await _evaluate(t))
            if step == cfg.steps and evaluating:
                metrics.update(await _evaluate(t))
            t.log.log(step, metrics)
            if step % cfg.save_every == 0 or step == cfg.steps:
                checkpoint.save(Path(cfg.run_dir), t.state, t.model, t.optimizer)
                if t.spa is not None:
                    t.spa.save(Path(cfg.run_dir), step)
            if task is not None:
                progress.update(task, completed=step, description=(
                    f"step {step} reward {metrics['reward_mean']:.3f} "
                    f"success {metrics['success_rate']:.0%} loss {metrics.get('loss', 0):.4f}"))
    finally:
        if t.driver is not None:
            await t.driver.aclose()
        await t.policy.aclose()


async def _train_step(t: Trainer) -> dict[str, float]:
    cfg, start = t.config, time.perf_counter()
    seeds = range(t.state.next_seed, t.state.next_seed + cfg.rollout.tasks_per_step)
    trajs = await t.driver.collect(t) if t.driver is not None else await _collect(
        t, seeds, cfg.rollout.group_size, cfg.rollout.temperature,
        seed=cfg.seed * 100_003 + t.state.step)
    rollout_s = time.perf_counter() - start
    groups = Group.from_trajectories(trajs)
    metrics = rollout_metrics(trajs, groups)
    if metrics["error_rate"] > cfg.algorithm.max_error_rate:
        errors = sorted({x.error or "" for x in trajs if not x.scorable})[:3]
        raise TrainingError(
            f"{metrics['error_rate']:.0%} of step {t.state.step}'s rollouts errored (limit "
            f"algorithm.max_error_rate={cfg.algorithm.max_error_rate}); first errors: {errors}")
    metrics.update(swe_metrics(trajs))  # completion/modification/resolve, when reported
    if t.rewards is not None:  # G-RA / D-RA: the estimator sees the rewritten rewards
        groups = rescore_groups(groups, t.rewards, cfg.algorithm.reward_accumulation)
        metrics.update(accumulation_metrics(groups))
    if t.spa is not None:  # SPA: refit the progress estimator, write ĉ_t into the steps
        groups = await t.spa.on_groups(t, groups, metrics)
    kept = [g for g in groups if len(g.scorable) >= 2
            and not (cfg.algorithm.drop_zero_variance_groups and is_zero_variance(g))]
    if cfg.rollout.context == "summarize":  # SUPO: one sequence per working context
        metrics.update(supo_metrics(trajs))
        samples = supo_samples(kept, t.estimator(kept), cfg.algorithm.supo) if kept else []
    else:
        samples = samples_from_groups(kept, t.estimator(kept), skip_zero_advantage=True) \
            if kept else []
    update_start = time.perf_counter()
    if t.driver is not None:  # async: update in a thread while rollouts go on; then sync
        metrics.update(await t.driver.update(t, samples))
        await t.driver.sync(t)
    else:
        metrics.update(_update(t, samples))
        t.policy.update_weights([])  # the policy shares the trained weights: a new version
    t.state = checkpoint.TrainState(t.state.step + 1,
                                    t.state.next_seed + cfg.rollout.tasks_per_step)
    metrics.update(groups_trained=float(len(kept)), samples=float(len(samples)),
                   trained_tokens=float(sum(x.length for x in samples)),
                   rollout_s=rollout_s, update_s=time.perf_counter() - update_start,
                   policy_version=float(t.policy.policy_version))
    return metrics


async def _collect(t: Trainer, seeds: range, group_size: int, temperature: float,
                   seed: int, evaluation: bool = False) -> list[Trajectory]:
    cfg = t.config
    env_kwargs = {**cfg.env.kwargs, **(cfg.env.eval_kwargs if evaluation else {})}
    if cfg.env.max_turns is not None:
        env_kwargs["max_turns"] = cfg.env.max_turns
    summarize = cfg.rollout.summarize.for_eval() if evaluation else cfg.rollout.summarize
    context = ContextConfig(mode=cfg.rollout.context, history_length=cfg.rollout.history_length,
                            max_prompt_tokens=cfg.rollout.max_prompt_tokens, summarize=summarize)
    sampling = SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p,
                              max_tokens=cfg.rollout.max_tokens, seed=seed)
    config = RolloutConfig(group_size=group_size, concurrency=cfg.rollout.concurrency,
                           step_timeout=cfg.rollout.step_timeout)
    runner = run_groups if t.driver is None else t.driver.run_groups  # Ray / versioned steps
    return await runner(lambda: agentgym.make(cfg.env.id, **env_kwargs),
                        LMAgent(t.policy, context, sampling), list(seeds), config,
                        env_id=cfg.env.id)


def _update(t: Trainer, samples: list[Sample]) -> dict[str, float]:
    """PPO-clip epochs over the step's samples; returns loss statistics."""
    cfg = t.config
    if not samples:
        return {"loss": 0.0}
    if cfg.loss.recompute_logprobs:
        samples = proximal_logprobs(t, samples)  # π_old: the weights before this update
    params = [p for p in t.model.parameters() if p.requires_grad]
    stats, norms, losses = [], [], []
    t.model.train()
    order = np.random.default_rng([cfg.seed, t.state.step])
    for _ in range(cfg.optim.epochs):
        shuffled = [samples[i] for i in order.permutation(len(samples))]
        for part in np.array_split(np.arange(len(shuffled)), cfg.optim.mini_batches):
            if len(part) == 0:
                continue
            t.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for mb in micro_batches([shuffled[i] for i in part],
                                    cfg.optim.max_tokens_per_micro_batch,
                                    t.policy.tokenizer.pad_token_id):
                loss, mb_stats = _micro_batch_loss(t, mb.to(t.policy.device))
                loss.backward()
                total += float(loss.detach())
                stats.append((vars(mb_stats), float(mb_stats.num_tokens)))
            clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
            t.optimizer.step()
            losses.append(total)
    t.model.eval()
    out = weighted_mean(stats)
    out.pop("num_tokens", None)
    return {**out, "loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms))}


def _micro_batch_loss(t: Trainer, mb: Any) -> tuple[torch.Tensor, Any]:
    cfg = t.config.loss
    temperature = t.config.rollout.temperature
    logprobs, entropy = token_logprobs(t.model, mb.input_ids, mb.attention_mask, temperature,
                                       with_entropy=cfg.entropy_coef > 0, mask=mb.loss_mask)
    ref = None
    if t.reference is not None:
        with torch.no_grad():
            ref, _ = token_logprobs(t.reference, mb.input_ids, mb.attention_mask, temperature,
                                    mask=mb.loss_mask)
    return ppo_clip_loss(logprobs, mb.old_logprobs, mb.advantages, mb.loss_mask,
                         clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                         aggregation=cfg.aggregation, normalizer=mb.normalizer(cfg.aggregation),
                         ref_logprobs=ref, kl_coef=cfg.kl_coef, entropy=entropy,
                         entropy_coef=cfg.entropy_coef)


@torch.no_grad()
async def _evaluate(t: Trainer) -> dict[str, float]:
    """Greedy success rate and mean reward on the held-out seeds, and the eval suite if set."""
    cfg = t.config.env
    out: dict[str, float] = {}
    if t.config.eval.suite:  # agentgym.evaluation: eval/<suite>/<entry>/... metrics
        from agentgym.evaluation.training import evaluate_suite

        out.update(await evaluate_suite(t.config, t.policy, t.state.step))
    if not cfg.eval_seeds:
        return out
    seeds = range(cfg.eval_first_seed, cfg.eval_first_seed + cfg.eval_seeds)
    trajs = [x for x in await _collect(t, seeds, 1, 0.0, seed=0, evaluation=True)
             if x.scorable]
    n = max(len(trajs), 1)
    return {**out, "eval/success_rate": sum(map(succeeded, trajs)) / n,
            "eval/reward_mean": sum(x.outcome_reward or 0.0 for x in trajs) / n}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _frozen_copy(model: Any) -> Any:
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def _with_lora(model: Any, config: TrainConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        from agentgym.errors import MissingExtraError

        raise MissingExtraError("peft", "train", "model.lora.enabled") from exc
    lora = config.model.lora
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha,
                                            lora_dropout=lora.dropout,
                                            target_modules=list(lora.target_modules),
                                            task_type="CAUSAL_LM"))
