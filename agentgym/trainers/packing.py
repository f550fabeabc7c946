"""Shared-prefix packing: every token prefix that several samples share is computed once.

The samples of one micro-batch are laid out as a *prefix tree* in a single sequence: a
token that continues the same prefix in several samples is one node. A group's G
completions then follow one copy of their common prompt, and a full-history episode's T
samples (each turn's prompt is the previous turn's prompt + completion + observation)
collapse into the sequence of its last turn. Each node attends to its ancestors and itself
only (a 4D attention mask) at the position of its depth (position ids), so every token sees
exactly the tokens it saw unpacked, at the same positions: the log-probs are the unpacked
ones up to floating-point summation order.

Cost: the attention mask is dense (N × N for N packed tokens), so packing pays where
prefixes repeat (shared system prompt and tools, group prompts, growing histories); that is
where it removes most tokens. It needs a model that takes a 4D attention mask and
``position_ids`` (the Llama family in ``transformers`` does).

Example:
    >>> tree = pack_prefix_tree([[1, 2, 3, 4], [1, 2, 5]])
    >>> tree.tokens, tree.positions, tree.paths
    ((1, 2, 3, 4, 5), (0, 1, 2, 3, 2), ((0, 1, 2, 3), (0, 1, 4)))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefixTree:
    """Token sequences packed as a prefix tree in one sequence.

    Attributes:
        tokens: The packed token ids, parents before children (length N).
        positions: Each packed token's position in its own sequence (its depth).
        parents: Each packed token's parent index (-1 for a first token).
        paths: For each input sequence, the packed index of each of its tokens.
    """

    tokens: tuple[int, ...]
    positions: tuple[int, ...]
    parents: tuple[int, ...]
    paths: tuple[tuple[int, ...], ...]

    def ancestor_mask(self) -> np.ndarray:
        """``(N, N)`` bool: row i is True on i's ancestors and i itself (who i attends to)."""
        n = len(self.tokens)
        mask = np.zeros((n, n), dtype=bool)
        for i, parent in enumerate(self.parents):
            if parent >= 0:  # parents come first, so their row is complete
                mask[i] = mask[parent]
            mask[i, i] = True
        return mask


def pack_prefix_tree(rows: Sequence[Sequence[int]]) -> PrefixTree:
    """Pack token sequences into a prefix tree (shared prefixes stored once).

    Args:
        rows: The token sequences.

    Returns:
        The packed tree; ``paths[r]`` maps row r's tokens to packed indices.
    """
    children: dict[tuple[int, int], int] = {}
    tokens: list[int] = []
    positions: list[int] = []
    parents: list[int] = []
    paths = []
    for row in rows:
        node, path = -1, []
        for depth, token in enumerate(row):
            key = (node, int(token))
            nxt = children.get(key)
            if nxt is None:
                nxt = children[key] = len(tokens)
                tokens.append(int(token))
                positions.append(depth)
                parents.append(node)
            path.append(nxt)
            node = nxt
        paths.append(tuple(path))
    return PrefixTree(tuple(tokens), tuple(positions), tuple(parents), tuple(paths))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def packed_order(rows: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
    """Split rows into packs of at most ``max_tokens`` packed (prefix-tree) tokens.

    Rows are sorted lexicographically, which puts rows sharing a prefix next to each other;
    in that order a row shares the most with its predecessor, so it adds ``len(row) −
    common_prefix(previous, row)`` tokens to its pack. A row longer than ``max_tokens``
    gets a pack of its own.

    Args:
        rows: Token sequences (the samples' ``input_ids``).
        max_tokens: Packed tokens per pack.

    Returns:
        Packs of row indices, in sorted order.
    """
    order = sorted(range(len(rows)), key=lambda i: (tuple(rows[i]), i))
    packs: list[list[int]] = []
    size = 0
    for i in order:
        added = len(rows[i]) - (common_prefix(rows[packs[-1][-1]], rows[i]) if packs else 0)
        if packs and size + added <= max_tokens:
            packs[-1].append(i)
            size += added
        else:
            packs.append([i])
            size = len(rows[i])
    return packs
