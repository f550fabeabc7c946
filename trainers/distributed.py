r"""Multi-GPU policy updates with FSDP (torch.distributed), launched with torchrun.

    torchrun --nproc-per-node 4 -m agentgym.trainers.distributed examples/train_ray.yaml \\
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
refused under FSDP; LoRA is not sharded (refused); a KL reference model is kept whole on
every rank.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from agentgym.errors import ConfigError
from agentgym.trainers.batching import Sample, micro_batches
from agentgym.trainers.metrics import weighted_mean


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
                          "agentgym.trainers.distributed CONFIG`")
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


def shard_model(model: torch.nn.Module, gradient_checkpointing: bool = False,
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
    """The sharded model, its optimizer, and the rank-0 → all-ranks command channel.

    Args:
        model: The FSDP-sharded model.
        optimizer: AdamW over its (sharded) parameters.
        device: Where micro-batches go.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.rank, self.world = rank(), world_size()

    @classmethod
    def wrap(cls, t: Any) -> FSDPUpdater:
        """Shard ``t.model`` and give it a fresh optimizer.

        On rank 0, ``t.model`` becomes the generation copy (full weights, synced after each
        update), which checkpoints and evaluation read.
        """
        cfg = t.config
        if t.state.step > 0:
            raise ConfigError("--resume is not supported for FSDP runs (the optimizer state is "
                              "sharded); start a new run from the last checkpoint's weights "
                              "with model.path=<checkpoint folder>")
        d = cfg.distributed
        device = torch.device(f"cuda:{torch.cuda.current_device()}") \
            if cfg.model.device.startswith("cuda") else torch.device(cfg.model.device)
        model = shard_model(t.model.to(device), d.gradient_checkpointing,
                            d.reshard_after_forward, d.mixed_precision)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                      lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        t.optimizer = optimizer
        if rank() == 0:
            t.model = t.policy.model  # full weights for checkpoints and evaluation
        return cls(model, optimizer, device)

    # -- rank 0 calls these; every other rank mirrors them in serve() --------------------

    def update(self, t: Any, samples: list[Sample]) -> dict[str, float]:
        """One PPO-clip update on all ranks; returns rank-0 metrics over all samples."""
        self._send(("update", samples))
        return self._update(t, samples)

    def recompute(self, t: Any, samples: list[Sample]) -> list[Sample]:
        """Samples with ``completion_logprobs`` from the current weights (all ranks work)."""
        self._send(("recompute", samples))
        return self._recompute(t, samples)

    def full_state(self) -> dict[str, torch.Tensor]:
        """The full weights, gathered on rank 0 (CPU)."""
        self._send(("state", None))
        return self._full_state()

    def stop(self) -> None:
        """Release the other ranks from :meth:`serve`."""
        if self.world > 1 and self.rank == 0:
            self._send(("stop", None))

    def serve(self, t: Any) -> None:
        """Ranks > 0: do what rank 0 asks until it stops."""
        while True:
            command, payload = self._send(None)
            if command == "stop":
                return
            if command == "update":
                self._update(t, payload)
            elif command == "recompute":
                self._recompute(t, payload)
            elif command == "state":
                self._full_state()

    def _send(self, message: Any) -> Any:
        import torch.distributed as dist

        box = [message]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # -- collective work -------------------------------------------------------------------

    def _full_state(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True))

    def _batches(self, t: Any, part: list[Sample]) -> list[tuple[Any, float]]:
        """This rank's micro-batches of one mini-batch, with global normalizers.

        Padded to the largest count over ranks with zero-weight repeats.
        """
        import torch.distributed as dist

        pad = t.policy.tokenizer.pad_token_id
        mine = [part[i] for i in shard_samples(part, self.rank, self.world)]
        limit = t.config.optim.max_tokens_per_micro_batch
        tokens, seqs = sum(s.num_completion_tokens for s in part), len(part)
        out = [(replace(mb, global_tokens=tokens, global_sequences=seqs), float(self.world))
               for mb in (micro_batches(mine, limit, pad) if mine else [])]
        count = torch.tensor([len(out)], device=self.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        filler = replace(micro_batches(part[:1], limit, pad)[0], global_tokens=max(tokens, 1),
                         global_sequences=seqs)
        return out + [(filler, 0.0)] * (int(count) - len(out))

    def _update(self, t: Any, samples: list[Sample]) -> dict[str, float]:
        import torch.distributed as dist

        from agentgym.trainers import loop

        cfg = t.config
        if not samples:
            return {"loss": 0.0}
        if cfg.loss.recompute_logprobs:
            samples = self._recompute(t, samples)
        shim = SimpleNamespace(config=cfg, model=self.model, reference=t.reference)
        params = [p for p in self.model.parameters() if p.requires_grad]
        stats, norms, losses = [], [], []
        self.model.train()
        order = np.random.default_rng([cfg.seed, t.state.step])  # same order on every rank
        for _ in range(cfg.optim.epochs):
            shuffled = [samples[i] for i in order.permutation(len(samples))]
            for idx in np.array_split(np.arange(len(shuffled)), cfg.optim.mini_batches):
                if len(idx) == 0:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                total = torch.zeros((), dtype=torch.float64, device=self.device)
                for mb, scale in self._batches(t, [shuffled[i] for i in idx]):
                    loss, mb_stats = loop._micro_batch_loss(shim, mb.to(self.device))
                    (loss * scale).backward()
                    if scale:
                        total += float(loss.detach())
                        stats.append((vars(mb_stats), float(mb_stats.num_tokens)))
                dist.all_reduce(total)
                clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
                self.optimizer.step()
                losses.append(float(total))
        self.model.eval()
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, stats)
        out = weighted_mean([s for part in everyone for s in part])
        out.pop("num_tokens", None)
        return {**out, "loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms))}

    @torch.no_grad()
    def _recompute(self, t: Any, samples: list[Sample]) -> list[Sample]:
        import torch.distributed as dist

        from agentgym.trainers.loss import token_logprobs

        mine = shard_samples(samples, self.rank, self.world)
        count = torch.tensor([len(mine)], device=self.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        found: dict[int, tuple[float, ...]] = {}
        for k in range(int(count)):  # same number of forwards on every rank
            i = mine[k] if k < len(mine) else 0
            ids = torch.tensor([samples[i].input_ids], device=self.device)
            mask = torch.zeros((1, ids.shape[1] - 1), device=self.device)
            mask[0, samples[i].prompt_len - 1:] = 1.0  # completion targets only
            logprobs, _ = token_logprobs(self.model, ids, torch.ones_like(ids),
                                         t.config.rollout.temperature, mask=mask)
            if k < len(mine):
                found[i] = tuple(logprobs[0, samples[i].prompt_len - 1:].float().tolist())
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, found)
        merged = {i: v for part in everyone for i, v in part.items()}
        return [replace(s, completion_logprobs=merged[i]) for i, s in enumerate(samples)]


async def sync_vllm(policy: Any, state: dict[str, torch.Tensor], version: int) -> int:
    """Load gathered weights into an in-process :class:`~agentgym.policies.vllm.VLLMPolicy`.

    vLLM's own ``load_weights`` maps Hugging Face names (fused qkv / gate_up included); the
    prefix cache is reset because cached KV came from the old weights.
    """
    await policy.update_weights(list(state.items()))
    policy.policy_version = version
    return version


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point for torchrun: rank 0 trains (``agentgym.trainers.loop.train``), others serve."""
    parser = argparse.ArgumentParser(prog="python -m agentgym.trainers.distributed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="training config YAML")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=1e-6")
    args = parser.parse_args(argv)
    from agentgym.trainers.config import load_config
    from agentgym.trainers.loop import build, train

    config = load_config(args.config, args.overrides)
    me, _ = init(config.distributed.backend)
    try:
        if me == 0:
            train(config)
        else:  # followers keep their files apart and do only the collective work
            follower = replace(config, run_dir=os.path.join(config.run_dir, f".rank{me}"),
                               tensorboard=False, engine="local")
            t = build(follower)
            t.driver.distributed.serve(t)
            t.log.close()
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
