r"""The torchrun entry point: rank 0 trains, every other rank holds an FSDP shard and serves.

    torchrun --nproc-per-node 4 -m agentgym.trainers.torchrun examples/train_ray.yaml \\
        model.device=cuda distributed.gradient_checkpointing=true

Rank 0 runs :func:`agentgym.trainers.loop.train` as in one process; the others build the
same run (their files apart, no logging sinks) and do only the collective work of each
update (:meth:`agentgym.trainers.distributed.FSDPUpdater.serve`). docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import replace

from agentgym.trainers.config import load_config
from agentgym.trainers.distributed import FSDPUpdater, init
from agentgym.trainers.loop import build, train


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point for torchrun: rank 0 trains (``agentgym.trainers.loop.train``), others serve."""
    parser = argparse.ArgumentParser(prog="torchrun ... -m agentgym.trainers.torchrun",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("config", help="training config YAML")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=1e-6")
    args = parser.parse_args(argv)
    config = load_config(args.config, args.overrides)
    me, _ = init(config.distributed.backend)
    try:
        if me == 0:
            train(config)
        else:  # followers keep their files apart and do only the collective work
            follower = replace(config, run_dir=os.path.join(config.run_dir, f".rank{me}"),
                               tensorboard=False, engine="local",
                               logging=replace(config.logging, wandb=False, rollouts=False))
            run = build(follower)
            assert isinstance(run.updater, FSDPUpdater)
            run.updater.serve()
            run.log.close()
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
