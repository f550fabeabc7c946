"""MultiHopSearch: answer questions about a fictional world by searching its encyclopedia.

Tools: ``search(query)`` returns the ids, titles and opening words of the best BM25 matches
(``bm25s``) over the generated corpus (:mod:`agentgym.envs.retrieval.corpus`, ~330
articles); ``open(doc_id)`` returns an article's full text; ``final_answer(answer)`` ends the
episode. Every question needs two or three articles, one leading to the next, so a single
search does not answer it. Reward: 1.0 when the answer matches (case, punctuation and a
leading article ignored), 0.0 otherwise, on the answer step; earlier steps are not scored.

Tasks: a fixed 80/20 split of the questions into ``train`` and ``test`` (disjoint); the seed
picks the question (``seed % len(split)``). The index is built once per process (read-only,
shared by every episode).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal, cast

from agentgym.envs.retrieval.corpus import Doc, split_questions, world
from agentgym.errors import ConfigError, MissingExtraError, did_you_mean
from agentgym.tool_env import Task, ToolEnv

if TYPE_CHECKING:
    from bm25s.tokenization import Tokenized

SPLITS = ("train", "test")
SYSTEM_PROMPT = ("You answer questions about a fictional world using its encyclopedia. Search "
                 "for articles, open them to read the facts, and follow the links between "
                 "them. Answer with the name, word or year only.")
INSTRUCTIONS = (
    "Call one tool per reply. Search for a name from the question:\n"
    '<tool_call>{"name": "search", "arguments": {"query": "a name"}}</tool_call>\n'
    "Open an article by the id that search returned:\n"
    '<tool_call>{"name": "open", "arguments": {"doc_id": "company/a-name"}}</tool_call>\n'
    "When you know the answer:\n"
    '<tool_call>{"name": "final_answer", "arguments": {"answer": "the answer"}}</tool_call>')


class Index:
    """A BM25 index over the corpus."""

    def __init__(self, docs: list[Doc]) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise MissingExtraError("bm25s", "tools", "The MultiHopSearch env") from exc
        self._bm25s = bm25s
        self.docs = docs
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize([f"{d.title}. {d.text}" for d in docs],
                                            stopwords="en", show_progress=False),
                             show_progress=False)

    def search(self, query: str, k: int = 5) -> list[tuple[Doc, float]]:
        """The ``k`` best documents for ``query``, best first (score > 0 only)."""
        # Tokenized, as return_ids=True (the default) gives; bm25s annotates either kind
        tokens = cast("Tokenized",
                      self._bm25s.tokenize([query], stopwords="en", show_progress=False))
        if not tokens.vocab:  # only stopwords or punctuation
            return []
        ids, scores = self.retriever.retrieve(tokens, k=min(k, len(self.docs)),
                                              show_progress=False)
        return [(self.docs[int(i)], float(s)) for i, s in zip(ids[0], scores[0], strict=True)
                if s > 0]


@functools.cache
def index() -> Index:
    """The shared index of the world's corpus (built once per process)."""
    return Index(list(world().docs.values()))


def search(query: str) -> str:
    """Search the encyclopedia; returns the ids and titles of the best-matching articles.

    Args:
        query: Words to look for, e.g. a name.
    """
    if not query.strip():
        raise ValueError("the query is empty; search for a name or some words")
    hits = index().search(query)
    if not hits:
        return f"no article matches {query!r}; try other words"
    return "\n".join(f"{doc.id}: {doc.title} - {doc.text[:80]}..." for doc, _ in hits)


def open_doc(doc_id: str) -> str:
    """Open an article by its id (as listed by search) and return its full text.

    Args:
        doc_id: The article id, e.g. "city/zanor".
    """
    docs = world().docs
    doc = docs.get(doc_id.strip())
    if doc is None:
        raise LookupError(f"no article {doc_id!r}{did_you_mean(doc_id, docs) or ''}; use an id "
                       "that search returned")
    return f"{doc.title}\n{doc.text}"


open_doc.__name__ = "open"  # the model sees the tool as open(doc_id)


class MultiHopSearchEnv(ToolEnv):
    """Multi-hop question answering with search and open tools; see the module docstring.

    Args:
        split: ``"train"`` or ``"test"`` questions.
    """

    def __init__(self, split: Literal["train", "test"] = "train") -> None:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        tasks = [Task(q.id, q.question, q.answer, {"hops": q.hops}, q.solution)
                 for q in split_questions(split)]
        super().__init__(tasks, [search, open_doc], verifier="exact",
                         system_prompt=SYSTEM_PROMPT, instructions=INSTRUCTIONS,
                         sync_tools="inline")

    async def _reset(self, seed: int | None, options: dict[str, Any]) -> Any:  # type: ignore[override]
        index()  # build the index before the first step, not inside a timed tool call
        return await super()._reset(seed, options)
