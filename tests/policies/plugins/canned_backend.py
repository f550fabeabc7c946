"""A canned-answer backend: an example of adding a generation backend as one file.

``canned:TEXT`` answers every request with TEXT. It holds no model, but it implements the
whole :class:`~agentgym.policies.base.TrainablePolicy` protocol (a weight update only moves
its version), so rollouts, the Ray workers and the trainer's weight sync can all drive it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentgym.errors import ConfigError
from agentgym.policies.backends import BackendOptions, register_backend
from agentgym.policies.base import Completion, GenerationRequest


class CannedPolicy:
    """Answers ``text`` to everything; counts weight updates as versions."""

    tokenizer = None  # a chat-level backend: no token ids

    def __init__(self, text: str) -> None:
        if not text:
            raise ConfigError("canned: needs the answer text, e.g. canned:42")
        self.text = text
        self.policy_version = 0
        self.updates: list[list[str]] = []

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """The canned text for every request."""
        return [Completion(self.text, policy_version=self.policy_version) for _ in requests]

    async def update_weights(self, named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                             *, version: int | None = None) -> int:
        """Record the names pushed; set the version."""
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        self.updates.append([name for name, _ in items])
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    async def aclose(self) -> None:
        """Nothing to release."""


def build(target: str, options: BackendOptions) -> CannedPolicy:
    """``canned:TEXT`` → :class:`CannedPolicy` (the options do not apply)."""
    return CannedPolicy(target)


register_backend("canned", build, target="TEXT", trainable=True,
                 summary="answers every request with TEXT (an example plug-in)")
