"""Generate with an in-process transformers model: dynamic batching, a KV cache, exact log-probs.

:class:`TransformersPolicy` implements :class:`~agentgym.policies.base.Policy`.

**Batching.** Each ``generate`` call queues its requests and awaits them. A worker task waits
``batch_wait_ms`` for more to arrive, takes up to ``max_batch_size``, left-pads them and
decodes them together in one worker thread (so the event loop keeps stepping envs), then
hands every caller its completions. Episodes that call ``generate`` one request at a time
thus share forward passes; :attr:`TransformersPolicy.stats` counts batches and passes.

**Decoding.** Our own loop over the KV cache, so every row keeps its own temperature, top_p,
max_tokens, stop strings and seed (its own ``torch.Generator``); ``temperature=0`` is greedy.
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

**Stopping.** A request whose caller is cancelled (a step timeout, Ctrl-C) leaves the batch
at the next decoded token, and a batch with no caller left stops, so no decoding outlives
its callers; :meth:`TransformersPolicy.aclose` stops the batch in progress the same way.

**Threads.** On CPU, torch's intra-op threads are capped at the CPUs this process may use
(its affinity and cgroup quota, :func:`machine_threads`): more threads than cores only
contend.

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
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agentgym.errors import AgentGymError, ConfigError, MissingExtraError, did_you_mean
from agentgym.policies.base import Completion, FinishReason, GenerationRequest, SamplingParams
from agentgym.policies.models import load_model, prepare_tokenizer
from agentgym.prompting import render_prompt

try:
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from agentgym.policies.kv_cache import GrowingLayer, PrefixStore
    from agentgym.policies.sampling import completion_logprobs, sample_next
except ImportError as exc:  # this module is imported only when the backend is used
    raise MissingExtraError(exc.name or "torch", "train", "The transformers backend") from exc

__all__ = ["GenerationStats", "PolicyClosedError", "TransformersPolicy", "completion_logprobs",
           "machine_threads", "sample_next"]

_STOP_WINDOW_EXTRA = 8  # tokens decoded beyond the longest stop string when checking stops
_MIN_SHARED_PREFIX = 8  # shorter common prefixes are not worth an extra forward pass


class PolicyClosedError(AgentGymError, RuntimeError):
    """The policy was used after ``aclose``."""


@dataclass
class GenerationStats:
    """Counters of the work a :class:`TransformersPolicy` did (read them to check batching)."""

    requests: int = 0
    """Requests received."""
    batches: int = 0
    """Batches decoded (one prefill each)."""
    forward_passes: int = 0
    """Model calls, prefills included."""
    prefill_tokens: int = 0
    """Prompt tokens run through the model (shared prefixes and repeated prompts count once)."""
    cached_tokens: int = 0
    """Prompt tokens taken from the prefix cache or the batch's shared prefix, not run."""
    prefill_s: float = 0.0
    """Seconds spent in prefills."""
    completion_tokens: int = 0
    """Tokens sampled."""
    largest_batch: int = 0
    """Most rows decoded together."""


@dataclass
class _Job:
    """One request waiting in the queue."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    future: asyncio.Future[Completion]
    cancelled: bool = False
    """Set (from the event loop) when the caller gave up: the decoder drops the row."""


@dataclass
class _Row:
    """Decoding state of one request inside a batch."""

    job: _Job
    generator: torch.Generator | None
    max_tokens: int
    stops: tuple[str, ...]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None


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
        self.model: Any = model.to(device).eval() if device is not None else model.eval()
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.device = next(self.model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_ms = batch_wait_ms
        self.share_prefix = share_prefix
        self.prefix_store = PrefixStore(int(prefix_cache_mb * 2**20) if share_prefix else 0)
        if self.device.type == "cpu":
            fit = threads or machine_threads()
            if threads is not None or torch.get_num_threads() > fit:
                torch.set_num_threads(fit)
        self.policy_version = 0
        self.stats = GenerationStats()
        self.eos_ids = _eos_ids(model, tokenizer)
        self._vocab_size = model.get_input_embeddings().num_embeddings
        self._max_positions: int | None = getattr(model.config, "max_position_embeddings", None)
        self._rng = torch.Generator(device=self.device)
        if seed is None:
            self._rng.seed()
        else:
            self._rng.manual_seed(seed)
        self._pending: list[_Job] = []
        self._running: list[_Job] = []  # the batch being decoded
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
        jobs = [_Job(self._prompt_ids(r), r.params, loop.create_future()) for r in requests]
        if not jobs:
            return []
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

    def _prompt_ids(self, request: GenerationRequest) -> tuple[int, ...]:
        if request.prompt_ids:
            ids = request.prompt_ids
        else:
            text = render_prompt(self.tokenizer, request.messages, request.tools)
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ConfigError("the prompt is empty after tokenization; give messages or ids")
        bad = [i for i in ids if not 0 <= i < self._vocab_size]
        if bad:
            raise ConfigError(f"prompt_ids must be in [0, {self._vocab_size}), got {bad[:5]}")
        if self._max_positions is not None and len(ids) >= self._max_positions:
            raise ConfigError(f"the prompt has {len(ids)} tokens but the model's context is "
                              f"{self._max_positions}; shorten the history (e.g. a context window)")
        return tuple(ids)

    async def _drain(self) -> None:
        """Decode queued jobs batch after batch until the queue is empty."""
        loop = asyncio.get_running_loop()
        while True:
            if 0 < len(self._pending) < self.max_batch_size and self.batch_wait_ms > 0:
                await asyncio.sleep(self.batch_wait_ms / 1000)
            self._pending = [j for j in self._pending
                             if not j.future.done() and j.future.get_loop() is loop]
            if not self._pending:
                return
            batch = self._pending[:self.max_batch_size]
            del self._pending[:self.max_batch_size]
            self._running = batch
            try:
                results = await loop.run_in_executor(self._executor, self._generate_batch, batch)
            except Exception as exc:  # infrastructure fault (e.g. out of memory): tell callers
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(exc)
                continue
            finally:
                self._running = []
            for j, completion in zip(batch, results, strict=True):
                if not j.future.done():
                    j.future.set_result(completion)

    def _generate_batch(self, jobs: list[_Job]) -> list[Completion]:
        """Decode ``jobs`` together (runs in the worker thread)."""
        with self._lock, torch.inference_mode():
            version = self.policy_version
            rows = [self._new_row(j) for j in jobs]
            self._decode(rows)
        self.stats.batches += 1
        self.stats.largest_batch = max(self.stats.largest_batch, len(rows))
        return [Completion(
            text=self.tokenizer.decode(r.ids, skip_special_tokens=True),
            prompt_ids=r.job.prompt_ids, completion_ids=tuple(r.ids),
            logprobs=tuple(r.logprobs), finish_reason=r.finish or "length",
            policy_version=version) for r in rows]

    def _new_row(self, job: _Job) -> _Row:
        p = job.params
        generator = None
        if p.seed is not None and p.temperature > 0:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(p.seed)
        limit = p.max_tokens
        if self._max_positions is not None:
            limit = min(limit, self._max_positions - len(job.prompt_ids))
        return _Row(job, generator, limit, tuple(s for s in p.stop if s))

    def _prefill(self, rows: list[_Row]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """Run the prompts through the model; return the cache, last logits and the mask.

        Identical prompts (a group of G rollouts of one task) run once. Each prompt starts
        from the longest cached prefix it has (the prefix store, or the prefix common to the
        batch, which runs once); its cached keys and values are right-aligned before the
        new tokens, which are left-padded, so pads sit between cached part and new part::

            row 0:  [pad pad c c c c][pad n n]     c = cached, n = run now
            row 1:  [c c c c c c c c][n n n n]
        """
        start = time.perf_counter()
        prompts = [r.job.prompt_ids for r in rows]
        if self.share_prefix:
            slot = {p: k for k, p in enumerate(dict.fromkeys(prompts))}  # prompt -> unique index
            unique, where = list(slot), [slot[p] for p in prompts]
        else:
            unique, where = prompts, list(range(len(prompts)))
        cache: Any = DynamicCache(config=self.model.config)  # its layers are replaced below
        plain = all(type(layer) is DynamicLayer for layer in cache.layers)
        # Sliding-window layers keep their own cache: no prefix reuse for such models.
        sources = self._cached_prefixes(unique) if plain and self.share_prefix \
            else [((), 0)] * len(unique)
        cached = max(m for _, m in sources)  # C: width of the cached part
        width = max(len(p) - m for p, (_, m) in zip(unique, sources, strict=True))  # N
        capacity = cached + width + max(r.max_tokens for r in rows)
        if plain:
            cache.layers = [GrowingLayer(capacity) for _ in cache.layers]
        if cached:
            for li, layer in enumerate(cache.layers):
                ref = next(kv[li][0] for kv, m in sources if m)  # (H, m, D)
                buffers = [ref.new_zeros((len(unique), ref.shape[0], capacity, ref.shape[2]))
                           for _ in range(2)]
                for k, (kv, m) in enumerate(sources):
                    for buffer, part in zip(buffers, kv[li] if m else (), strict=False):
                        buffer[k, :, cached - m:cached] = part[:, :m]
                layer.preload(buffers[0], buffers[1], cached)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(unique), width), pad, dtype=torch.long)
        mask = torch.zeros((len(unique), cached + width), dtype=torch.long)
        for k, (prompt, (_, m)) in enumerate(zip(unique, sources, strict=True)):
            n = len(prompt) - m
            ids[k, width - n:] = torch.tensor(prompt[m:])
            mask[k, cached - m:cached] = 1
            mask[k, cached + width - n:] = 1
        self.stats.prefill_tokens += int(mask[:, cached:].sum())
        self.stats.cached_tokens += sum(m for _, m in sources)
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
        logits = self._forward(ids, cache, mask, positions)
        if len(unique) < len(rows):  # give every row the cache of its prompt
            idx = torch.tensor(where, device=self.device)
            cache.batch_select_indices(idx)
            logits, mask = logits[idx], mask[idx]
        self.stats.prefill_s += time.perf_counter() - start
        return cache, logits, mask

    def _cached_prefixes(self, prompts: list[tuple[int, ...]]) -> list[tuple[Any, int]]:
        """Per prompt, ``(per-layer (keys, values) of shape (H, >=m, D), m)``: m tokens cached.

        The prefix common to the batch is run once (from the store where it can) and stored;
        each prompt then takes the longest prefix the store or that common prefix gives.
        Every prompt keeps at least one token to run: its last logits come from it.
        """
        store, version = self.prefix_store, self.policy_version
        stem = min(_common_prefix_len(prompts), min(map(len, prompts)) - 1)
        stem_kv: Any = ()
        if len(prompts) > 1 and stem >= _MIN_SHARED_PREFIX:
            entry, m = store.lookup(prompts[0], stem, version)
            if m < stem:
                stem_kv = self._run_prefix(prompts[0][:stem], entry, m)
                keys, values = zip(*stem_kv, strict=True)
                store.add(prompts[0][:stem], keys, values, version)
            else:
                assert entry is not None  # m >= stem > 0 tokens were found
                stem_kv = tuple(zip(entry.keys, entry.values, strict=True))
        else:
            stem = 0
        out = []
        for prompt in prompts:
            entry, m = store.lookup(prompt, len(prompt) - 1, version)
            if m > stem:
                assert entry is not None  # m > 0 tokens were found
                out.append((tuple(zip(entry.keys, entry.values, strict=True)), m))
            else:
                out.append((stem_kv, stem))
        return out

    def _run_prefix(self, ids: tuple[int, ...], entry: Any, m: int) -> Any:
        """Keys and values of ``ids`` (one row), of which ``entry`` holds the first ``m``."""
        cache: Any = DynamicCache(config=self.model.config)  # its layers are replaced below
        cache.layers = [GrowingLayer(len(ids)) for _ in cache.layers]
        if m:
            for layer, k, v in zip(cache.layers, entry.keys, entry.values, strict=True):
                buffers = [t.new_empty((1, t.shape[0], len(ids), t.shape[2])) for t in (k, v)]
                buffers[0][0, :, :m], buffers[1][0, :, :m] = k[:, :m], v[:, :m]
                layer.preload(buffers[0], buffers[1], m)
        positions = torch.arange(m, len(ids), device=self.device)[None]
        self._forward(torch.tensor([ids[m:]], device=self.device), cache, None, positions)
        self.stats.prefill_tokens += len(ids) - m
        layers: list[Any] = cache.layers  # GrowingLayers, filled by the forward above
        return tuple((layer.keys[0], layer.values[0]) for layer in layers)

    def _store_rows(self, cache: Any, mask: torch.Tensor, rows: list[_Row],
                    active: list[int], positions: Iterable[int]) -> None:
        """Keep the keys and values of finished rows (prompt + completion) for later calls."""
        store = self.prefix_store
        if store.budget_bytes <= 0 or not all(isinstance(x, GrowingLayer) for x in cache.layers):
            return
        for b in positions:
            row = rows[active[b]]
            if row.job.cancelled:
                continue
            fed = row.job.prompt_ids + tuple(row.ids[:-1])  # the last token was never run
            columns = mask[b].bool()  # (T,) the row's real tokens, pads left out
            store.add(fed, [layer.keys[b][:, columns] for layer in cache.layers],
                      [layer.values[b][:, columns] for layer in cache.layers],
                      self.policy_version)

    def _forward(self, ids: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
        """One model call extending ``cache``; the float32 logits of the last position."""
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.stats.forward_passes += 1
        return out.logits[:, -1].float()  # (B, V)

    def _decode(self, rows: list[_Row]) -> None:
        """Prefill the prompts, then sample token by token with the KV cache.

        A row whose caller gave up leaves the batch at the next token; finished rows are
        stored in the prefix cache as they leave.
        """
        cache, logits, mask = self._prefill(rows)  # logits (B, V), mask (B, T)
        position = mask.sum(-1)  # (B,) position of the token sampled next
        temperature = torch.tensor([r.job.params.temperature for r in rows], device=self.device)
        top_p = torch.tensor([r.job.params.top_p for r in rows], device=self.device)
        active = list(range(len(rows)))  # batch position -> index in rows
        while True:
            tokens, logps = sample_next(logits, temperature, top_p,
                                        [rows[i].generator for i in active], self._rng)
            keep = [b for b, (i, tok, lp) in enumerate(
                zip(active, tokens.tolist(), logps.tolist(), strict=True))
                if self._append(rows[i], tok, lp) and not rows[i].job.cancelled]
            self.stats.completion_tokens += len(active)
            if len(keep) < len(active):
                kept = set(keep)
                self._store_rows(cache, mask, rows, active,
                                 (b for b in range(len(active)) if b not in kept))
            if not keep:
                return
            if len(keep) < len(active):  # finished rows stop costing compute
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                mask, position, tokens = mask[idx], position[idx], tokens[idx]
                temperature, top_p = temperature[idx], top_p[idx]
                active = [active[b] for b in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            logits = self._forward(tokens[:, None], cache, mask, position[:, None])
            position = position + 1

    def _append(self, row: _Row, token: int, logprob: float) -> bool:
        """Record a sampled token; return whether the row goes on."""
        row.ids.append(token)
        row.logprobs.append(logprob)
        if token in self.eos_ids:
            row.finish = "stop"
        elif row.stops and self._hit_stop(row):
            row.finish = "stop"
        elif len(row.ids) >= row.max_tokens:
            row.finish = "length"
        return row.finish is None

    def _hit_stop(self, row: _Row) -> bool:
        # A stop string first appears at the token that completes it, so decoding a window
        # a little longer than the longest stop string is enough (each token is >= 1 char).
        window = max(len(s) for s in row.stops) + _STOP_WINDOW_EXTRA
        text = self.tokenizer.decode(row.ids[-window:], skip_special_tokens=True)
        return any(s in text for s in row.stops)

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
        with self._lock, torch.no_grad():
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
        with self._lock, torch.no_grad():
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

    def _bump(self, version: int | None) -> int:
        self.prefix_store.clear()  # keys and values of the old weights
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    async def aclose(self) -> None:
        """Fail queued requests, stop the batch in progress, end the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        for j in [*self._pending, *self._running]:
            j.cancelled = True  # the decoder stops at its next token
            if not j.future.done():
                j.future.set_exception(PolicyClosedError("the policy was closed"))
        self._pending.clear()
        self.prefix_store.clear()
        worker = self._worker
        if worker is not None and not worker.done():
            if worker.get_loop() is asyncio.get_running_loop():
                await asyncio.wait([worker])
        self._executor.shutdown(wait=False)
        if self._owns_model:
            self.model = None

    async def __aenter__(self) -> TransformersPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def machine_threads() -> int:
    """CPU threads that fit this machine now: the CPUs this process may use, less busy ones.

    The CPUs are the process's affinity, capped by a cgroup v2 CPU quota; from them, the
    one-minute load average of other work is taken off (at least one thread is left). On a
    shared machine, more threads than free cores make every decode step wait for the
    slowest thread: measured with a tiny model on 2 cores under a load of 30, 2 threads
    took 14x as long as 1.
    """
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = max(1, n or 1)
    try:  # a container's quota ("max" = none), e.g. "200000 100000" = 2 CPUs
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    return max(1, min(n, round(n - busy + 0.49)))


def _common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix shared by every prompt."""
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """EOS ids from the tokenizer and the model's generation config."""
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id, *(config_eos if isinstance(config_eos, list | tuple)
                                     else [config_eos])]
    return frozenset(int(i) for i in ids if isinstance(i, int))
