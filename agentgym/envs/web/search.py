"""Product search ranked by BM25 (Robertson & Zaragoza 2009), through ``bm25s``.

score(q, d) = sum over query terms t of IDF(t) * f(t, d) * (k1 + 1) /
              (f(t, d) + k1 * (1 - b + b * |d| / avgdl)),   k1 = 1.5, b = 0.75

Each product is indexed by its title, type, department, attributes, option values and
description (:meth:`Product.search_text`), English stop words removed. Query terms the
catalogue never uses are dropped; a query with none left finds nothing. Ties keep catalogue
order, so a query always gives the same ranking.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from agentgym.errors import MissingExtraError

from .catalog import Catalog, generate_catalog

_WORD_RE = re.compile(r"(?u)\b\w\w+\b")


class SearchIndex:
    """A BM25 index over one catalogue.

    Args:
        catalog: The products to index.
    """

    def __init__(self, catalog: Catalog) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise MissingExtraError("bm25s", "web", "the web shop's product search") from exc
        self.catalog = catalog
        self._stopwords = frozenset(bm25s.stopwords.STOPWORDS_EN)
        corpus = [self._tokens(p.search_text()) for p in catalog.products]
        self._retriever = bm25s.BM25(k1=1.5, b=0.75)
        self._retriever.index(corpus, show_progress=False)
        self._vocab = frozenset(self._retriever.vocab_dict)

    def _tokens(self, text: str) -> list[str]:
        return [w for w in _WORD_RE.findall(text.lower()) if w not in self._stopwords]

    def search(self, query: str, limit: int = 100) -> list[str]:
        """Ids of the best-matching products, best first (at most ``limit``)."""
        tokens = [t for t in self._tokens(query) if t in self._vocab]
        if not tokens:
            return []
        k = min(limit, len(self.catalog))
        docs, scores = self._retriever.retrieve([tokens], k=k, show_progress=False,
                                                n_threads=1)
        docs, scores = np.asarray(docs[0]), np.asarray(scores[0])
        keep = scores > 0
        # stable order: score descending, then catalogue index
        order = np.lexsort((docs[keep], -scores[keep]))
        return [self.catalog.products[int(i)].id for i in docs[keep][order]]


@lru_cache(maxsize=4)
def search_index(seed: int = 0, size: int = 5000) -> SearchIndex:
    """The (cached) index of ``generate_catalog(seed, size)``."""
    return SearchIndex(generate_catalog(seed, size))
