"""Decoding one batch of requests over a KV cache: prefill with shared and cached prefixes.

:class:`BatchDecoder` is the inside of :class:`~agentgym.policies.hf.TransformersPolicy`'s
worker thread: given a batch of requests it runs the prompts (identical prompts once, the
prefix common to the batch once, and whatever the :class:`~agentgym.policies.kv_cache.
PrefixStore` already holds not at all), then samples token by token, each row with its own
temperature, top_p, max_tokens, stop strings and seed. A finished row leaves the batch and
the cache at once, and its keys and values go to the prefix store for later calls; a row
whose caller gave up (``Job.cancelled``) leaves at the next token. A long prompt runs in
chunks of :data:`PREFILL_CHUNK` positions, so a batch whose callers all gave up (Ctrl-C)
stops between chunks instead of after a prefill of many seconds.

**Joining.** Between two tokens the decoder asks its owner for queued jobs (``admit``), up
to the rows the batch has room for. They are prefilled on their own and then join the
batch: both caches are right-aligned into one (pads on the left, masked), so a short request
that arrives while a long one decodes starts at the next token instead of waiting for the
long one to end. Each row's completion is handed over (``finished``) the moment it ends, not
when the batch ends. Models whose cache is not plain keys and values (sliding windows) do
not join.

**Streaming.** A job with an ``on_token`` hook is told of each token as it is sampled, with
the ``top_logprobs`` likeliest alternatives when asked (``agentgym serve`` streams them).

The policy owns the queue, the lock against weight updates and the policy version; this
module owns no thread and no event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from agentgym.policies.base import Completion, FinishReason, SampledToken, SamplingParams
from agentgym.policies.kv_cache import GrowingLayer, PrefixStore, cache_keyword
from agentgym.policies.sampling import sample_next

_STOP_WINDOW_EXTRA = 8  # tokens decoded beyond the longest stop string when checking stops
_MIN_SHARED_PREFIX = 8  # shorter common prefixes are not worth an extra forward pass
_JOIN_RESERVE = 256  # cache columns reserved ahead when rows join a batch
PREFILL_CHUNK = 512
"""Positions per prefill forward pass for prompts longer than twice this (shorter prompts
run in one pass, as before)."""


class _GaveUp(Exception):
    """Every caller of the batch gave up during the prefill."""


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
    joined: int = 0
    """Requests that joined a batch already decoding (with a prefill of their own)."""


@dataclass
class Job:
    """One request: its prompt, its sampling settings and the caller's future."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    future: Any
    """The caller's ``asyncio.Future[Completion]`` (set by the policy, never here)."""
    cancelled: bool = False
    """Set (from the event loop) when the caller gave up: the decoder drops the row."""
    queued_at: float = 0.0
    """``time.monotonic()`` when the job was queued (the owner's admission reads it)."""
    on_token: Callable[[SampledToken], None] | None = None
    """Told of each sampled token (from the decoding thread), with the
    ``params.top_logprobs`` likeliest alternatives; not once the caller gave up."""


Admit = Callable[[int], list[Job]]
"""Given the rows a running batch has room for, the queued jobs that join it (may be none)."""
Finished = Callable[[Job, Completion], None]
"""Receives each row's completion as the row ends (called from the decoding thread)."""


@dataclass
class _Row:
    """Decoding state of one request inside a batch."""

    job: Job
    generator: torch.Generator | None
    max_tokens: int
    stops: tuple[str, ...]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None


@dataclass
class _Live:
    """The decoding state of the rows still running, one entry per row along dim 0."""

    cache: Any
    logits: torch.Tensor  # (B, V) next-token logits
    mask: torch.Tensor  # (B, T) 1 = a real token
    position: torch.Tensor  # (B,) position of the token sampled next
    temperature: torch.Tensor  # (B,)
    top_p: torch.Tensor  # (B,)
    active: list[int]  # batch position -> index in the rows list


class BatchDecoder:
    """Decodes batches of :class:`Job` with one model (see the module docstring).

    Args:
        model: The causal LM (in eval mode).
        tokenizer: Its tokenizer (left padding, a pad token).
        prefix_store: Keys and values kept across calls (a zero budget keeps nothing).
        share_prefix: Run identical prompts and the batch's common prefix once.
        seed: Seed of the generator used by rows without their own seed (None = random).

    Attributes:
        stats: Work counters (the policy's :attr:`~TransformersPolicy.stats`).
        eos_ids: Token ids that end a completion.
    """

    def __init__(self, model: Any, tokenizer: Any, prefix_store: PrefixStore, *,
                 share_prefix: bool = True, seed: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.prefix_store = prefix_store
        self.share_prefix = share_prefix
        self.device = next(model.parameters()).device
        self._cache_keyword = cache_keyword(model)
        self.stats = GenerationStats()
        self.eos_ids = eos_ids(model, tokenizer)
        self.max_positions: int | None = getattr(model.config, "max_position_embeddings", None)
        self.policy_version = 0
        self._rng = torch.Generator(device=self.device)
        if seed is None:
            self._rng.seed()
        else:
            self._rng.manual_seed(seed)

    def run(self, jobs: list[Job], version: int, *, admit: Admit | None = None,
            finished: Finished | None = None, max_rows: int | None = None
            ) -> list[Completion]:
        """Decode ``jobs`` together with the weights of ``version`` (call under inference mode).

        ``version`` tags the completions and the prefix-store entries.

        Args:
            jobs: The batch.
            version: The weights' version.
            admit: Asked between tokens for jobs that join the batch (see the module
                docstring); None = the batch is fixed.
            finished: Called with each row's completion as the row ends (not for rows whose
                caller gave up).
            max_rows: Most rows decoded together, joined ones included (default: the batch).

        Returns:
            One completion per row, joined rows after the batch's own, in the order they joined.
        """
        self.policy_version = version
        rows = [self._new_row(j) for j in jobs]
        self.stats.batches += 1
        self.stats.largest_batch = max(self.stats.largest_batch, len(rows))
        self._decode(rows, admit, finished, max_rows or len(rows))
        return [self._completion(r) for r in rows]

    def _completion(self, row: _Row) -> Completion:
        return Completion(
            text=self.tokenizer.decode(row.ids, skip_special_tokens=True),
            prompt_ids=row.job.prompt_ids, completion_ids=tuple(row.ids),
            logprobs=tuple(row.logprobs), finish_reason=row.finish or "length",
            policy_version=self.policy_version)

    def _new_row(self, job: Job) -> _Row:
        p = job.params
        generator = None
        if p.seed is not None and p.temperature > 0:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(p.seed)
        limit = p.max_tokens
        if self.max_positions is not None:
            limit = min(limit, self.max_positions - len(job.prompt_ids))
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
        sources = self._cached_prefixes(unique, rows) if plain and self.share_prefix \
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
        logits = self._chunked(ids, cache, positions, rows, mask, cached)
        if len(unique) < len(rows):  # give every row the cache of its prompt
            idx = torch.tensor(where, device=self.device)
            cache.batch_select_indices(idx)
            logits, mask = logits[idx], mask[idx]
        self.stats.prefill_s += time.perf_counter() - start
        return cache, logits, mask

    def _cached_prefixes(self, prompts: list[tuple[int, ...]], rows: list[_Row]
                         ) -> list[tuple[Any, int]]:
        """Per prompt, ``(per-layer (keys, values) of shape (H, >=m, D), m)``: m tokens cached.

        The prefix common to the batch is run once (from the store where it can) and stored;
        each prompt then takes the longest prefix the store or that common prefix gives.
        Every prompt keeps at least one token to run: its last logits come from it.
        """
        store, version = self.prefix_store, self.policy_version
        stem = min(common_prefix_len(prompts), min(map(len, prompts)) - 1)
        stem_kv: Any = ()
        if len(prompts) > 1 and stem >= _MIN_SHARED_PREFIX:
            entry, m = store.lookup(prompts[0], stem, version)
            if m < stem:
                stem_kv = self._run_prefix(prompts[0][:stem], entry, m, rows)
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

    def _run_prefix(self, ids: tuple[int, ...], entry: Any, m: int, rows: list[_Row]) -> Any:
        """Keys and values of ``ids`` (one row), of which ``entry`` holds the first ``m``."""
        cache: Any = DynamicCache(config=self.model.config)  # its layers are replaced below
        cache.layers = [GrowingLayer(len(ids)) for _ in cache.layers]
        if m:
            for layer, k, v in zip(cache.layers, entry.keys, entry.values, strict=True):
                buffers = [t.new_empty((1, t.shape[0], len(ids), t.shape[2])) for t in (k, v)]
                buffers[0][0, :, :m], buffers[1][0, :, :m] = k[:, :m], v[:, :m]
                layer.preload(buffers[0], buffers[1], m)
        positions = torch.arange(m, len(ids), device=self.device)[None]
        self._chunked(torch.tensor([ids[m:]], device=self.device), cache, positions, rows)
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

    def _chunked(self, ids: torch.Tensor, cache: Any, positions: torch.Tensor,
                 rows: list[_Row], mask: torch.Tensor | None = None, cached: int = 0
                 ) -> torch.Tensor:
        """:meth:`_forward` over ``ids`` (B, N), in chunks when N is long.

        Between chunks of :data:`PREFILL_CHUNK` columns it checks whether every caller gave
        up. ``mask`` covers the ``cached`` positions already in ``cache`` and the N new ones.

        Raises:
            _GaveUp: Every row's caller gave up before the last chunk.
        """
        width = ids.shape[1]
        step = width if width <= 2 * PREFILL_CHUNK else PREFILL_CHUNK
        logits = torch.empty(0)
        for lo in range(0, width, step):
            hi = min(width, lo + step)
            logits = self._forward(ids[:, lo:hi], cache,
                                   None if mask is None else mask[:, :cached + hi],
                                   positions[:, lo:hi])
            if hi < width and all(r.job.cancelled for r in rows):
                raise _GaveUp
        return logits

    def _forward(self, ids: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
        """One model call extending ``cache``; the float32 logits of the last position."""
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self._cache_keyword: cache})
        self.stats.forward_passes += 1
        return out.logits[:, -1].float()  # (B, V)

    def _decode(self, rows: list[_Row], admit: Admit | None = None,
                finished: Finished | None = None, max_rows: int = 1) -> None:
        """Prefill the prompts, then sample token by token with the KV cache.

        A row whose caller gave up leaves the batch at the next token; finished rows are
        handed to ``finished`` and stored in the prefix cache as they leave. Before each
        token, jobs from ``admit`` join while there is room (``rows`` grows).
        """
        try:
            live = self._start(rows)
        except _GaveUp:  # nobody waits for these rows: they end empty
            return
        if not all(isinstance(x, GrowingLayer) for x in live.cache.layers):
            admit = None  # sliding-window caches cannot be merged
        while True:
            if admit is not None and len(live.active) < max_rows:
                live = self._join(live, rows, admit(max_rows - len(live.active)))
            if not self._step(live, rows, finished):
                return

    def _step(self, live: _Live, rows: list[_Row], finished: Finished | None) -> bool:
        """Sample one token per row and run it; return whether any row goes on.

        Finished rows are handed over, stored and dropped from ``live`` (updated in place).
        """
        tokens, logps = sample_next(live.logits, live.temperature, live.top_p,
                                    [rows[i].generator for i in live.active], self._rng)
        tops = self._alternatives(live, rows)
        keep = []
        for b, (i, tok, lp) in enumerate(zip(live.active, tokens.tolist(), logps.tolist(),
                                             strict=True)):
            job = rows[i].job
            goes_on = self._append(rows[i], tok, lp)
            if job.on_token is not None and not job.cancelled:
                job.on_token(SampledToken(job.prompt_ids, tok, lp, tops.get(b, ())))
            if goes_on and not job.cancelled:
                keep.append(b)
        self.stats.completion_tokens += len(live.active)
        if len(keep) < len(live.active):
            kept = set(keep)
            gone = [b for b in range(len(live.active)) if b not in kept]
            self._store_rows(live.cache, live.mask, rows, live.active, gone)  # then answer:
            if finished is not None:  # a caller's next prompt may start with this one
                for b in gone:
                    row = rows[live.active[b]]
                    if not row.job.cancelled:
                        finished(row.job, self._completion(row))
        if not keep:
            return False
        mask, position = live.mask, live.position
        if len(keep) < len(live.active):  # finished rows stop costing compute
            idx = torch.tensor(keep, device=self.device)
            live.cache.batch_select_indices(idx)
            mask, position, tokens = mask[idx], position[idx], tokens[idx]
            live.temperature, live.top_p = live.temperature[idx], live.top_p[idx]
            live.active = [live.active[b] for b in keep]
        mask = torch.cat([mask, mask.new_ones((len(live.active), 1))], dim=1)
        live.logits = self._forward(tokens[:, None], live.cache, mask, position[:, None])
        live.mask, live.position = mask, position + 1
        return True

    def _alternatives(self, live: _Live, rows: list[_Row]
                      ) -> dict[int, tuple[tuple[int, float], ...]]:
        """Per batch position of a row that asks for them, its likeliest ``(id, log-prob)``.

        From the distribution the behaviour log-prob is taken from: ``log_softmax(logits /
        T)``, T = 1 for greedy rows.
        """
        want = {b: rows[i].job.params.top_logprobs for b, i in enumerate(live.active)
                if rows[i].job.params.top_logprobs and rows[i].job.on_token is not None}
        if not want:
            return {}
        idx = torch.tensor(list(want), device=self.device)
        temperature = live.temperature[idx]
        scale = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
        logp = torch.log_softmax(live.logits[idx] / scale[:, None], dim=-1)
        values, ids = logp.topk(min(max(want.values()), logp.shape[-1]), dim=-1)
        return {b: tuple(zip(ids[k, :want[b]].tolist(), values[k, :want[b]].tolist(),
                             strict=True)) for k, b in enumerate(want)}

    def _start(self, rows: list[_Row], first: int = 0) -> _Live:
        """Prefill ``rows`` (indices ``first``.. in the rows list); raises :class:`_GaveUp`."""
        cache, logits, mask = self._prefill(rows)  # logits (B, V), mask (B, T)
        return _Live(cache, logits, mask, mask.sum(-1),
                     torch.tensor([r.job.params.temperature for r in rows], device=self.device),
                     torch.tensor([r.job.params.top_p for r in rows], device=self.device),
                     list(range(first, first + len(rows))))

    def _join(self, live: _Live, rows: list[_Row], jobs: list[Job]) -> _Live:
        """``live`` with ``jobs`` prefilled and merged in (``rows`` grows by their rows)."""
        new = [self._new_row(j) for j in jobs]
        if not new:
            return live
        try:
            other = self._start(new, first=len(rows))
        except _GaveUp:  # their callers left during the prefill
            return live
        rows.extend(new)
        self.stats.joined += len(new)
        width = max(live.mask.shape[1], other.mask.shape[1])
        # Room for the next tokens only: a long row's reserve would be copied at every join
        # and leave; the layers grow by half when it runs out.
        remaining = min(_JOIN_RESERVE, max(rows[i].max_tokens - len(rows[i].ids)
                                           for i in (*live.active, *other.active)))
        for layer, extra in zip(live.cache.layers, other.cache.layers, strict=True):
            layer.merge(extra, width, width + remaining)
        masks = [live.mask, other.mask]
        mask = torch.cat([torch.cat([m.new_zeros((m.shape[0], width - m.shape[1])), m], dim=1)
                          for m in masks])
        merged = _Live(live.cache, torch.cat([live.logits, other.logits]), mask,
                       torch.cat([live.position, other.position]),
                       torch.cat([live.temperature, other.temperature]),
                       torch.cat([live.top_p, other.top_p]), live.active + other.active)
        self.stats.largest_batch = max(self.stats.largest_batch, len(merged.active))
        return merged

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


def common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix shared by every prompt."""
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """EOS ids from the tokenizer and the model's generation config."""
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id, *(config_eos if isinstance(config_eos, list | tuple)
                                     else [config_eos])]
    return frozenset(int(i) for i in ids if isinstance(i, int))
