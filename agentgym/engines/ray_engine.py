"""The rollout engine on Ray: env workers and generation workers as actors.

:class:`RayEngine` has the API of :func:`agentgym.rollout.run_groups` (same arguments, same
trajectories in the same order), so a run moves from the embedded engine to Ray by one
config switch (``engine: ray``). Inside, the work is split in two kinds of actor:

- **Env workers** (:class:`EnvWorker`, on CPU nodes): each receives the pickled ``make_env``
  and agent once per call, then plays chunks of episodes with the embedded engine itself
  (``run_groups``, hence ``run_episode``) on its own event loop. The env, and any sandbox it
  opens, is built inside the actor, so it lives on the node that runs it.
- **Generation workers** (:class:`GenerationWorker`, on GPU nodes when ``generation_gpus``
  > 0): each holds a copy of the model behind a :class:`~agentgym.policies.base.Policy`
  (transformers or vLLM) and batches the concurrent ``generate`` calls of every env worker.
  An :class:`~agentgym.rollout.LMAgent` handed to :meth:`RayEngine.run_groups` keeps its
  context and sampling settings; its policy is replaced by a :class:`RemotePolicy` that
  calls these workers. :meth:`RayEngine.sync_weights` pushes new weights to all of them.

All workers sit in one placement group (one bundle per worker, strategy configurable), so a
run either gets the resources it asked for or fails at start with a message.

**Failures.** An env worker that dies (node lost, ``ray.kill``, a crashing env) ends the
episodes it held as ``status="error"`` trajectories; the worker is replaced in its bundle
and the run goes on. A generation worker that dies fails the episodes waiting on it (the
engine turns that into error trajectories) and is replaced, with the last synced weights,
at the next call. More than ``max_worker_failures`` deaths in a row raise
:class:`WorkerFailureError`.
"""

from __future__ import annotations

import asyncio
import copy
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentgym.engines.config import RayConfig
from agentgym.engines.versioned import VersionedAgent
from agentgym.env import Env
from agentgym.errors import AgentGymError, ConfigError, MissingExtraError
from agentgym.policies.base import Completion, GenerationRequest, Policy, TrainablePolicy
from agentgym.rollout import LMAgent, RolloutConfig, run_groups
from agentgym.types import Trajectory


class WorkerFailureError(AgentGymError, RuntimeError):
    """Ray workers keep dying; the run cannot go on."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError("ray", "ray", "The Ray rollout engine") from exc
    return ray


class EnvWorker:
    """Ray actor: plays episodes with the embedded engine, envs built in this process."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[Callable[[], Env], Any, RolloutConfig, str | None]] = {}

    def node(self) -> tuple[str, int]:
        """The Ray node id and process id this worker runs on."""
        return _ray().get_runtime_context().get_node_id(), os.getpid()

    def start_job(self, job: str, make_env: Callable[[], Env], agent: Any,
                  config: RolloutConfig, env_id: str | None) -> None:
        """Keep what the episodes of ``job`` need (only the latest job is kept)."""
        self.jobs = {job: (make_env, agent, config, env_id)}

    async def run(self, job: str, seeds: list[int], first_number: int) -> list[Trajectory]:
        """Play one episode per entry of ``seeds`` (repeats make a group's rollouts).

        ``first_number`` numbers the episodes' sampling seeds as the driver's agent would.
        """
        make_env, agent, config, env_id = self.jobs[job]
        agent = copy.copy(agent)  # chunks run concurrently: each numbers its own episodes
        _set_started(agent, first_number)
        return await run_groups(make_env, agent, seeds, replace(config, group_size=1),
                                env_id=env_id)


class GenerationWorker:
    """Ray actor: one policy backend serving ``generate`` calls from every env worker.

    Args:
        factory: Builds the :class:`~agentgym.policies.base.Policy` in this process.
    """

    def __init__(self, factory: Callable[[], TrainablePolicy]) -> None:
        self.policy = factory()

    def node(self) -> tuple[str, int]:
        """The Ray node id and process id this worker runs on."""
        return _ray().get_runtime_context().get_node_id(), os.getpid()

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Complete the requests (concurrent calls are batched by the backend)."""
        return await self.policy.generate(requests)

    async def update_weights(self, state: Mapping[str, Any], version: int) -> int:
        """Load ``state`` (name -> tensor) and set the policy version; returns it."""
        return await self.policy.update_weights(list(state.items()), version=version)


class RemotePolicy:
    """A :class:`~agentgym.policies.base.Policy` whose calls go to generation workers.

    Calls rotate over the workers; each worker batches what reaches it.

    Args:
        workers: Generation worker actor handles.
        tokenizer: The model's tokenizer (token-exact prompts are built by the caller).
    """

    def __init__(self, workers: Sequence[Any], tokenizer: Any) -> None:
        self.workers, self.tokenizer, self._next = list(workers), tokenizer, 0

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Send the requests to the next worker."""
        worker = self.workers[self._next % len(self.workers)]
        self._next += 1
        return await worker.generate.remote(list(requests))

    async def aclose(self) -> None:
        """Nothing to release here (the engine owns the workers)."""


def _set_started(agent: Any, number: int) -> None:
    inner = agent.agent if isinstance(agent, VersionedAgent) else agent
    if isinstance(inner, LMAgent):
        inner.episodes_started = number


class RayEngine:
    """Runs :func:`~agentgym.rollout.run_groups` on Ray actors (see the module docstring).

    Args:
        config: Workers, resources and failure limits.
        generation: Builds a generation backend inside a worker (picklable, e.g. a
            ``functools.partial`` of ``TransformersPolicy.load``); needed for LM agents.

    Example:
        >>> engine = RayEngine(RayConfig(env_workers=2))  # doctest: +SKIP
        >>> trajs = await engine.run_groups(lambda: agentgym.make("agentgym/Sokoban-v0"),
        ...                                 ScriptedPolicy(), range(8))  # doctest: +SKIP
        >>> await engine.aclose()  # doctest: +SKIP
    """

    def __init__(self, config: RayConfig | None = None, *,
                 generation: Callable[[], Policy] | None = None) -> None:
        ray = _ray()
        config = config or RayConfig()
        self.config, self.generation = config, generation
        self._owns_cluster = not ray.is_initialized()
        if self._owns_cluster:
            ray.init(address=config.address, num_cpus=config.num_cpus,
                     include_dashboard=False, log_to_driver=False, configure_logging=False)
        self._env_cls = ray.remote(EnvWorker)
        self._gen_cls = ray.remote(GenerationWorker)
        bundles = [{"CPU": config.env_worker_cpus, **config.env_resources}
                   for _ in range(config.env_workers)]
        if generation is not None:
            bundles += [{"CPU": config.generation_cpus, "GPU": config.generation_gpus}
                        for _ in range(config.generation_workers)]
        bundles = [{k: v for k, v in b.items() if v > 0} or {"CPU": 0.001} for b in bundles]
        from ray.util.placement_group import placement_group

        self._pg = placement_group(bundles, strategy=config.placement_strategy)
        ready, _ = ray.wait([self._pg.ready()], timeout=config.startup_timeout)
        if not ready:
            raise ConfigError(
                f"Ray could not reserve {bundles} ({config.placement_strategy}) within "
                f"{config.startup_timeout} s; the cluster has {ray.cluster_resources()}. Lower "
                "ray.env_workers / ray.env_worker_cpus / ray.generation_gpus, or add nodes")
        self.env_workers = [self._new_env_worker(i) for i in range(config.env_workers)]
        self.generation_workers = [self._new_generation_worker(i)
                                   for i in range(config.generation_workers)] \
            if generation is not None else []
        self.policy_version = 0
        self._weights: Any = None  # ObjectRef of the last synced state, for replacements
        self.failures = 0  # worker deaths in a row
        self.replaced = 0  # workers replaced so far

    def _options(self, bundle: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            self._pg, placement_group_bundle_index=bundle), "max_concurrency": 1000}

    def _new_env_worker(self, index: int) -> Any:
        cfg = self.config
        return self._env_cls.options(num_cpus=cfg.env_worker_cpus,
                                     resources=dict(cfg.env_resources),
                                     **self._options(index)).remote()

    def _new_generation_worker(self, index: int) -> Any:
        cfg = self.config
        return self._gen_cls.options(num_cpus=cfg.generation_cpus, num_gpus=cfg.generation_gpus,
                                     **self._options(cfg.env_workers + index)
                                     ).remote(self.generation)

    async def run_groups(self, make_env: Callable[[], Env], agent: Any, seeds: Sequence[int],
                         config: RolloutConfig | None = None, *, env_id: str | None = None,
                         on_done: Callable[[Trajectory], None] | None = None
                         ) -> list[Trajectory]:
        """Like :func:`agentgym.rollout.run_groups`, on the env and generation workers.

        ``make_env`` and ``agent`` are pickled (cloudpickle) to the env workers. An
        :class:`~agentgym.rollout.LMAgent` generates on the generation workers.

        Raises:
            WorkerFailureError: Workers died more than ``max_worker_failures`` times in a row.
        """
        config = config or RolloutConfig()
        await self._ensure_generation_workers()
        remote_agent, first = self._remote_agent(agent), _started_of(agent)
        seeds_all = [s for s in seeds for _ in range(config.group_size)]
        chunk = self.config.episodes_per_call
        todo = list(range(0, len(seeds_all), chunk))
        results: list[Trajectory | None] = [None] * len(seeds_all)
        job = uuid.uuid4().hex
        ready: dict[int, Any] = {}  # worker index -> handle that holds this job
        fatal: list[str] = []

        async def serve(index: int) -> None:
            while todo and not fatal:
                start = todo.pop(0)
                part = seeds_all[start:start + chunk]
                handle = self.env_workers[index]
                try:
                    if ready.get(index) is not handle:
                        await handle.start_job.remote(job, make_env, remote_agent, config,
                                                      env_id)
                        ready[index] = handle
                    trajs = await handle.run.remote(job, part, first + start)
                    self.failures = 0
                except Exception as exc:  # the actor died, or its call failed
                    trajs = [_error(seed, env_id, f"env worker failed: {exc!r:.300}")
                             for seed in part]
                    if not self._worker_failed(index, handle, exc):
                        fatal.append(f"{exc!r:.500}")
                for offset, traj in enumerate(trajs):
                    results[start + offset] = traj
                    if on_done is not None:
                        on_done(traj)

        # Several chunks in flight per worker, up to the requested concurrency.
        slots = max(1, -(-config.concurrency // (chunk * len(self.env_workers))))
        await asyncio.gather(*(serve(i) for _ in range(slots)  # round-robin first chunks
                               for i in range(len(self.env_workers))))
        if fatal:
            raise WorkerFailureError(
                f"Ray workers died {self.failures} times in a row (limit "
                f"ray.max_worker_failures={self.config.max_worker_failures}); last error: "
                f"{fatal[0]}. Check the env constructor and the nodes' memory")
        _set_started(agent, first + len(seeds_all))
        return [t for t in results if t is not None]

    def _worker_failed(self, index: int, handle: Any, exc: BaseException) -> bool:
        """Replace a failed env worker; False once failures in a row pass the limit."""
        if self.env_workers[index] is not handle:
            return True  # another chunk on the same dead worker already replaced it
        self.failures += 1
        if self.failures > self.config.max_worker_failures:
            return False
        _ray().kill(handle, no_restart=True)
        self.env_workers[index] = self._new_env_worker(index)
        self.replaced += 1
        return True

    async def _ensure_generation_workers(self) -> None:
        """Replace dead generation workers, loading the last synced weights into them."""
        for i, handle in enumerate(self.generation_workers):
            try:
                await asyncio.wait_for(handle.node.remote(), timeout=self.config.startup_timeout)
                continue
            except Exception as exc:  # dead (or hung): replace it
                self.failures += 1
                if self.failures > self.config.max_worker_failures:
                    raise WorkerFailureError(
                        f"generation workers died {self.failures} times in a row (limit "
                        f"ray.max_worker_failures={self.config.max_worker_failures}); last "
                        f"error: {exc!r:.500}") from exc
                _ray().kill(handle, no_restart=True)
            fresh = self._new_generation_worker(i)
            if self._weights is not None:
                await fresh.update_weights.remote(self._weights, self.policy_version)
            self.generation_workers[i] = fresh
            self.replaced += 1

    def _remote_agent(self, agent: Any) -> Any:
        inner = agent.agent if isinstance(agent, VersionedAgent) else agent
        if not isinstance(inner, LMAgent):
            return agent  # model-free agents travel as they are
        if not self.generation_workers:
            raise ConfigError("an LMAgent needs generation workers: build the RayEngine with "
                              "generation=<factory of a Policy>, e.g. functools.partial("
                              "TransformersPolicy.load, PATH)")
        remote = LMAgent(RemotePolicy(self.generation_workers, inner.policy.tokenizer),
                         inner.context, inner.sampling)
        return VersionedAgent(remote) if isinstance(agent, VersionedAgent) else remote

    async def sync_weights(self, state: Mapping[str, Any], version: int | None = None) -> int:
        """Load ``state`` (name -> CPU tensor) into every generation worker.

        Each worker finishes the batch it is decoding first, so every completion comes from
        one version. Returns the new policy version.
        """
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        self._weights = _ray().put(dict(state))
        await asyncio.gather(*(w.update_weights.remote(self._weights, self.policy_version)
                               for w in self.generation_workers))
        return self.policy_version

    async def nodes(self) -> dict[str, list[tuple[str, int]]]:
        """Where each worker runs: ``{"env": [(node_id, pid), ...], "generation": [...]}``."""
        env = await asyncio.gather(*(w.node.remote() for w in self.env_workers))
        gen = await asyncio.gather(*(w.node.remote() for w in self.generation_workers))
        return {"env": list(env), "generation": list(gen)}

    async def aclose(self) -> None:
        """Kill the workers and free the placement group (and the local cluster we started)."""
        ray = _ray()
        if not ray.is_initialized():
            return
        for handle in self.env_workers + self.generation_workers:
            ray.kill(handle, no_restart=True)
        self.env_workers, self.generation_workers = [], []
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self._pg)
        if self._owns_cluster:
            ray.shutdown()


def _started_of(agent: Any) -> int:
    inner = agent.agent if isinstance(agent, VersionedAgent) else agent
    return inner.episodes_started if isinstance(inner, LMAgent) else 0


def _error(seed: int, env_id: str | None, message: str) -> Trajectory:
    return Trajectory(uuid.uuid4().hex, f"seed-{seed}", f"{env_id or 'env'}:{seed}", (),
                      status="error", error=message, env_id=env_id, seed=seed)
