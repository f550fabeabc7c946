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
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import AgentGymError, ConfigError, MissingExtraError, did_you_mean
from agentgym.policies.base import Completion, FinishReason, GenerationRequest, SamplingParams
from agentgym.policies.models import load_model, prepare_tokenizer
from agentgym.prompting import render_prompt

try:
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer
except ImportError as exc:  # this module is imported only when the backend is used
    raise MissingExtraError(exc.name or "torch", "train", "The transformers backend") from exc

_STOP_WINDOW_EXTRA = 8  # tokens decoded beyond the longest stop string when checking stops
_TOP_P_CANDIDATES = 256  # top_p looks at the 256 likeliest tokens first, sorts all if short
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


class _GrowingLayer(DynamicLayer):
    """A KV cache layer with room reserved ahead, so a decode step writes in place.

    ``DynamicLayer`` concatenates the whole cache at every step; at 64 rows of 600 tokens
    that copy costs about as much as the model's own work on CPU.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            shape = (*key_states.shape[:2], max(self.capacity, end), key_states.shape[-1])
            self._k, self._v = key_states.new_empty(shape), value_states.new_empty(shape)
        elif end > self._k.shape[-2]:  # more than planned: grow by half again
            extra = max(end - self._k.shape[-2], self._k.shape[-2] // 2)
            self._k, self._v = (torch.cat([b, b.new_empty((*b.shape[:2], extra, b.shape[-1]))],
                                          dim=-2) for b in (self._k, self._v))
        self._k[:, :, self.length:end] = key_states
        self._v[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]


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
                 seed: int | None = None, share_prefix: bool = True) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
        if batch_wait_ms < 0:
            raise ConfigError(f"batch_wait_ms must be >= 0, got {batch_wait_ms!r}")
        self.model = model.to(device).eval() if device is not None else model.eval()
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.device = next(self.model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_ms = batch_wait_ms
        self.share_prefix = share_prefix
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
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="agentgym-generate")
        self._lock = threading.Lock()  # one of: a batch decoding, or a weight update
        self._closed = False
        self._owns_model = False

    @classmethod
    def load(cls, name_or_path: str = "smollm2", *, device: str = "cpu", dtype: str = "float32",
             cache_dir: Path | str | None = None, max_batch_size: int = 64,
             batch_wait_ms: float = 5.0, seed: int | None = None,
             share_prefix: bool = True) -> TransformersPolicy:
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

        Returns:
            The policy; it owns the model and drops it on :meth:`aclose`.
        """
        model, tokenizer = load_model(name_or_path, device=device, dtype=dtype,
                                      cache_dir=cache_dir)
        policy = cls(model, tokenizer, max_batch_size=max_batch_size,
                     batch_wait_ms=batch_wait_ms, seed=seed, share_prefix=share_prefix)
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
                if not j.future.done():  # the caller was cancelled: skip it if not decoded
                    j.future.cancel()
                elif not j.future.cancelled():
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
            try:
                results = await loop.run_in_executor(self._executor, self._generate_batch, batch)
            except Exception as exc:  # infrastructure fault (e.g. out of memory): tell callers
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(exc)
                continue
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

        Identical prompts (a group of G rollouts of one task) run once. The prefix common to
        all prompts (system prompt, tools) runs once too and its cache is copied to each
        prompt; the rest is left-padded, so pads sit between prefix and suffix.
        """
        prompts = [r.job.prompt_ids for r in rows]
        if self.share_prefix:
            slot = {p: k for k, p in enumerate(dict.fromkeys(prompts))}  # prompt -> unique index
            unique, where = list(slot), [slot[p] for p in prompts]
        else:
            unique, where = prompts, list(range(len(prompts)))
        # Leave every prompt at least one token of its own: its last logits come from it.
        shared = min(_common_prefix_len(unique), min(map(len, unique)) - 1)
        if len(unique) == 1 or shared < _MIN_SHARED_PREFIX or not self.share_prefix:
            shared = 0
        cache = DynamicCache(config=self.model.config)
        capacity = max(map(len, unique)) + max(r.max_tokens for r in rows)
        cache.layers = [_GrowingLayer(capacity) if type(layer) is DynamicLayer else layer
                        for layer in cache.layers]  # sliding-window layers stay as they are
        if shared:
            self._forward(torch.tensor([unique[0][:shared]], device=self.device), cache)
            cache.batch_repeat_interleave(len(unique))
        width = max(map(len, unique)) - shared
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(unique), width), pad, dtype=torch.long)
        mask = torch.zeros((len(unique), shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        for k, prompt in enumerate(unique):
            n = len(prompt) - shared
            ids[k, width - n:] = torch.tensor(prompt[shared:])
            mask[k, shared + width - n:] = 1
        self.stats.prefill_tokens += shared + int(mask[:, shared:].sum())
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        logits = self._forward(ids, cache, mask, positions)
        if len(unique) < len(rows):  # give every row the cache of its prompt
            idx = torch.tensor(where, device=self.device)
            cache.batch_select_indices(idx)
            logits, mask = logits[idx], mask[idx]
        return cache, logits, mask

    def _forward(self, ids: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
        """One model call extending ``cache``; the float32 logits of the last position."""
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.stats.forward_passes += 1
        return out.logits[:, -1].float()  # (B, V)

    def _decode(self, rows: list[_Row]) -> None:
        """Prefill the prompts, then sample token by token with the KV cache."""
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
                if self._append(rows[i], tok, lp)]
            self.stats.completion_tokens += len(active)
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

    def update_weights(self, named_tensors: Mapping[str, torch.Tensor]
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
        items = list(named_tensors.items() if isinstance(named_tensors, Mapping)
                     else named_tensors)
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
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    async def aclose(self) -> None:
        """Fail queued requests, let the batch in progress finish, stop the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        for j in self._pending:
            if not j.future.done():
                j.future.set_exception(PolicyClosedError("the policy was closed"))
        self._pending.clear()
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


def sample_next(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                generators: Sequence[torch.Generator | None], rng: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row, each row with its own settings.

    Args:
        logits: ``(B, V)`` float32 next-token logits.
        temperature: ``(B,)``; 0 means greedy.
        top_p: ``(B,)`` nucleus mass per row.
        generators: Per-row generator, or None to draw from ``rng``.
        rng: Shared generator for rows without their own.

    Returns:
        ``(tokens, logprobs)``, both ``(B,)``: the sampled ids and their behaviour log-probs
        ``log_softmax(logits / T)`` (T = 1 for greedy rows; top_p not applied).
    """
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)  # (B, V)
    tokens = logits.argmax(dim=-1)
    rows = (~greedy).nonzero().flatten().tolist()
    if rows:
        probs = logp[rows].exp()  # (S, V) over the sampled rows
        nucleus = top_p[rows]
        if bool((nucleus < 1).any()):
            probs = _nucleus(probs, nucleus)
        # Inverse-CDF sampling with one uniform per row: a row's draw depends only on its
        # own generator (reproducible in any batch), and it is far faster than multinomial.
        uniform = torch.empty(len(rows), dtype=torch.float64, device=logits.device)
        shared = [k for k, i in enumerate(rows) if generators[i] is None]
        if shared:
            uniform[shared] = torch.rand(len(shared), generator=rng, dtype=torch.float64,
                                         device=logits.device)
        for k, i in enumerate(rows):
            if generators[i] is not None:
                uniform[k] = torch.rand((), generator=generators[i], dtype=torch.float64,
                                        device=logits.device)
        cdf = probs.double().cumsum(dim=-1)  # (S, V)
        total = cdf[:, -1]
        # Stay below the total: the first cdf entry above the target has a positive mass.
        target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
        drawn = torch.searchsorted(cdf, target[:, None], right=True)
        tokens[rows] = drawn.squeeze(-1).clamp(max=logits.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its top_p mass (the most likely token always stays)."""
    top, order = probs.topk(min(_TOP_P_CANDIDATES, probs.shape[-1]), dim=-1)  # sorted
    if bool((top.sum(dim=-1) < top_p).any()):  # a nucleus reaches past the candidates
        top, order = probs.sort(dim=-1, descending=True)  # (5-10x slower than topk)
    before = top.cumsum(dim=-1) - top  # mass strictly above each token
    top = top.masked_fill(before >= top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter(-1, order, top)


def completion_logprobs(model: Any, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                        temperature: float = 1.0) -> list[float]:
    """Recompute the behaviour log-probs of a completion with one plain forward pass.

    This is the quantity :class:`TransformersPolicy` records (see the module docstring):
    ``log_softmax(logits / T)`` at each completion token, T = 1 when ``temperature == 0``.

    Args:
        model: The causal LM.
        prompt_ids: Prompt token ids.
        completion_ids: Completion token ids.
        temperature: The sampling temperature of the completion.

    Returns:
        One log-prob per completion token.
    """
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()  # (C, V)
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    target = torch.tensor(list(completion_ids), device=device)[:, None]
    return logp.gather(-1, target).squeeze(-1).tolist()


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
