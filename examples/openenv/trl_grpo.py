"""TRL's GRPO trainer on an agentgym env, through OpenEnv (CPU, the local SmolLM2-135M).

The env runs as an OpenEnv server; TRL only ever talks to it with openenv-core's client:

    agentgym openenv serve agentgym/MentalMath-v0 --kw attempts=1 --port 8001
    python examples/openenv/trl_grpo.py --url http://127.0.0.1:8001 --steps 2

Without ``--url`` the script serves that env itself, in a thread, on a free port.

How it maps onto TRL: the prompts are the env's first messages (one ``reset(seed)`` per
dataset row, the seed kept as a column); the reward function replays each completion in a
fresh session (``reset(seed)`` then ``step({"content": completion})``) and returns the env's
reward. A reward of ``None`` (the env did not score) goes to TRL as ``None``, which TRL
leaves out of that sample's reward, never a made-up 0. MentalMath with ``attempts=1`` is
single-turn, so one step scores it; for multi-turn envs with tools, TRL's
``environment_factory`` (a model whose chat template calls tools, e.g. Qwen3) is the route,
see docs/openenv.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV_ID = "agentgym/MentalMath-v0"
ENV_KWARGS = {"attempts": 1}  # sums of 2..30: SmolLM2 gets some right, so groups vary


@dataclass(frozen=True)
class Outcome:
    """What a run did."""

    steps: int
    """Optimizer steps TRL took."""
    rewards: list[float | None]
    """Every reward the env gave, in the order TRL asked."""
    max_weight_change: float
    """Largest absolute change of any trainable weight (0.0: the policy did not move)."""


@contextlib.contextmanager
def serve_in_thread() -> Iterator[str]:
    """Serve ENV_ID over OpenEnv on a free 127.0.0.1 port, in this process; yields the URL."""
    import uvicorn

    from agentgym.envs.openenv.server import bind, build_app

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(ENV_ID, ENV_KWARGS), log_level="warning",
                                           ws="websockets-sansio"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the OpenEnv server stopped before it listened")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def train(url: str, steps: int = 2, out: Path = Path("runs/trl-grpo-openenv"),
          prompts: int = 8) -> Outcome:
    """Run TRL's GRPO for ``steps`` steps against the OpenEnv server at ``url``."""
    from datasets import Dataset
    from openenv.core.generic_client import GenericEnvClient
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.policies.models import embedded_model_dir

    def first_messages(seed: int) -> list[dict[str, str]]:
        with GenericEnvClient(base_url=url).sync() as env:
            observation = env.reset(seed=seed).observation
        return [{"role": m["role"], "content": m["content"]} for m in observation["messages"]]

    dataset = Dataset.from_list([{"prompt": first_messages(seed), "seed": seed}
                                 for seed in range(prompts)])
    seen: list[float | None] = []

    def env_reward(prompts, completions, seed, **kwargs) -> list[float | None]:
        """The env's reward for each completion, from a fresh session with the row's seed."""
        rewards = []
        for completion, task_seed in zip(completions, seed, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            with GenericEnvClient(base_url=url).sync() as env:
                env.reset(seed=int(task_seed))
                result = env.step({"content": text})
            rewards.append(None if result.reward is None else float(result.reward))
        seen.extend(rewards)
        return rewards

    config = GRPOConfig(
        output_dir=str(out), max_steps=steps, learning_rate=1e-5, beta=0.0,
        per_device_train_batch_size=8, num_generations=4,  # 2 tasks x 4 completions a step
        max_completion_length=16, temperature=1.0, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(embedded_model_dir()), reward_funcs=env_reward,
                          args=config, train_dataset=dataset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()
              if p.requires_grad}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    change = max(float((after[n].detach() - p).abs().max()) for n, p in before.items())
    return Outcome(trainer.state.global_step, seen, change)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="An OpenEnv server serving " + ENV_ID + " (default: "
                        "serve it here)")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps")
    parser.add_argument("--out", type=Path, default=Path("runs/trl-grpo-openenv"))
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(serve_in_thread())
        outcome = train(url, args.steps, args.out)
    scored = [r for r in outcome.rewards if r is not None]
    print(f"{outcome.steps} GRPO steps; env rewards: {len(outcome.rewards)} completions, "
          f"mean {sum(scored) / max(len(scored), 1):.3f}; largest weight change "
          f"{outcome.max_weight_change:.2e}")


if __name__ == "__main__":
    main()
