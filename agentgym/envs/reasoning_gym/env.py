"""Any Reasoning Gym dataset as an env: its generator, its gold answers, its own scorer.

Reasoning Gym (``reasoning-gym``) generates tasks procedurally: entry ``i`` of a dataset
with seed ``s`` is drawn from ``Random(s + i)``. An episode is one entry; the episode seed is
the entry index, and the split picks the dataset seed, so the streams never overlap:
``train`` uses dataset seed 0 and ``test`` dataset seed ``2**40`` (``2**31`` for the
datasets in :data:`NUMPY_SEEDED`), and each split holds
:data:`TASKS_PER_SPLIT` entries (Reasoning Gym has no splits of its own; these are ours,
deterministic and disjoint; a seed above that wraps around; ``word_ladder`` refuses more
than 20,000 entries, so its splits hold that many: :data:`SIZE_LIMITS`).

The model answers inside ``<answer>...</answer>`` (Reasoning Gym's own default system
prompt says so, and its ``extract_answer`` reads the last such block). The dataset's own
``score_answer`` gives the score in [0, 1]; it also judges a reply without an answer block
(as ``None``: most datasets give 0, ``countdown``, ``puzzle24`` and
``fraction_simplification`` give 0.01). With ``attempts=1`` (the default) the episode is
single-turn and the reward is that score. With ``attempts > 1`` a reply that scores below 1
gets the verifier's score back as feedback and another try; the reward is ``None`` on the
tries that continue and the score of the last try when the episode ends (a full score ends
it early). A reply without an ``<answer>`` block is ``valid=False`` and uses up a try.

Reasoning Gym's code (the entry's generation, the scorer) runs under :func:`entry_globals`:
Python's global generator seeded with the entry's seed, numpy's restored afterwards, so an
entry is reproducible and no episode changes another's random draws. Dataset objects are
built once per process (:data:`TASKS_PER_SPLIT`) and each episode works on a copy of its entry.

Info keys on every step: ``valid``, ``success`` (score 1), ``benchmark``
(``"reasoning-gym <version>"``), ``score`` (None when there was no
answer). The reset info has ``task_id``, ``dataset``, ``split`` and
``reasoning_gym_version``.
"""

from __future__ import annotations

import copy
import random
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any, Literal

import numpy as np

from agentgym.env import BaseEnv
from agentgym.errors import ConfigError, MissingExtraError, did_you_mean
from agentgym.types import Message, StepResult

SPLIT_SEEDS = {"train": 0, "test": 2**40}
"""Dataset seed of each split; entry ``i`` of a split is ``Random(split_seed + i)``."""
NUMPY_SEEDED = {"pool_matrix": {"train": 0, "test": 2**31}}
"""Datasets that seed numpy's legacy global generator with ``seed + i``, which must stay below
2**32: their own split seeds (still disjoint streams)."""
TASKS_PER_SPLIT = 100_000
"""Entries per split (the episode seed is the entry index). The datasets are virtual, but a
few precompute per entry at construction (``gsm_symbolic`` draws a template per index;
``acre`` builds every question, about 30 s for 100,000), so each dataset object is built
once per process and shared by the envs that play it (entries are read-only)."""
SIZE_LIMITS = {"word_ladder": 20_000}
"""Datasets that refuse more entries than this (Reasoning Gym's own check): their splits hold
this many."""


def split_seed(dataset: str, split: str) -> int:
    """The dataset seed of ``split`` for ``dataset`` (see :data:`NUMPY_SEEDED`)."""
    return NUMPY_SEEDED.get(dataset, SPLIT_SEEDS)[split]


@contextmanager
def entry_globals(seed: int) -> Iterator[None]:
    """Run Reasoning Gym code on Python's and numpy's global generators, then restore them.

    A few generators use the globals: ``list_functions`` draws some numbers from Python's
    ``random`` (so Reasoning Gym itself gives another question for the same index in another
    process), ``pool_matrix`` seeds numpy's. Inside the block Python's is seeded with
    ``seed`` (the entry's own seed), so an entry is the same in every process and episodes
    never see each other's draws; both are restored after.
    """
    saved_py, saved_np = random.getstate(), np.random.get_state()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved_py)
        np.random.set_state(saved_np)


_DATASETS: OrderedDict[tuple[str, str, int, str], Any] = OrderedDict()
"""Datasets built in this process, most recently used last (at most 64 kept)."""


def _dataset(name: str, split: str, size: int, config: Mapping[str, Any]) -> Any:
    """The dataset object for these arguments, built once per process."""
    import reasoning_gym

    key = (name, split, size, repr(sorted(config.items())))
    if key in _DATASETS:
        _DATASETS.move_to_end(key)
        return _DATASETS[key]
    data = reasoning_gym.create_dataset(name, seed=split_seed(name, split), size=size,
                                        **config)
    _DATASETS[key] = data
    while len(_DATASETS) > 64:
        _DATASETS.popitem(last=False)
    return data


class ReasoningGymEnv(BaseEnv):
    """One Reasoning Gym dataset; see the module docstring.

    Args:
        dataset: A Reasoning Gym dataset name (``reasoning_gym.factory.DATASETS``).
        split: ``"train"`` or ``"test"`` (disjoint seed streams).
        attempts: Answers allowed per episode (1 = single-turn).
        config: Keyword arguments of the dataset's own config (e.g. ``{"min_terms": 3}``).

    Raises:
        ConfigError: an unknown dataset, split or config key, or ``attempts < 1``.
        MissingExtraError: reasoning-gym is not installed.

    Attributes:
        data: The Reasoning Gym dataset (its ``score_answer`` is the scorer).
    """

    def __init__(self, dataset: str = "chain_sum", split: Literal["train", "test"] = "train",
                 attempts: int = 1, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        try:
            from reasoning_gym.factory import DATASETS
        except ImportError as exc:
            raise MissingExtraError("reasoning-gym", "games", "the Reasoning Gym envs") from exc
        if dataset not in DATASETS:
            raise ConfigError(f"expected dataset to be a Reasoning Gym dataset, got {dataset!r}"
                              f"{did_you_mean(str(dataset), DATASETS)}; fix: pick one of "
                              "reasoning_gym.factory.DATASETS, e.g. dataset='chain_sum'")
        if split not in SPLIT_SEEDS:
            raise ConfigError(f"expected split 'train' or 'test', got {split!r}")
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise ConfigError(f"expected attempts to be an int >= 1, got {attempts!r}; "
                              "fix: attempts=1 (single-turn) or more for retries")
        self.size = min(TASKS_PER_SPLIT, SIZE_LIMITS.get(dataset, TASKS_PER_SPLIT))
        try:
            self.data = _dataset(dataset, split, self.size, dict(config or {}))
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"Reasoning Gym rejected the config {dict(config or {})} for "
                              f"{dataset!r}: {exc}; fix: use the fields of its config class") \
                from exc
        self.dataset, self.split, self.attempts = dataset, split, attempts
        self.benchmark = f"reasoning-gym {version('reasoning-gym')}"
        self.entry: dict[str, Any] = {}
        self.tries = 0
        self.task_id = ""
        self._entry_seed = 0

    async def _reset(self, seed: int | None, options: Mapping[str, Any]
                     ) -> tuple[list[Message], dict[str, Any]]:
        from reasoning_gym.utils import SYSTEM_PROMPTS

        if options:
            raise ConfigError(f"ReasoningGymEnv.reset takes no options, got {sorted(options)}; "
                              "fix: pick the entry with seed=")
        if seed is None:  # draw one, so task_id names an entry reset(seed=...) rebuilds
            seed = int(self.np_random.integers(self.size))
        seed %= self.size  # larger seeds wrap around to an entry of the split
        self._entry_seed = split_seed(self.dataset, self.split) + seed
        with entry_globals(self._entry_seed):
            # a copy: some datasets hand out the same precomputed dict for an index each time
            self.entry, self.tries = copy.deepcopy(self.data[seed]), 0
        self.task_id = f"reasoning-gym-{self.dataset}-{self.split}-{seed}"
        info = {"task_id": self.task_id, "dataset": self.dataset, "split": self.split,
                "reasoning_gym_version": version("reasoning-gym")}
        return [Message("system", SYSTEM_PROMPTS["default"]),
                Message("user", str(self.entry["question"]))], info

    async def _step(self, action: Message) -> StepResult:
        from reasoning_gym.utils import extract_answer

        self.tries += 1
        last = self.tries >= self.attempts
        answer = extract_answer(action.content, tag_name="answer")
        # the scorer also judges a reply without an answer block: some give it format credit
        with entry_globals(self._entry_seed):
            verdict = float(self.data.score_answer(answer, self.entry))
        if answer is None:
            text = "error: no <answer>...</answer> block found in the reply."
            score = None
        else:
            score = verdict
            text = f"The verifier scored your answer {score:g} out of 1."
        success = verdict >= 1.0
        info = {"benchmark": self.benchmark, "valid": answer is not None, "success": success,
                "score": score}
        if success or last:
            if not success:
                text += " No tries left."
            return StepResult((Message("user", text),), verdict, terminated=True, info=info)
        left = self.attempts - self.tries
        text += (f" Try again ({left} {'try' if left == 1 else 'tries'} left); give the final "
                 "answer inside <answer></answer>.")
        return StepResult((Message("user", text),), None, terminated=False, info=info)

    def state_key(self) -> str | None:
        """The entry (dataset, split, index) and how many tries were used."""
        return f"{self.task_id}|tries={self.tries}" if self.task_id else None

    def render(self) -> str:
        """The question of the current entry."""
        if not self.task_id:
            raise RuntimeError("ReasoningGymEnv.render() before reset(); call `await env.reset()`")
        return str(self.entry["question"])

    def expert_action(self) -> Message:
        """The dataset's gold answer (``entry["answer"]``) in an answer block.

        Raises:
            RuntimeError: before ``reset``, or for an entry that has no gold answer.
        """
        if not self.task_id:
            raise RuntimeError("ReasoningGymEnv.expert_action() before reset(); call "
                               "`await env.reset(seed=...)` first")
        if self.entry.get("answer") is None:
            raise RuntimeError(f"{self.task_id} has no gold answer (the dataset gives None)")
        return Message("assistant", f"<answer>{self.entry['answer']}</answer>")
