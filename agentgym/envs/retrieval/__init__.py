"""Retrieval tool use: multi-hop questions over a generated local corpus with BM25 search."""

from agentgym.envs.retrieval.corpus import build_world, world
from agentgym.envs.retrieval.env import MultiHopSearchEnv, index, open_doc, search

__all__ = ["MultiHopSearchEnv", "build_world", "index", "open_doc", "search", "world"]
