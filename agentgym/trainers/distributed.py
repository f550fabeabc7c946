r"""Multi-GPU policy updates with FSDP (torch.distributed), launched with torchrun.

    torchrun --nproc-per-node 4 -m agentgym.trainers.torchrun examples/train_ray.yaml \\
        model.device=cuda distributed.gradient_checkpointing=true

Rank 0 runs the training loop (:mod:`agentgym.trainers.loop`) as in one process: rollouts
(in-process on a separate generation copy, or on Ray workers with ``engine: ray``),
advantages, logging, checkpoints. Every rank holds a shard of the trained model (FSDP2
``fully_shard`` per decoder layer, then the root) and its optimizer state. For each update,
rank 0 broadcasts the step's samples; every rank computes the PPO-clip loss on its share of
each mini-batch; FSDP averages the gradients. After the update, the full weights are
gathered on rank 0 and pushed to the generation copy, the Ray generation workers or vLLM.

**Exactness.** With gradient accumulation the loss of a micro-batch is divided by the
*global* token (or sequence) count N of the mini-batch (see :mod:`agentgym.trainers.batching`).
Rank r's share holds N_r of those tokens; its loss is Σ_r-tokens / N, multiplied by the
world size W because FSDP averages gradients: (1/W) Σ_r W ∇(Σ_r / N) = ∇(Σ / N), the
gradient of one process seeing every sample (a gloo test checks this on CPU). Ranks must run
the same number of forward/backward passes (each one gathers and reduce-scatters
parameters), so a rank with fewer micro-batches runs extra ones with zero loss.

**Deviations / limits.** Checkpoints hold the gathered model on rank 0 (``model.safetensors``,
loadable anywhere) but the optimizer state of rank 0's shard only, so ``--resume`` is
refused under FSDP; a KL reference model is kept whole on every rank. With LoRA the
wrapped model is sharded as a whole (frozen base weights and adapters alike) and only the
adapters are gathered and synced after an update.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.trainers.batching import MicroBatch, Sample, micro_batches
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.loss import token_logprobs
from agentgym.trainers.precision import training_precision
from agentgym.trainers.update import Learner, Stats, UpdateConfig, ppo_update


def world_size() -> int:
    """Processes in the default group (1 when torch.distributed is not initialized)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 when torch.distributed is not initialized)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def init(backend: str = "auto") -> tuple[int, int]:
    """Join the process group torchrun set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``).

    Returns:
        ``(rank, world_size)``.
    """
    import torch.distributed as dist

    if "RANK" not in os.environ:
        raise ConfigError("not launched by torchrun: start with `torchrun --nproc-per-node N -m "
                          "agentgym.trainers.torchrun CONFIG`")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def shard_samples(samples: Sequence[Sample], rank: int, world: int) -> list[int]:
    """Indices of this rank's share: longest first, each to the rank with fewest tokens."""
    load, owner = [0] * world, [0] * len(samples)
    for i in sorted(range(len(samples)), key=lambda i: (-samples[i].length, i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += samples[i].length
    return [i for i in range(len(samples)) if owner[i] == rank]


def shard_model(model: Any, gradient_checkpointing: bool = False,
                reshard_after_forward: bool = True, mixed_precision: str = "none"
                ) -> torch.nn.Module:
    """FSDP2 ``fully_shard`` on every decoder layer, then on the root (in place)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if mixed_precision == "bfloat16" else MixedPrecisionPolicy()
    layers = [m for name, m in model.named_modules()
              if isinstance(m, torch.nn.ModuleList) and name.endswith("layers")]
    for block in (b for layer_list in layers for b in layer_list):
        fully_shard(block, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(model, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    return model


class FSDPUpdater:
    """The sharded learner, the rank-0 → all-ranks command channel, and the FSDP sharding.

    It is the :class:`~agentgym.trainers.update.Sharding` that every rank runs
    :func:`~agentgym.trainers.update.ppo_update` with.

    Args:
        learner: The FSDP-sharded model and its optimizer.
        config: The update settings.
    """

    def __init__(self, learner: Learner, config: UpdateConfig) -> None:
        self.learner, self.config = learner, config
        self.rank, self.world = rank(), world_size()

    @classmethod
    def shard(cls, model: torch.nn.Module, reference: torch.nn.Module | None, pad_token_id: int,
              config: TrainConfig) -> FSDPUpdater:
        """Shard (a copy of the weights in) ``model`` and give it a fresh optimizer.

        Raises:
            ConfigError: Resuming (the optimizer state would be sharded).
        """
        d = config.distributed
        device = torch.device(f"cuda:{torch.cuda.current_device()}") \
            if config.model.device.startswith("cuda") else torch.device(config.model.device)
        sharded = shard_model(model.to(device), d.gradient_checkpointing,
                              d.reshard_after_forward, d.mixed_precision)
        optimizer = torch.optim.AdamW([p for p in sharded.parameters() if p.requires_grad],
                                      lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        return cls(Learner(sharded, optimizer, reference, device, pad_token_id),
                   UpdateConfig.of(config))

    # -- rank 0 calls these; every other rank mirrors them in serve() --------------------

    def update(self, samples: list[Sample], step: int, *, lr_scale: float = 1.0,
               on_micro_batch: Callable[[int, int], None] | None = None) -> dict[str, float]:
        """One PPO-clip update on all ranks; returns rank-0 metrics over all samples.

        Raises:
            ValueError: A learning-rate scale other than 1 (VCPO is refused under torchrun).
        """
        if lr_scale != 1.0:
            raise ValueError("a scaled learning rate is not sent to the other ranks")
        self._send(("update", (samples, step)))
        return ppo_update(self.learner, samples, self.config, step=step, sharding=self,
                          on_micro_batch=on_micro_batch)

    def proximal(self, samples: list[Sample]) -> list[Sample]:
        """:meth:`recompute_all` (the :class:`~agentgym.trainers.hooks.Updater` name)."""
        return self.recompute_all(samples)

    def close(self) -> None:
        """:meth:`stop`."""
        self.stop()

    def recompute_all(self, samples: list[Sample]) -> list[Sample]:
        """Samples with ``completion_logprobs`` from the current weights (all ranks work)."""
        self._send(("recompute", samples))
        return self.recompute(self.learner, samples, self.config)

    def full_state(self) -> dict[str, Any]:
        """The trained weights (every one, or only the LoRA adapters), gathered on rank 0 (CPU)."""
        self._send(("state", None))
        return self._full_state()

    def stop(self) -> None:
        """Release the other ranks from :meth:`serve`."""
        if self.world > 1 and self.rank == 0:
            self._send(("stop", None))

    def serve(self) -> None:
        """Ranks > 0: do what rank 0 asks until it stops."""
        while True:
            command, payload = self._send(None)
            if command == "stop":
                return
            if command == "update":
                samples, step = payload
                ppo_update(self.learner, samples, self.config, step=step, sharding=self)
            elif command == "recompute":
                self.recompute(self.learner, payload, self.config)
            elif command == "state":
                self._full_state()

    def _send(self, message: Any) -> Any:
        import torch.distributed as dist

        box = [message]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _full_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Frozen weights (a LoRA base) never change: gathering them would only cost time.
        return get_model_state_dict(self.learner.model, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True, ignore_frozen_params=True))

    # -- the Sharding of ppo_update (collective: every rank calls these in step) -----------

    def micro_batches(self, part: list[Sample], max_tokens: int, pad_id: int, *,
                      pack: bool = False, skip_zero_advantage: bool = False
                      ) -> list[tuple[MicroBatch, float]]:
        """This rank's micro-batches of one mini-batch, with global normalizers.

        Scaled by the world size (FSDP averages gradients); padded to the largest count over
        ranks with zero-scale repeats.
        """
        import torch.distributed as dist

        mine = [part[i] for i in shard_samples(part, self.rank, self.world)]
        tokens, seqs = sum(s.num_completion_tokens for s in part), len(part)
        out = [(replace(mb, global_tokens=tokens, global_sequences=seqs), float(self.world))
               for mb in (micro_batches(mine, max_tokens, pad_id, pack=pack,
                                        skip_zero_advantage=skip_zero_advantage)
                          if mine else [])]
        count = torch.tensor([len(out)], device=self.learner.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        filler = replace(micro_batches(part[:1], max_tokens, pad_id)[0],
                         global_tokens=max(tokens, 1), global_sequences=seqs)
        return out + [(filler, 0.0)] * (int(count) - len(out))

    def sum_losses(self, total: float) -> float:
        """The mini-batch loss summed over ranks."""
        import torch.distributed as dist

        out = torch.tensor(total, dtype=torch.float64, device=self.learner.device)
        dist.all_reduce(out)
        return float(out)

    def gather_stats(self, stats: Stats) -> Stats:
        """Every rank's micro-batch statistics."""
        import torch.distributed as dist

        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, stats)
        return [s for part in everyone for s in part]

    @torch.no_grad()
    def recompute(self, learner: Learner, samples: list[Sample], config: UpdateConfig
                  ) -> list[Sample]:
        """π_old log-probs of the current weights, each rank scoring its share."""
        import torch.distributed as dist

        device = learner.device
        mine = shard_samples(samples, self.rank, self.world)
        count = torch.tensor([len(mine)], device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        found: dict[int, tuple[float, ...]] = {}
        for k in range(int(count)):  # same number of forwards on every rank
            i = mine[k] if k < len(mine) else 0
            ids = torch.tensor([samples[i].input_ids], device=device)
            mask = torch.zeros((1, ids.shape[1] - 1), device=device)
            mask[0, samples[i].prompt_len - 1:] = 1.0  # completion targets only
            with training_precision(device, config.optim.autocast):
                logprobs, _ = token_logprobs(learner.model, ids, torch.ones_like(ids),
                                             config.temperature, mask=mask)
            if k < len(mine):
                found[i] = tuple(logprobs[0, samples[i].prompt_len - 1:].float().tolist())
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, found)
        merged = {i: v for part in everyone for i, v in part.items()}
        return [replace(s, completion_logprobs=merged[i]) for i, s in enumerate(samples)]
