"""Generate with an in-process transformers model: dynamic batching, a KV cache, exact log-probs.

:class:`TransformersPolicy` implements :class:`~agentgym.policies.base.Policy`.

**Batching.** Each ``generate`` call queues its requests and awaits them. A worker task waits
``batch_wait_ms`` for more to arrive, takes up to ``max_batch_size``, left-pads them and
decodes them together in one worker thread (so the event loop keeps stepping envs). Each
caller gets its completion the moment its row ends. Episodes that call ``generate`` one
request at a time thus share forward passes; :attr:`TransformersPolicy.stats` counts batches
and passes.

**Admission** (first come, first served). Requests that arrive while a batch decodes join it
between two tokens while it has fewer than ``max_batch_size`` rows (once the oldest of them
has waited ``batch_wait_ms``, so that near-simultaneous arrivals share one prefill); the
rest wait in arrival order for the next free row. A long completion therefore holds one
row, never the queue: a short request behind it starts at the next token. A pending weight
update stops admission, so the batch in progress ends and the update runs.

**Decoding** (:mod:`agentgym.policies.decoding`). Our own loop over the KV cache, so every
row keeps its own temperature, top_p, max_tokens, stop strings and seed (its own
``torch.Generator``); ``temperature=0`` is greedy.
The prefill runs identical prompts (a group of rollouts of one task) once and the prefix
common to a batch (system prompt, tools) once. The KV cache has room reserved for the
answers, so a step writes in place; a finished row leaves the batch and the cache at once.
Weight updates wait for the batch in progress, so a completion comes from one version.

**Prefix cache across calls.** A :class:`~agentgym.policies.kv_cache.PrefixStore` keeps the
keys and values of the shared prefix and of every finished row's prompt + completion, so a
later prompt that starts the same way (the next turn of a ``full``-context episode, another
task with the same system prompt and tools) runs only its new tokens: prefill over an
episode grows as O(T), not O(T²). The store is emptied when the weights change; greedy
outputs are the same with and without it (tested). ``prefix_cache_mb=0`` turns it off.

**Stopping.** A request whose caller is cancelled (a step timeout, Ctrl-C, a client of the
server that disconnected) leaves the batch at the next decoded token and frees its row, and a
batch with no caller left stops, so no decoding outlives its callers;
:meth:`TransformersPolicy.aclose` stops the batch in progress the same way.

**Prompts.** A prompt longer than the model's context is refused before it is tokenized
where its text alone shows it cannot fit (:attr:`TransformersPolicy.prompt_char_limit`), and
long prompts are rendered and tokenized in a thread, so a huge prompt never stalls the event
loop.

**Threads.** On CPU, torch's intra-op threads are capped at the CPUs this process may use
(its affinity and cgroup quota, :func:`machine_threads`), less the CPUs other processes keep
busy right now: more threads than free cores only contend. The setting is process-wide and
one moment's reading, so training refits it before every update (:func:`fit_threads`).

**Token conventions** (the trainer relies on them):

- Prompt ids: ``request.prompt_ids`` when given, else ``render_prompt(...)`` tokenized with
  ``add_special_tokens=False``, as ``apply_chat_template(tokenize=True)`` does: the template
  writes any BOS itself (SmolLM2's BOS is ``<|im_start|>``, which its template starts with;
  adding it again would double it).
- Completion ids: every sampled token, *including the final EOS* (``<|im_end|>`` for SmolLM2)
  when one was sampled, so training also teaches the model to stop. Generation ends at an
  EOS id (the tokenizer's and the generation config's), after the token that completes a
  stop string (``finish_reason="stop"``), or at ``max_tokens`` or the context limit
  (``"length"``).
- Text: ``tokenizer.decode(completion_ids, skip_special_tokens=True)``; it keeps a matched
  stop string and whatever else the last token held.
- Behaviour log-prob of completion token ``y_t``: ``log_softmax(logits_t / T)[y_t]`` with
  ``T = temperature`` when ``temperature > 0`` and ``T = 1`` when greedy (the raw model
  distribution), ``logits_t`` being the float32 logits given prompt + ``y_<t``. top_p does not
  enter it (it is the tempered model distribution, not the truncated one the token was drawn
  from). :func:`completion_logprobs` recomputes exactly this with one plain forward pass,
  and so does the trainer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from agentgym.errors import AgentGymError, ConfigError, MissingExtraError, did_you_mean
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.policies.models import load_model, prepare_tokenizer
from agentgym.prompting import render_prompt

try:
    import torch

    from agentgym.policies.attention import use_grouped_sdpa
    from agentgym.policies.decoding import BatchDecoder, GenerationStats, Job
    from agentgym.policies.kv_cache import PrefixStore
    from agentgym.policies.sampling import completion_logprobs, sample_next
except ImportError as exc:  # this module is imported only when the backend is used
    raise MissingExtraError(exc.name or "torch", "train", "The transformers backend") from exc

_INLINE_CHARS = 32_000
"""Prompts with more text than this are rendered and tokenized in a thread, off the loop."""
_SEED_RANGE = (-2**63, 2**64)  # what torch.Generator.manual_seed takes

__all__ = ["GenerationStats", "PolicyClosedError", "TransformersPolicy", "allowed_cpus",
           "busy_cpus", "completion_logprobs", "fit_threads", "machine_threads", "sample_next"]


class PolicyClosedError(AgentGymError, RuntimeError):
    """The policy was used after ``aclose``."""


class TransformersPolicy:
    """A :class:`~agentgym.policies.base.Policy` running a transformers causal LM in-process.

    Args:
        model: A causal LM (``AutoModelForCausalLM``); it is put in eval mode.
        tokenizer: Its tokenizer; set in place to pad on the left, with EOS as the pad
            token if it has none.
        device: Move the model there; None keeps the model's device.
        max_batch_size: Most requests decoded together.
        batch_wait_ms: How long a new batch waits for more requests to arrive.
        seed: Seed of the generator used by requests without their own seed.
        share_prefix: Run a prefix common to a batch's prompts, and repeated prompts, once.
        prefix_cache_mb: Memory for keys and values kept across calls (the prefix cache);
            0 turns it off. Needs ``share_prefix``.
        threads: torch intra-op threads on CPU; None = :func:`machine_threads`, when torch
            would use more (a process-wide setting).

    Attributes:
        policy_version: Version of the weights, from 0; bumped by :meth:`update_weights`
            and :meth:`load_state_dict` and recorded in every :class:`Completion`.
        stats: Work counters.

    Example:
        >>> policy = TransformersPolicy.load("smollm2")  # doctest: +SKIP
        >>> request = GenerationRequest((Message("user", "Hi"),))  # doctest: +SKIP
        >>> [completion] = await policy.generate([request])  # doctest: +SKIP
    """

    def __init__(self, model: Any, tokenizer: Any, *, device: str | None = None,
                 max_batch_size: int = 64, batch_wait_ms: float = 5.0,
                 seed: int | None = None, share_prefix: bool = True,
                 prefix_cache_mb: float = 512.0, threads: int | None = None) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
        if batch_wait_ms < 0:
            raise ConfigError(f"batch_wait_ms must be >= 0, got {batch_wait_ms!r}")
        if not prefix_cache_mb >= 0:
            raise ConfigError(f"prefix_cache_mb must be >= 0 (0 = off), got {prefix_cache_mb!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"threads must be a positive int or None, got {threads!r}")
        model = model.to(device).eval() if device is not None else model.eval()
        use_grouped_sdpa(model)  # a decode step no longer copies the cache per query head
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.device = next(model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_ms = batch_wait_ms
        self.share_prefix = share_prefix
        self.prefix_store = PrefixStore(int(prefix_cache_mb * 2**20) if share_prefix else 0)
        self._decoder = BatchDecoder(model, self.tokenizer, self.prefix_store,
                                     share_prefix=share_prefix, seed=seed)
        if self.device.type == "cpu":
            fit = threads or machine_threads()
            if threads is not None or torch.get_num_threads() > fit:
                torch.set_num_threads(fit)
        self.policy_version = 0
        self._vocab_size = model.get_input_embeddings().num_embeddings
        self._max_positions = self._decoder.max_positions
        self._longest_token = _longest_token_chars(self.tokenizer)
        # The queue is shared with the decoding thread (it admits jobs into its batch).
        self._queue_lock = threading.Lock()
        self._pending: list[Job] = []
        self._running: list[Job] = []  # the batch being decoded, joined jobs included
        self._updates_waiting = 0
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="agentgym-generate")
        self._lock = threading.Lock()  # one of: a batch decoding, or a weight update
        self._closed = False
        self._owns_model = False

    @classmethod
    def load(cls, name_or_path: str = "smollm2", *, device: str = "cpu", dtype: str = "float32",
             cache_dir: Path | str | None = None, max_batch_size: int = 64,
             batch_wait_ms: float = 5.0, seed: int | None = None,
             share_prefix: bool = True, prefix_cache_mb: float = 512.0,
             threads: int | None = None) -> TransformersPolicy:
        """Load a model with :func:`~agentgym.policies.models.load_model` and wrap it.

        Args:
            name_or_path: ``"smollm2"`` (the embedded SmolLM2-135M-Instruct) or a local folder.
            device: Torch device.
            dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
            cache_dir: agentgym's cache root for the embedded model.
            max_batch_size: As in the constructor.
            batch_wait_ms: As in the constructor.
            seed: As in the constructor.
            share_prefix: As in the constructor.
            prefix_cache_mb: As in the constructor.
            threads: As in the constructor.

        Returns:
            The policy; it owns the model and drops it on :meth:`aclose`.
        """
        model, tokenizer = load_model(name_or_path, device=device, dtype=dtype,
                                      cache_dir=cache_dir)
        policy = cls(model, tokenizer, max_batch_size=max_batch_size,
                     batch_wait_ms=batch_wait_ms, seed=seed, share_prefix=share_prefix,
                     prefix_cache_mb=prefix_cache_mb, threads=threads)
        policy._owns_model = True
        return policy

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; the i-th completion answers the i-th request.

        Concurrent calls are batched together (see the module docstring).

        Raises:
            ConfigError: A prompt is empty, too long for the model or holds unknown ids.
            PolicyClosedError: The policy was closed.
        """
        if self._closed:
            raise PolicyClosedError("this TransformersPolicy was closed; create a new one")
        if isinstance(requests, GenerationRequest):
            raise ConfigError("generate takes a sequence of GenerationRequest, got a single "
                              "request; pass [request]")
        requests = list(requests)
        for r in requests:
            if not isinstance(r, GenerationRequest):
                raise ConfigError(f"expected GenerationRequest items, got {type(r).__name__}")
        loop = asyncio.get_running_loop()
        # Tokenize here, not in the worker: a bad prompt fails its own caller, not the batch.
        if sum(_text_size(r) for r in requests) > _INLINE_CHARS:
            prompts = await asyncio.to_thread(lambda: [self._prompt_ids(r) for r in requests])
            if self._closed:
                raise PolicyClosedError("this TransformersPolicy was closed; create a new one")
        else:
            prompts = [self._prompt_ids(r) for r in requests]
        now = time.monotonic()
        jobs = [Job(ids, r.params, loop.create_future(), queued_at=now, on_token=r.on_token)
                for ids, r in zip(prompts, requests, strict=True)]
        if not jobs:
            return []
        with self._queue_lock:
            self._pending.extend(jobs)
        self.stats.requests += len(jobs)
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._drain(), name="agentgym-generate-batcher")
        try:
            return list(await asyncio.gather(*(j.future for j in jobs)))
        finally:
            for j in jobs:
                if not j.future.done() or j.future.cancelled():  # the caller gave up:
                    j.cancelled = True  # stop decoding it
                    j.future.cancel()
                else:
                    j.future.exception()  # mark as retrieved: gather re-raised the first

    @property
    def prompt_char_limit(self) -> int | None:
        """Most characters a prompt's text may have and still fit the model's context.

        A token stands for at most as many characters as the vocabulary's longest entry, so
        a longer text cannot fit; None when the model names no context length.
        """
        if self._max_positions is None:
            return None
        return self._max_positions * self._longest_token

    def _prompt_ids(self, request: GenerationRequest) -> tuple[int, ...]:
        _check_seed(request.params)
        if request.prompt_ids:
            ids = request.prompt_ids
        else:
            text = render_prompt(self.tokenizer, request.messages, request.tools)
            limit = self.prompt_char_limit
            if limit is not None and len(text) > limit:
                raise ConfigError(
                    f"the prompt has {len(text)} characters, more than the model's context of "
                    f"{self._max_positions} tokens can hold; shorten the history (e.g. a "
                    "context window)")
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ConfigError("the prompt is empty after tokenization; give messages or ids")
        if self._max_positions is not None and len(ids) >= self._max_positions:
            raise ConfigError(f"the prompt has {len(ids)} tokens but the model's context is "
                              f"{self._max_positions}; shorten the history (e.g. a context window)")
        bad = [i for i in ids if not 0 <= i < self._vocab_size]
        if bad:
            raise ConfigError(f"prompt_ids must be in [0, {self._vocab_size}), got {bad[:5]}")
        return tuple(ids)

    async def _drain(self) -> None:
        """Decode queued jobs batch after batch until the queue is empty."""
        loop = asyncio.get_running_loop()
        while True:
            if 0 < len(self._pending) < self.max_batch_size and self.batch_wait_ms > 0:
                await asyncio.sleep(self.batch_wait_ms / 1000)
            with self._queue_lock:
                self._pending = [j for j in self._pending
                                 if not j.future.done() and j.future.get_loop() is loop]
                if not self._pending:
                    return
                batch = self._pending[:self.max_batch_size]
                del self._pending[:self.max_batch_size]
                self._running = list(batch)
            try:
                await loop.run_in_executor(self._executor, self._generate_batch, batch, loop)
            except Exception as exc:  # infrastructure fault (e.g. out of memory): tell callers
                for j in self._running:
                    if not j.future.done():
                        j.future.set_exception(exc)
            finally:
                with self._queue_lock:
                    self._running = []

    def _admit(self, room: int, loop: asyncio.AbstractEventLoop) -> list[Job]:
        """Queued jobs that join the running batch (called from the decoding thread)."""
        with self._queue_lock:
            if self._closed or self._updates_waiting:
                return []
            live = [j for j in self._pending
                    if not j.cancelled and not j.future.done() and j.future.get_loop() is loop]
            if not live or (len(live) < room and time.monotonic() - live[0].queued_at
                            < self.batch_wait_ms / 1000):
                return []  # let near-simultaneous arrivals gather into one prefill
            taken = live[:room]
            self._pending = live[room:]
            self._running.extend(taken)
            return taken

    @property
    def model(self) -> Any:
        """The model that generates (None once :meth:`aclose` dropped a model it loaded)."""
        return self._decoder.model

    @property
    def eos_ids(self) -> frozenset[int]:
        """Token ids that end a completion (the tokenizer's and the generation config's)."""
        return self._decoder.eos_ids

    @eos_ids.setter
    def eos_ids(self, ids: frozenset[int]) -> None:
        self._decoder.eos_ids = frozenset(ids)

    @property
    def stats(self) -> GenerationStats:
        """Work counters."""
        return self._decoder.stats

    def _generate_batch(self, jobs: list[Job], loop: asyncio.AbstractEventLoop) -> None:
        """Decode ``jobs`` and those that join them (runs in the worker thread)."""

        def finished(job: Job, completion: Completion) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_resolve, job, completion)

        while self._updates_waiting and not self._closed:  # a weight update goes first
            time.sleep(0.001)
        with self._lock, torch.inference_mode():
            self._decoder.run(jobs, self.policy_version, finished=finished,
                              admit=lambda room: self._admit(room, loop),
                              max_rows=self.max_batch_size)


    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], *, strict: bool = True,
                        version: int | None = None) -> int:
        """Load a full state dict into the model; waits for the batch in progress.

        Args:
            state_dict: As for ``torch.nn.Module.load_state_dict``.
            strict: Require exactly the model's keys.
            version: The new :attr:`policy_version` (default: the current one + 1).

        Returns:
            The new policy version.
        """
        with self._update():
            self.model.load_state_dict(state_dict, strict=strict)
            return self._bump(version)

    async def update_weights(self, named_tensors: Mapping[str, torch.Tensor]
                             | Iterable[tuple[str, torch.Tensor]], *,
                             version: int | None = None) -> int:
        """:meth:`load_weights` off the event loop (the trainer's weight sync).

        Raises:
            ConfigError: An unknown name or a shape mismatch (nothing is copied then).
        """
        return await asyncio.to_thread(self.load_weights, named_tensors, version=version)

    def load_weights(self, named_tensors: Mapping[str, torch.Tensor]
                     | Iterable[tuple[str, torch.Tensor]], *, version: int | None = None
                     ) -> int:
        """Copy some named parameters or buffers into the model; waits for the batch in progress.

        Args:
            named_tensors: ``{name: tensor}`` or ``(name, tensor)`` pairs, named as in
                ``model.state_dict()``.
            version: The new :attr:`policy_version` (default: the current one + 1).

        Returns:
            The new policy version.

        Raises:
            ConfigError: An unknown name or a shape mismatch (nothing is copied then).
        """
        items = cast(list[tuple[str, torch.Tensor]], list(
            named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors))
        with self._update():
            own = self.model.state_dict(keep_vars=True)
            for name, tensor in items:
                if name not in own:
                    raise ConfigError(f"the model has no parameter {name!r}"
                                      + did_you_mean(name, own))
                if tuple(own[name].shape) != tuple(tensor.shape):
                    raise ConfigError(f"{name}: expected shape {tuple(own[name].shape)}, "
                                      f"got {tuple(tensor.shape)}")
            for name, tensor in items:
                own[name].copy_(tensor)
            return self._bump(version)

    @contextlib.contextmanager
    def _update(self) -> Iterator[None]:
        """Hold the weights for an update: no job joins the batch in progress meanwhile."""
        with self._queue_lock:
            self._updates_waiting += 1
        try:
            with self._lock, torch.no_grad():
                yield
        finally:
            with self._queue_lock:
                self._updates_waiting -= 1

    def _bump(self, version: int | None) -> int:
        self.prefix_store.clear()  # keys and values of the old weights
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    async def aclose(self) -> None:
        """Fail queued requests, stop the batch in progress, end the thread; idempotent."""
        if self._closed:
            return
        with self._queue_lock:
            self._closed = True
            jobs = [*self._pending, *self._running]
            self._pending.clear()
        for j in jobs:
            j.cancelled = True  # the decoder stops at its next token
            if not j.future.done():
                j.future.set_exception(PolicyClosedError("the policy was closed"))
        self.prefix_store.clear()
        worker = self._worker
        if worker is not None and not worker.done():
            if worker.get_loop() is asyncio.get_running_loop():
                await asyncio.wait([worker])
        self._executor.shutdown(wait=False)
        if self._owns_model:
            self._decoder.model = None

    async def __aenter__(self) -> TransformersPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _resolve(job: Job, completion: Completion) -> None:
    if not job.future.done():
        job.future.set_result(completion)


def _text_size(request: GenerationRequest) -> int:
    """About how many characters the request's prompt renders to (0 for token ids)."""
    if request.prompt_ids:
        return 0
    size = sum(len(m.content) + 16 + sum(len(repr(c.arguments)) for c in m.tool_calls)
               for m in request.messages)
    return size + sum(len(t.description) + len(repr(t.parameters)) for t in request.tools)


def _check_seed(params: SamplingParams) -> None:
    low, high = _SEED_RANGE
    if params.seed is not None and not (isinstance(params.seed, int)
                                        and low <= params.seed < high):
        raise ConfigError(f"seed must be an integer in [-2**63, 2**64), got {params.seed!r}")


def _longest_token_chars(tokenizer: Any) -> int:
    """Characters of the vocabulary's longest entry (byte-level entries count bytes)."""
    try:
        vocab = tokenizer.get_vocab()
        return max(1, max(map(len, vocab))) if vocab else 64
    except (AttributeError, NotImplementedError, TypeError, ValueError):
        return 64  # a tokenizer that cannot list its vocabulary: a generous bound


def allowed_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = max(1, n or 1)
    try:  # a container's quota ("max" = none), e.g. "200000 100000" = 2 CPUs
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def machine_threads() -> int:
    """CPU threads that fit this machine now: the CPUs this process may use, less busy ones.

    The CPUs are :func:`allowed_cpus`; from them, the CPUs that other work keeps busy
    (:func:`busy_cpus`) are taken off (at least one thread is left). On a shared machine,
    more threads than free cores make every decode step wait for the slowest thread:
    measured with a tiny model on 2 cores under a load of 30, 2 threads took 14x as long as 1.
    """
    n = allowed_cpus()
    return max(1, min(n, round(n - busy_cpus() + 0.49)))


def fit_threads() -> int:
    """Set torch's intra-op threads to :func:`machine_threads` now; returns the count.

    For work that runs long after the policy was built (a training update): the fit the
    policy made at its start was one moment's reading, and kept for a whole run it cost an
    SFT whose start met a two-minute type check one of its two threads for all 24 steps
    (53 s a step against 22).
    """
    fit = machine_threads()
    if torch.get_num_threads() != fit:
        torch.set_num_threads(fit)
    return fit


def busy_cpus(seconds: float = 0.2) -> float:
    """How many CPUs other processes keep busy right now, sampled over ``seconds``.

    From ``/proc/stat`` (the machine's CPU time) less ``/proc/self/stat`` (this process's):
    the process's own threads are not other work. Not the load average: it decays over a
    minute, so a job started right after another ended still counted that one (measured:
    each unit of a study run one after another got 1 thread of 2 and ran at half speed).
    Where ``/proc/stat`` cannot be read, the one-minute load average is the estimate.
    """
    try:
        first, own_first = _cpu_times(), _own_ticks()
        time.sleep(seconds)
        second, own_second = _cpu_times(), _own_ticks()
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0
    total = sum(second) - sum(first)
    idle = (second[3] + second[4]) - (first[3] + first[4])  # idle + iowait
    cpus = os.cpu_count() or 1
    if total <= 0:
        return 0.0
    own = (own_second - own_first) / (total / cpus)  # CPUs this process kept busy
    return max(0.0, cpus * (1.0 - idle / total) - own)


def _own_ticks() -> int:
    """This process's user + system CPU time, in the same ticks as ``/proc/stat``."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _cpu_times() -> list[int]:
    """The machine's summed CPU times (the ``cpu`` line of ``/proc/stat``), in ticks."""
    line = Path("/proc/stat").read_text().splitlines()[0]
    return [int(x) for x in line.split()[1:]]
