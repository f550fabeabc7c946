r"""Supervised fine-tuning on demonstrations (behaviour cloning): ``agentgym sft CONFIG``.

    L(θ) = − (1 / Σ_i |y_i|) · Σ_i Σ_t log π_θ(y_{i,t} | x_i, y_{i,<t})

over the imitated steps i of the kept trajectories: x_i is the prompt the policy saw at that
step (masked: no loss), y_i the action's tokens ending with EOS; a token mean over each
optimizer step's batch, accumulated over micro-batches exactly as the RL update does.

Data: expert episodes (``agentgym rollout ENV --policy expert``) or model rollouts filtered
to the successful ones, i.e. rejection-sampling fine-tuning (RFT; Yuan et al. 2023, "Scaling
Relationship on Learning Mathematical Reasoning with Large Language Models", arXiv
2308.01825). The loop form of RFT is ``agentgym train`` with ``algorithm.estimator: rft``
(``agentgym/trainers/advantages/rft.py``). Prompts are the RL rollouts' own
(:mod:`agentgym.trainers.sft_data`), so the SFT model meets in RL the prompts it learned on.

Choices: constant learning rate; one pass order per epoch drawn from ``(seed, epoch)``;
checkpoints in the ``train`` format (``agentgym/trainers/checkpoint.py``; the step is the optimizer
step), so ``--resume`` and ``model.path: RUN/checkpoints/step-N`` work as for ``train``;
held-out greedy evaluation (the trainer's own) before the first and after the last step, each
task's outcome kept in ``run_dir/heldout`` and the gain over the base model given with its
paired interval (:mod:`agentgym.trainers.heldout`); with ``model.generation: vllm`` it runs
on a vLLM engine that is sent the weights before each one, and the exported model carries
its last evaluation (``model/heldout.json``), which ``agentgym train`` from it takes instead
of evaluating the same weights again (:mod:`agentgym.trainers.heldout_record`).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.context import ContextConfig
from agentgym.errors import ConfigError
from agentgym.policies.hf import TransformersPolicy, fit_threads
from agentgym.trainers import checkpoint, heldout
from agentgym.trainers.batching import Sample, micro_batches
from agentgym.trainers.checkpoint import Checkpointer, TrainState
from agentgym.trainers.config import TrainConfig, save_config
from agentgym.trainers.finite import check_update, check_weights
from agentgym.trainers.heldout_record import Record, evaluation_key, weights_digest
from agentgym.trainers.loop import evaluate_held_out, holds_out
from agentgym.trainers.lora import with_lora
from agentgym.trainers.loss import packed_token_logprobs, token_logprobs
from agentgym.trainers.metrics import MetricsLog
from agentgym.trainers.models import checkpoint_activations, export_model, load_trained_model
from agentgym.trainers.precision import Autocast, training_precision
from agentgym.trainers.preflight import check_model
from agentgym.trainers.sft_config import SFTConfig, SFTOptimConfig
from agentgym.trainers.sft_data import demonstration_samples, load_demonstrations
from agentgym.trainers.vllm_generation import ENGINES, generation_state


def context_config(config: SFTConfig) -> ContextConfig:
    """The context manager settings of the run's ``rollout`` section."""
    r = config.rollout
    return ContextConfig(mode=r.context, history_length=r.history_length,
                         max_prompt_tokens=r.max_prompt_tokens)


def batches(episodes: Sequence[str], optim: SFTOptimConfig, seed: int) -> list[list[int]]:
    """Sample indices of every optimizer step, all epochs, in order (deterministic).

    ``episodes[i]`` names sample i's trajectory. Each epoch shuffles whole episodes and
    cuts their steps, kept in order and together, into batches of ``optim.batch_size``: a
    full-history episode's steps then share a forward pass, where packing computes them as
    its last step's sequence (each step's prompt is a prefix of the next one's).
    """
    owners: dict[str, list[int]] = {}
    for i, name in enumerate(episodes):
        owners.setdefault(name, []).append(i)
    groups = list(owners.values())
    out: list[list[int]] = []
    for epoch in range(optim.epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(groups))
        flat = [i for g in order for i in groups[g]]
        out += [flat[i:i + optim.batch_size] for i in range(0, len(flat), optim.batch_size)]
    return out


def nll_step(model: torch.nn.Module, batch: Sequence[Sample], *, budget: int, pad_id: int,
             device: torch.device | str, backward: bool = True, pack: bool = False,
             autocast: Autocast = "none") -> tuple[float, int]:
    """The token-mean NLL of ``batch`` (gradients accumulated when ``backward``).

    Returns:
        ``(loss, completion tokens)``.
    """
    if backward and torch.device(device).type == "cpu":
        fit_threads()  # the machine now, not as it was when the run's policy was built
    total = sum(s.num_completion_tokens for s in batch)
    loss_sum = 0.0
    score = packed_token_logprobs if pack else token_logprobs
    for mb in micro_batches(list(batch), budget, pad_id, pack=pack):
        mb = mb.to(device)
        with torch.set_grad_enabled(backward), training_precision(device, autocast):
            logp, _ = score(model, mb.input_ids, mb.attention_mask, 1.0,
                                     mask=mb.loss_mask)
            loss = -(logp * mb.loss_mask).sum() / max(total, 1)
        if backward:
            loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum, total


def demonstration_loss(model: torch.nn.Module, samples: Sequence[Sample], *, pad_id: int,
                       device: torch.device | str = "cpu", budget: int = 4096) -> float:
    """Token-mean NLL of the model on ``samples`` (no gradients)."""
    was_training = model.training
    model.eval()
    loss, _ = nll_step(model, samples, budget=budget, pad_id=pad_id, device=device,
                       backward=False)
    model.train(was_training)
    return loss


def sft(config: SFTConfig, resume: bool = False, progress: Any = None) -> Path:
    """Run (or resume) supervised fine-tuning; returns the run directory.

    Raises:
        ConfigError: Existing checkpoints without ``resume`` (or none with it), no
            demonstration left after filtering, or a demonstrated action longer than
            ``rollout.max_tokens``.
    """
    run_dir = Path(config.run_dir)
    last = checkpoint.resume_point(run_dir, resume)  # checked before any model loads
    trajs, read = load_demonstrations(config.data)
    check_model(config.model)  # a folder that is no model, a device torch lacks: now
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    model, tokenizer = load_trained_model(config.model.path, device=config.model.device,
                                          dtype=config.model.dtype)
    samples = demonstration_samples(trajs, tokenizer, context_config(config),
                                    skip_invalid_steps=config.data.skip_invalid_steps)
    if not samples:
        raise ConfigError(f"the {len(trajs)} kept trajectories hold no step to imitate (every "
                          "step invalid or without an action); check data.skip_invalid_steps")
    too_long = [x.num_completion_tokens for x in samples
                if x.num_completion_tokens > config.rollout.max_tokens]
    if too_long:  # the model would learn actions it is cut off from finishing when it acts
        raise ConfigError(
            f"{len(too_long)} of {len(samples)} demonstrated actions are longer than "
            f"rollout.max_tokens={config.rollout.max_tokens} (longest: {max(too_long)} "
            "tokens, end of turn included), so a model that learns them is cut off mid-action "
            "when it acts, in this run's held-out evaluation and in RL with the same rollout "
            f"section; set rollout.max_tokens={max(too_long)} or more here and in the RL config")
    if config.model.lora.enabled:
        model = with_lora(model, config.model.lora)
    if config.optim.gradient_checkpointing:
        checkpoint_activations(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.optim.lr,
                                  weight_decay=config.optim.weight_decay)
    state = TrainState(0, 0)
    if last is not None:
        state = checkpoint.load(last, model, optimizer)
    policy = TransformersPolicy(model, tokenizer, max_batch_size=config.model.max_batch_size,
                                seed=config.seed)
    log = MetricsLog(run_dir, config.tensorboard, start_step=state.step)
    log_data = {"data/trajectories_read": float(read), "data/trajectories": float(len(trajs)),
                "data/samples": float(len(samples)),
                "data/tokens": float(sum(s.num_completion_tokens for s in samples))}
    try:
        record = asyncio.run(_run(config, model, optimizer, policy, samples, state, log,
                                  log_data, progress))
    finally:
        log.close()
    if config.export:
        export_model(model, tokenizer, run_dir / "model")
        if record is not None:  # its held-out evaluation travels with it (heldout_record)
            record.write(run_dir / "model")
    return run_dir


class HeldOut:
    """The SFT's held-out evaluations, in this process or on a vLLM engine.

    The engine is sent the weights before each one (no engine, and none of its memory, when
    nothing is evaluated).

    The evaluation after step ``export_step`` (the weights the run exports; None: it exports
    none) is kept as a :class:`~agentgym.trainers.heldout_record.Record` for the model folder.
    """

    def __init__(self, config: TrainConfig, model: Any, policy: TransformersPolicy,
                 export_step: int | None) -> None:
        self.config, self.model, self.policy = config, model, policy
        self.engine: Any = None
        if config.model.generation in ENGINES and holds_out(config):
            from agentgym.trainers.vllm_generation import engine_policy

            self.engine = engine_policy(config)
        self.export_step = export_step
        self.key = evaluation_key(config, self.engine.tokenizer) \
            if self.engine is not None else None
        self.record: Record | None = None

    async def __call__(self, step: int) -> dict[str, float]:
        """Evaluate the weights after ``step`` steps; outcomes go to ``run_dir/heldout``."""
        if self.engine is None:
            return await evaluate_held_out(self.config, self.policy, step=step)
        weights = generation_state(self.config, self.model)
        await self.engine.update_weights(weights, version=self.policy.policy_version)
        out = await evaluate_held_out(self.config, self.engine, step=step)
        suspend = getattr(self.engine, "suspend", None)
        if suspend is not None:
            await suspend()  # a llama.cpp server gives its memory to the training steps
        outcomes = heldout.read_outcomes(self.config.run_dir, step)
        if self.key is not None and step == self.export_step and outcomes is not None:
            self.record = Record(self.key, weights_digest(weights),
                                 {k: v for k, v in out.items() if k.startswith("eval/")},
                                 outcomes)
        return out

    async def aclose(self) -> None:
        """Shut the engine down, if one was started."""
        if self.engine is not None:
            await self.engine.aclose()


async def _run(config: SFTConfig, model: Any, optimizer: torch.optim.Optimizer,
               policy: TransformersPolicy, samples: list[Sample], state: TrainState,
               log: MetricsLog, log_data: dict[str, float], progress: Any) -> Record | None:
    """The optimizer steps and held-out evaluations; returns the last one's record, if any."""
    plan = batches([x.traj_id for x in samples], config.optim, config.seed)
    per_epoch = math.ceil(len(samples) / config.optim.batch_size)
    checkpointer = Checkpointer(Path(config.run_dir), config.save_every,
                                resumable=config.resumable_checkpoints)
    train_config = config.as_train_config()
    pad_id = policy.tokenizer.pad_token_id
    clip = config.optim.grad_clip if config.optim.grad_clip > 0 else float("inf")
    params = [p for p in model.parameters() if p.requires_grad]
    task = progress.add_task("sft", total=len(plan), completed=state.step) \
        if progress is not None else None
    held_out = HeldOut(train_config, model, policy, len(plan) if config.export else None)

    try:
        if state.step == 0:
            log.log(0, {**log_data, **await held_out(0)})
        epoch_losses: list[float] = []
        while state.step < len(plan):
            start = time.perf_counter()
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss, tokens = nll_step(model, [samples[i] for i in plan[state.step]],
                                    budget=config.optim.max_tokens_per_micro_batch,
                                    pad_id=pad_id, device=policy.device,
                                    pack=config.optim.pack_prefixes,
                                    autocast=config.optim.autocast)
            norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
            check_update(state.step + 1, loss, norm)  # NaN/inf: stop before the weights
            optimizer.step()
            check_weights(state.step + 1, ((n, p) for n, p in model.named_parameters()
                                           if p.requires_grad))
            model.eval()
            await policy.update_weights([])  # shared weights: a new version for generation
            state = TrainState(state.step + 1, 0)
            step = state.step
            epoch_losses.append(loss)
            metrics = {"loss": loss, "grad_norm": norm, "trained_tokens": float(tokens),
                       "epoch": (step - 1) // per_epoch + 1,
                       "update_s": time.perf_counter() - start}
            if step % per_epoch == 0:
                metrics["epoch_loss"] = float(np.mean(epoch_losses))
                epoch_losses = []
            if (config.eval_every and step % config.eval_every == 0) or step == len(plan):
                metrics.update(await held_out(step))
            log.log(step, metrics)
            if checkpointer.due(step, last=len(plan)):
                checkpointer.save(state, model, optimizer)
            if task is not None and progress is not None:
                progress.update(task, completed=step,
                                description=f"sft epoch {metrics['epoch']} loss {loss:.4f}")
    finally:
        await policy.aclose()
        await held_out.aclose()
    return held_out.record
