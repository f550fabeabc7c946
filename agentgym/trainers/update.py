"""The PPO-clip update: the one place where epochs, mini-batches and micro-batches happen.

    for epoch in range(epochs):                       # passes over the step's samples
        for mini_batch in split(shuffle(samples)):     # one optimizer step each
            for micro_batch in by_token_budget(mini_batch):
                (loss(micro_batch) · scale).backward()   # gradient accumulation
            clip_grad_norm; optimizer.step()

Every update calls :func:`ppo_update`: :class:`LocalUpdater` (in a worker thread, so that
rollouts collected ahead go on) and every FSDP rank. They differ only in how a mini-batch
is cut into this process's micro-batches and how the loss total and statistics are reduced
over processes; that is a :class:`Sharding` (:data:`ONE_PROCESS` here, ``FSDPSharding`` in
:mod:`agentgym.trainers.distributed`).

Exactness: every micro-batch loss is divided by the token (or sequence) count of its whole
mini-batch (:mod:`agentgym.trainers.batching`), so the accumulated gradient equals that of
one forward pass over the mini-batch.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch

from agentgym.policies.hf import fit_threads
from agentgym.trainers import rollout_correction
from agentgym.trainers.batching import MicroBatch, Sample, micro_batches, mini_batch_parts
from agentgym.trainers.config import LossConfig, OptimConfig, TrainConfig
from agentgym.trainers.finite import check_update, check_weights
from agentgym.trainers.loss import LossStats, packed_token_logprobs, ppo_clip_loss, token_logprobs
from agentgym.trainers.metrics import weighted_mean
from agentgym.trainers.precision import Autocast, training_precision

Stats = list[tuple[dict[str, Any], float]]
"""Per micro-batch loss statistics with their token weights (for a weighted mean)."""


@dataclass(frozen=True)
class UpdateConfig:
    """What :func:`ppo_update` reads from a run's config."""

    optim: OptimConfig
    """Epochs, mini-batches, the micro-batch token budget and gradient clipping."""
    loss: LossConfig
    """Clip ranges, aggregation, KL and entropy weights, π_old recomputation."""
    temperature: float
    """Sampling temperature: the loss scores tokens at the temperature they were sampled."""
    seed: int
    """With the step number, seeds the sample order (the same on every rank)."""
    max_tokens: int | None = None
    """L_max of the ``seq_sum`` aggregation (Dr. GRPO's constant length)."""
    skip_zero_advantage: bool = True
    """Run no forward pass for samples whose advantages are all 0 when nothing else in the
    loss reads them (no KL, no entropy bonus); they stay in the normalizers, so the loss is
    the same as without the skip."""
    recompute_missing: bool = False
    """Score π_old in the update for the samples whose generator left some behaviour
    log-prob out (a llama.cpp server gives none to a token that ends inside a multi-byte
    character); only on-policy, where the weights now are the weights that sampled."""

    @property
    def recomputes_old_logprobs(self) -> bool:
        """Whether π_old is recomputed: as the loss config says, else under autocast."""
        return self.loss.recomputes_old_logprobs(self.optim.autocast)

    @property
    def skips_zero_advantage(self) -> bool:
        """Whether zero-advantage samples can be skipped without changing the loss."""
        return (self.skip_zero_advantage and self.loss.kl_coef == 0
                and self.loss.entropy_coef == 0)

    @classmethod
    def of(cls, config: TrainConfig) -> UpdateConfig:
        """The update settings of a training config."""
        longest = max([config.rollout.max_tokens,  # a mix's entries may allow more
                       *(e.max_tokens for e in config.envs if e.max_tokens is not None)])
        on_policy = not (config.async_training.enabled or config.rollout.april.enabled)
        return cls(config.optim, config.loss, config.rollout.temperature, config.seed,
                   config.loss.max_completion_tokens or longest,
                   recompute_missing=on_policy and config.model.generation == "llamacpp")


@dataclass
class Learner:
    """The trained model, its optimizer and (when the KL weight is > 0) the frozen reference.

    Attributes:
        model: The model whose trainable parameters the update changes (FSDP-sharded on
            multi-GPU runs).
        optimizer: The optimizer over its trainable parameters.
        reference: The frozen initial policy for the KL term, or None.
        device: Where micro-batches go.
        pad_token_id: Padding id for micro-batches.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None
    device: torch.device
    pad_token_id: int

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters."""
        return [p for p in self.model.parameters() if p.requires_grad]


class Sharding(Protocol):
    """How one mini-batch is split over processes and how their results are combined."""

    def micro_batches(self, part: list[Sample], max_tokens: int, pad_id: int, *,
                      pack: bool = False, skip_zero_advantage: bool = False
                      ) -> list[tuple[MicroBatch, float]]:
        """This process's micro-batches of ``part``, each with its loss scale (0 = filler)."""
        ...

    def sum_losses(self, total: float) -> float:
        """The mini-batch loss summed over processes."""
        ...

    def gather_stats(self, stats: Stats) -> Stats:
        """Every process's micro-batch statistics."""
        ...

    def recompute(self, learner: Learner, samples: list[Sample], config: UpdateConfig
                  ) -> list[Sample]:
        """The samples with π_old log-probs of the current weights."""
        ...


class OneProcess:
    """The :class:`Sharding` of a single process: every micro-batch here, nothing to reduce."""

    def micro_batches(self, part: list[Sample], max_tokens: int, pad_id: int, *,
                      pack: bool = False, skip_zero_advantage: bool = False
                      ) -> list[tuple[MicroBatch, float]]:
        """All micro-batches of ``part`` (budgeted by packed tokens with ``pack``), scale 1."""
        return [(mb, 1.0) for mb in micro_batches(part, max_tokens, pad_id, pack=pack,
                                                  skip_zero_advantage=skip_zero_advantage)]

    def sum_losses(self, total: float) -> float:
        """``total`` itself."""
        return total

    def gather_stats(self, stats: Stats) -> Stats:
        """``stats`` themselves."""
        return stats

    def recompute(self, learner: Learner, samples: list[Sample], config: UpdateConfig
                  ) -> list[Sample]:
        """:func:`proximal_logprobs` in this process."""
        return proximal_logprobs(learner.model, samples,
                                 budget=config.optim.max_tokens_per_micro_batch,
                                 pad_id=learner.pad_token_id, device=learner.device,
                                 temperature=config.temperature,
                                 pack=config.optim.pack_prefixes,
                                 autocast=config.optim.autocast)


ONE_PROCESS = OneProcess()


def ppo_update(learner: Learner, samples: Sequence[Sample], config: UpdateConfig, *, step: int,
               sharding: Sharding = ONE_PROCESS,
               on_micro_batch: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """PPO-clip epochs over one training step's samples.

    Args:
        learner: The model and optimizer to update.
        samples: The step's samples (every rank passes the same ones).
        config: Schedule and loss settings.
        step: The training step (seeds the sample order with ``config.seed``).
        sharding: How micro-batches are split and reduced over processes.
        on_micro_batch: Called with ``(done, total)`` micro-batches of the whole update
            (every epoch and mini-batch), first with ``done=0``: the update's progress.

    Returns:
        Loss statistics (token-weighted means over micro-batches), ``loss`` (mean over
        optimizer steps of the summed micro-batch losses) and ``grad_norm``.
    """
    if not samples:
        return {"loss": 0.0}
    samples = list(samples)
    corrected: dict[str, float] = {}
    if config.loss.rollout_correction.mode != "none":  # TIS/MIS on π_old / μ
        proximal = sharding.recompute(learner, samples, config)
        samples, corrected = rollout_correction.correct(samples, proximal,
                                                        config.loss.rollout_correction)
        if not samples:
            return {"loss": 0.0, **corrected}
    elif config.recomputes_old_logprobs:  # π_old: the weights now, the update's precision
        # only where the loss reads it: a sample of zero advantages runs no forward pass
        read = [i for i, s in enumerate(samples)
                if not config.skips_zero_advantage or s.advantages.any()]
        fresh = sharding.recompute(learner, [samples[i] for i in read], config)
        for i, s in zip(read, fresh, strict=True):
            samples[i] = s
    elif config.recompute_missing:  # π_old where the generator gave none
        read = [i for i, s in enumerate(samples) if np.isnan(s.completion_logprobs).any()
                and (not config.skips_zero_advantage or s.advantages.any())]
        fresh = sharding.recompute(learner, [samples[i] for i in read], config) if read else []
        for i, s in zip(read, fresh, strict=True):
            samples[i] = s
    optim, params = config.optim, learner.parameters()
    clip = optim.grad_clip if optim.grad_clip > 0 else float("inf")
    skip = config.skips_zero_advantage
    stats: Stats = []
    norms, losses = [], []
    learner.model.train()
    order = np.random.default_rng([config.seed, step])  # the same order on every rank
    plan = []  # per optimizer step, its micro-batches: cut up front to count them
    for _ in range(optim.epochs):
        plan += [sharding.micro_batches([samples[i] for i in part],
                                        optim.max_tokens_per_micro_batch,
                                        learner.pad_token_id, pack=optim.pack_prefixes,
                                        skip_zero_advantage=skip)
                 for part in mini_batch_parts(samples, optim.mini_batches, order,
                                              by=optim.mini_batch_by)]
    done, planned = 0, sum(map(len, plan))
    if on_micro_batch is not None:
        on_micro_batch(0, planned)
    with scaled_lr(learner.optimizer, optim.lr_factor(step)):  # the warm-up, if any
        lr = float(learner.optimizer.param_groups[0]["lr"])
        for index, mini_batch in enumerate(plan, 1):
            learner.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for mb, scale in mini_batch:
                loss, mb_stats = micro_batch_loss(learner, mb.to(learner.device), config)
                (loss if scale == 1.0 else loss * scale).backward()
                if scale:  # a zero-scale filler only keeps the ranks' collectives in step
                    total += float(loss.detach())
                    stats.append((vars(mb_stats), float(mb_stats.num_tokens)))
                done += 1
                if on_micro_batch is not None:
                    on_micro_batch(done, planned)
            losses.append(sharding.sum_losses(total))
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
            # a NaN/inf loss or gradient stops the run before it reaches the weights
            check_update(step + 1, losses[-1], norms[-1], optimizer_step=index,
                         optimizer_steps=len(plan))
            learner.optimizer.step()
    learner.model.eval()
    check_weights(step + 1, ((n, p) for n, p in learner.model.named_parameters()
                             if p.requires_grad),
                  None if sharding is ONE_PROCESS else sharding.sum_losses)
    out = weighted_mean(sharding.gather_stats(stats))
    out.pop("num_tokens", None)
    return {**out, **corrected, "loss": float(np.mean(losses)),
            "grad_norm": float(np.mean(norms)), "lr": lr}


async def ppo_update_in_thread(learner: Learner, samples: Sequence[Sample],
                               config: UpdateConfig, *, step: int, progress: Any = None
                               ) -> dict[str, float]:
    """:func:`ppo_update` in a daemon thread (:func:`in_update_thread`)."""
    return await in_update_thread(
        lambda on_micro_batch: ppo_update(learner, samples, config, step=step,
                                          on_micro_batch=on_micro_batch), progress)


async def in_update_thread(work: Callable[[Callable[[int, int], None]], dict[str, float]],
                           progress: Any = None) -> dict[str, float]:
    """An update in a daemon thread, showing "update micro-batch i/n" on ``progress``.

    The event loop stays free while the update runs (rollouts collected ahead go on), and a
    Ctrl-C (which ``asyncio.run`` turns into cancelling the awaiting task) ends the caller at
    once instead of after the update; the thread does not hold up the exit of the process.

    Args:
        work: The update, called with the ``on_micro_batch(done, total)`` callback that
            :func:`ppo_update` takes; returns its metrics.
        progress: A rich ``Progress`` or :class:`agentgym.phases.Phases`, or None.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[dict[str, float]] = loop.create_future()
    task: list[Any] = []

    def report(count: int, total: int) -> None:  # on the event loop
        if not task:  # with nothing planned, "micro-batch 0/0" would read as a stall
            task.append(progress.add_task(
                "update micro-batch" if total else "update: every advantage is zero, nothing "
                "to train on", total=total or None))
        if total:
            progress.update(task[0], completed=count, total=total)

    def on_micro_batch(count: int, total: int) -> None:  # in the update thread
        if progress is not None:
            _call_soon(loop, report, count, total)

    def run() -> None:
        try:
            out = work(on_micro_batch)
        except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task)
            _call_soon(loop, _settle, done, None, exc)
        else:
            _call_soon(loop, _settle, done, out, None)

    threading.Thread(target=run, name="agentgym-update", daemon=True).start()
    try:
        return await done
    finally:
        if task and hasattr(progress, "remove_task"):
            progress.remove_task(task[0])


@contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, factor: float) -> Iterator[None]:
    """Every parameter group's learning rate times ``factor`` inside the block only."""
    groups = optimizer.param_groups
    base = [g["lr"] for g in groups]
    for g in groups:
        g["lr"] *= factor
    try:
        yield
    finally:
        for g, lr in zip(groups, base, strict=True):
            g["lr"] = lr


class LocalUpdater:
    """The policy update in this process: one PPO-clip update per step.

    Args:
        learner: The trained model and its optimizer.
        config: The update settings.
        split_threads: Give the update half the cores (generation runs in this process at
            the same time: async training on CPU).
    """

    def __init__(self, learner: Learner, config: UpdateConfig,
                 split_threads: bool = False) -> None:
        self.learner, self.config, self.split_threads = learner, config, split_threads

    def update(self, samples: list[Sample], step: int, *, lr_scale: float = 1.0,
               on_micro_batch: Callable[[int, int], None] | None = None) -> dict[str, float]:
        """:func:`ppo_update` with the learning rate times ``lr_scale`` for this update only."""
        if self.split_threads:
            _split_cpu_threads()
        elif torch.device(self.learner.device).type == "cpu":
            fit_threads()  # the machine now, not as it was when the run's policy was built
        with scaled_lr(self.learner.optimizer, lr_scale):  # e.g. VCPO: this update takes η · scale
            return ppo_update(self.learner, samples, self.config, step=step,
                              on_micro_batch=on_micro_batch)

    def proximal(self, samples: list[Sample]) -> list[Sample]:
        """The samples with the current weights' log-probs."""
        return ONE_PROCESS.recompute(self.learner, samples, self.config)

    def close(self) -> None:
        """Nothing to release."""


def _split_cpu_threads() -> None:
    """Half the cores each for in-process generation and the update.

    Both run torch ops at once, from two threads; with the default pools (one thread per
    core each) the OpenMP workers oversubscribe the cores and spin against each other,
    which made an overlapped CPU update many times slower than a serial one.
    """
    cores = os.cpu_count() or 1
    if torch.get_num_threads() > max(1, cores // 2):
        torch.set_num_threads(max(1, cores // 2))


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop closed (the run was interrupted): nobody is waiting
        pass


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the awaiting task was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def micro_batch_loss(learner: Learner, mb: MicroBatch, config: UpdateConfig
                     ) -> tuple[torch.Tensor, LossStats]:
    """The policy loss of one micro-batch (already on the learner's device)."""
    cfg = config.loss
    score = packed_token_logprobs if config.optim.pack_prefixes else token_logprobs
    with training_precision(learner.device, config.optim.autocast):
        logprobs, entropy = score(learner.model, mb.input_ids, mb.attention_mask,
                                  config.temperature, with_entropy=cfg.entropy_coef > 0,
                                  mask=mb.loss_mask)
    ref = None
    if learner.reference is not None:  # None at KL weight 0: no second model in memory
        with torch.no_grad(), training_precision(learner.device, config.optim.autocast):
            ref, _ = score(learner.reference, mb.input_ids, mb.attention_mask,
                           config.temperature, mask=mb.loss_mask)
    return ppo_clip_loss(logprobs, mb.old_logprobs, mb.advantages, mb.loss_mask,
                         clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                         aggregation=cfg.aggregation,
                         normalizer=mb.normalizer(cfg.aggregation, config.max_tokens),
                         ref_logprobs=ref, kl_coef=cfg.kl_coef, entropy=entropy,
                         entropy_coef=cfg.entropy_coef, policy_loss=cfg.policy_loss)


@torch.no_grad()
def proximal_logprobs(model: torch.nn.Module, samples: Sequence[Sample], *, budget: int,
                      pad_id: int, device: torch.device | str, temperature: float,
                      pack: bool = False, autocast: Autocast = "none") -> list[Sample]:
    """The samples with completion log-probs of ``model``'s current weights (π_prox).

    Batched by token budget and scored on completion positions only (the model is asked for
    no logits over the prompt).

    Args:
        model: The model to score with.
        samples: Samples whose ``completion_logprobs`` are replaced.
        budget: Padded tokens per forward pass.
        pad_id: Padding id.
        device: Where the micro-batches go.
        temperature: The sampling temperature.
        pack: Run shared prefixes once (:func:`packed_token_logprobs`).
        autocast: The update's precision, so that π_prox is scored as the update scores π.
    """
    out = list(samples)
    score = packed_token_logprobs if pack else token_logprobs
    for mb in micro_batches(list(samples), budget, pad_id, pack=pack):
        mb = mb.to(device)
        with training_precision(device, autocast):
            logp, _ = score(model, mb.input_ids, mb.attention_mask, temperature,
                            mask=mb.loss_mask)
        for row, i in enumerate(mb.sample_indices):
            s = samples[i]  # completion token k is the target of column P + k - 1
            out[i] = replace(s, completion_logprobs=tuple(
                logp[row, s.prompt_len - 1:s.length - 1].float().tolist()))
    return out
