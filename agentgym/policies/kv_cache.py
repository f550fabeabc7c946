"""KV caches of the transformers backend: a layer that grows in place, and a prefix store.

:class:`GrowingLayer` reserves room for the answers, so a decode step writes in place.

:class:`PrefixStore` keeps the keys and values of sequences already run (system prompt and
tools, and every finished row's prompt + completion) across ``generate`` calls, so the next
prompt that starts the same way runs only its new tokens. The system prompt and tools are
most of a short prompt; in ``full`` context mode each turn's prompt is the last turn's
prompt + completion + the observation, so an episode's prefill grows as O(T), not O(T²).

Why it is exact: a causal LM's key and value at position i depend only on tokens 0..i, so
the stored entries of a matching prefix are those a fresh prefill would compute (up to the
float rounding of a different batch shape, as for any batched prefill). The store is
emptied whenever the weights change, and an entry is only used by the weights' version
that wrote it.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import DynamicLayer


def forward_parameters(model: Any) -> set[str]:
    """The names ``model.forward`` takes, looking through a PEFT or DDP/FSDP wrapper."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(inner, "module", inner)
    try:
        return set(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return set()


def cache_keyword(model: Any) -> str:
    """The keyword ``forward`` takes a KV cache by, which its output names the cache by too.

    ``cache`` where ``forward`` takes it (newer transformers deprecate the other name), else
    ``past_key_values``.
    """
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


class GrowingLayer(DynamicLayer):
    """A KV cache layer with room reserved ahead, so a decode step writes in place.

    ``DynamicLayer`` concatenates the whole cache at every step; at 64 rows of 600 tokens
    that copy costs about as much as the model's own work on CPU.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def preload(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Start from given ``(B, H, capacity, D)`` buffers whose first ``length`` are filled."""
        self.lazy_initialization(keys, values)
        self._k, self._v, self.length = keys, values, length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new keys and values after the cached ones; return all of them."""
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

    def get_seq_length(self) -> int:
        """Tokens cached (pads included)."""
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times."""
        if self.length:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]

    def merge(self, other: GrowingLayer, width: int, capacity: int) -> None:
        """Append ``other``'s rows after this layer's, both right-aligned to ``width`` columns.

        The columns left of a shorter part are zeros: the caller's attention mask must mark
        them as pads. ``capacity`` reserves room for the tokens still to come.
        """
        parts = [(self._k, self._v, self.length), (other._k, other._v, other.length)]
        rows = sum(k.shape[0] for k, _, _ in parts)
        k0 = parts[0][0]
        shape = (rows, k0.shape[1], max(capacity, width), k0.shape[-1])
        keys, values = k0.new_zeros(shape), k0.new_zeros(shape)
        start = 0
        for k, v, length in parts:
            stop = start + k.shape[0]
            keys[start:stop, :, width - length:width] = k[:, :, :length]
            values[start:stop, :, width - length:width] = v[:, :, :length]
            start = stop
        self._k, self._v, self.length = keys, values, width
        self.keys, self.values = keys[:, :, :width], values[:, :, :width]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows at ``indices``."""
        if self.length:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]


@dataclass(frozen=True)
class CachedPrefix:
    """The keys and values of one token sequence, for every layer.

    Attributes:
        ids: The tokens, ``(L,)``.
        keys: Per layer ``(H, L, D)``.
        values: Per layer ``(H, L, D)``.
        version: The weights' version that computed them.
    """

    ids: np.ndarray
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    version: int

    @property
    def nbytes(self) -> int:
        """Memory held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass
class PrefixStats:
    """What the store saved (read them to check the cache works)."""

    lookups: int = 0
    """Prompts looked up."""
    hit_tokens: int = 0
    """Prompt tokens served from the store instead of running the model."""
    entries_added: int = 0
    """Sequences stored."""
    evictions: int = 0
    """Entries dropped to stay within the budget."""


class PrefixStore:
    """Keys and values of sequences already run, reused by prompts that start the same way.

    Entries are kept least-recently-used first and dropped from there beyond
    ``budget_bytes``; an entry that is a prefix of a newly added one is dropped at once (the
    new one serves everything it did).

    Args:
        budget_bytes: Most memory the stored keys and values may take; 0 disables the store.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.stats = PrefixStats()
        self._entries: OrderedDict[int, CachedPrefix] = OrderedDict()
        self._next = 0
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Memory held now."""
        return self._bytes

    def clear(self) -> None:
        """Drop every entry (the weights changed)."""
        self._entries.clear()
        self._bytes = 0

    def lookup(self, ids: Sequence[int], limit: int, version: int
               ) -> tuple[CachedPrefix | None, int]:
        """The entry sharing the longest prefix with ``ids`` (at most ``limit`` tokens).

        Returns:
            ``(entry, n)``: the first ``n`` tokens' keys and values are ``entry``'s first
            ``n``; ``(None, 0)`` when nothing matches.
        """
        self.stats.lookups += 1
        query = np.asarray(ids[:limit], dtype=np.int64)
        best, best_n = None, 0
        for key, entry in self._entries.items():
            if entry.version != version:
                continue
            n = min(len(entry.ids), len(query))
            same = entry.ids[:n] == query[:n]
            m = n if bool(same.all()) else int(np.argmin(same))
            if m > best_n:
                best, best_n = key, m
        if best is None:
            return None, 0
        self._entries.move_to_end(best)
        self.stats.hit_tokens += best_n
        return self._entries[best], best_n

    def add(self, ids: Sequence[int], keys: Sequence[torch.Tensor],
            values: Sequence[torch.Tensor], version: int) -> None:
        """Store the keys and values (per layer ``(H, len(ids), D)``) of ``ids``."""
        if self.budget_bytes <= 0 or not len(ids):
            return
        entry = CachedPrefix(np.asarray(ids, dtype=np.int64), tuple(keys), tuple(values),
                             version)
        if entry.nbytes > self.budget_bytes:
            return
        for key, old in list(self._entries.items()):  # covered by the new entry
            if len(old.ids) <= len(entry.ids) and np.array_equal(old.ids,
                                                                   entry.ids[:len(old.ids)]):
                self._drop(key)
        self._entries[self._next] = entry
        self._next += 1
        self._bytes += entry.nbytes
        self.stats.entries_added += 1
        while self._bytes > self.budget_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evictions += 1

    def _drop(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes
