"""Turn groups of trajectories into padded token batches for the PPO-clip loss.

One training sample per step (DESIGN.md "Data flow"): the step's *recorded*
``prompt_ids + completion_ids`` (never re-tokenized), trained on its completion tokens only,
each of which carries the step's advantage (spec §0 "Broadcast") and its recorded behaviour
log-prob. Every step is its own sample; with ``pack=True`` a micro-batch's samples that share
prefixes (a group's prompt, a full-history episode's growing context) are run as one prefix
tree (:mod:`agentgym.trainers.packing`), computing each shared prefix once. SUPO
(:mod:`agentgym.trainers.supo`) packs each working context into one sample, using
``Sample.mask`` (observation tokens between turns are not trained) and
``Sample.token_advantages`` (each turn's tokens carry that turn's advantage).

**Alignment.** A :class:`Sample` is *token-aligned*: index ``i`` describes ``input_ids[i]``.
A :class:`MicroBatch` is *target-aligned*: with ``input_ids`` of shape ``(B, T)``, the
per-token tensors ``loss_mask``, ``advantages`` and ``old_logprobs`` have shape ``(B, T-1)``
and column ``j`` describes the target ``input_ids[:, j+1]``, predicted from
``logits[:, j]``. This is exactly the layout of
:func:`agentgym.trainers.loss.token_logprobs`, so ``ppo_clip_loss(token_logprobs(...),
mb.old_logprobs, mb.advantages, mb.loss_mask, ...)`` needs no shifting.

**Normalizers.** With gradient accumulation, every micro-batch's loss is divided by the
*global* count (completion tokens for ``token_mean``, sequences for ``seq_mean``) of the
samples passed to :func:`micro_batches`, so the summed gradients equal those of one big
batch. Call :func:`micro_batches` once per optimizer step's samples.

Example:
    >>> samples = samples_from_groups(groups, advantages)  # doctest: +SKIP
    >>> for mb in micro_batches(samples, max_tokens=4096, pad_id=0):  # doctest: +SKIP
    ...     loss, stats = ppo_clip_loss(..., normalizer=mb.normalizer("token_mean"))
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym.errors import AgentGymError, MissingExtraError
from agentgym.trainers.config_update import MiniBatchBy
from agentgym.trainers.packing import packed_order
from agentgym.types import Group

try:
    import torch
except ImportError as exc:
    raise MissingExtraError(exc.name or "torch", "train", "agentgym.trainers") from exc

Aggregation = Literal["token_mean", "seq_mean", "seq_sum"]
_RECORD_FIX = ("record rollouts with a model policy (TransformersPolicy, vLLM, or an "
               "OpenAI-compatible server that returns token ids), which stores Step.tokens")


class TrainingDataError(AgentGymError, ValueError):
    """Trajectories or advantages cannot be turned into a training batch as given."""


@dataclass(frozen=True)
class Sample:
    """One training sample: one step's recorded prompt + completion tokens.

    Attributes:
        traj_id: Id of the trajectory the step belongs to.
        group_id: Group id of that trajectory.
        step_index: ``Step.index`` within the trajectory.
        input_ids: ``prompt_ids + completion_ids`` as recorded, length L.
        prompt_len: Number of prompt tokens P (>= 1); completion tokens are ``[P, L)``.
        advantage: The step's advantage, given to every completion token.
        completion_logprobs: Behaviour log-prob of each completion token, length L - P;
            NaN when the backend recorded none (the caller must then recompute them).
        mask: For a packed sample, 1/0 per token of ``[P, L)``: 1 on the policy's own tokens,
            0 on the observations between them. Empty = every token of ``[P, L)`` trained.
        token_advantages: For a packed sample, the advantage per token of ``[P, L)``.
            Empty = ``advantage`` everywhere.
    """

    traj_id: str
    group_id: str
    step_index: int
    input_ids: tuple[int, ...]
    prompt_len: int
    advantage: float
    completion_logprobs: tuple[float, ...]
    mask: tuple[float, ...] = ()
    token_advantages: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.input_ids) - self.prompt_len
        for name in ("completion_logprobs", "mask", "token_advantages"):
            value = getattr(self, name)
            if (value or name == "completion_logprobs") and len(value) != n:
                raise TrainingDataError(f"Sample.{name} has {len(value)} entries; it needs one "
                                        f"per token after the prompt ({n})")

    @property
    def length(self) -> int:
        """Number of tokens L."""
        return len(self.input_ids)

    @property
    def num_completion_tokens(self) -> int:
        """Number of trained tokens (L - P, less the masked ones of a packed sample)."""
        if self.mask:
            return int(sum(self.mask))
        return len(self.input_ids) - self.prompt_len

    @property
    def has_logprobs(self) -> bool:
        """Whether behaviour log-probs were recorded (for every trained token)."""
        weights = self.mask or (1.0,) * len(self.completion_logprobs)
        return not any(math.isnan(x) for x, w in zip(self.completion_logprobs, weights,
                                                     strict=True) if w)

    @property
    def loss_mask(self) -> np.ndarray:
        """``(L,)`` float32, 1 on trained tokens, 0 on prompt (and masked) tokens."""
        out = np.zeros(self.length, np.float32)
        out[self.prompt_len:] = self.mask or 1.0
        return out

    @property
    def advantages(self) -> np.ndarray:
        """``(L,)`` float32, the advantage on trained tokens, 0 elsewhere."""
        out = np.zeros(self.length, np.float32)
        out[self.prompt_len:] = self.token_advantages or self.advantage
        return out * self.loss_mask

    @property
    def old_logprobs(self) -> np.ndarray:
        """``(L,)`` float32, behaviour log-probs on completion tokens, 0 elsewhere."""
        out = np.zeros(self.length, np.float32)
        out[self.prompt_len:] = self.completion_logprobs
        return np.where(self.loss_mask > 0, out, np.float32(0.0))


def samples_from_groups(groups: Iterable[Group], advantages: Mapping[str, np.ndarray], *,
                        skip_zero_advantage: bool = False,
                        skip_missing_tokens: bool = False) -> list[Sample]:
    """One :class:`Sample` per trainable step, in group / trajectory / step order.

    Skipped: error trajectories (they have no advantage), steps with an empty completion,
    and, when asked, steps whose advantage is exactly 0 (they give no policy gradient, but
    dropping them here also drops their tokens from the ``token_mean`` normalizer and from
    the KL and entropy terms; the trainer keeps them and lets :func:`micro_batches` skip
    their forward pass instead, which keeps the normalizer).

    Args:
        groups: The groups the advantages were computed on.
        advantages: Trajectory id -> ``(num_steps,)`` advantages, for every scorable trajectory.
        skip_zero_advantage: Drop steps whose advantage is exactly 0.
        skip_missing_tokens: Drop steps without recorded tokens (with a warning giving the
            count) instead of raising.

    Returns:
        The samples.

    Raises:
        TrainingDataError: A scorable trajectory has no advantages or the wrong number of
            them, an advantage is not finite, a step has an empty prompt, or steps lack
            recorded tokens (unless ``skip_missing_tokens``).
    """
    samples: list[Sample] = []
    missing: list[str] = []
    for group in groups:
        for traj in group.trajectories:
            if not traj.scorable:
                continue
            if traj.id not in advantages:
                raise TrainingDataError(
                    f"advantages has no entry for scorable trajectory {traj.id!r}; compute "
                    "them with an estimator over the same groups")
            adv = np.asarray(advantages[traj.id], dtype=np.float64)  # (num_steps,)
            if adv.shape != (len(traj.steps),):
                raise TrainingDataError(
                    f"trajectory {traj.id!r} has {len(traj.steps)} steps, so its advantages "
                    f"need shape ({len(traj.steps)},), got {adv.shape}")
            if not np.isfinite(adv).all():
                raise TrainingDataError(f"advantages of {traj.id!r} are not finite: {adv}")
            for step, a in zip(traj.steps, adv, strict=True):
                tokens = step.tokens
                if tokens is None:
                    missing.append(f"{traj.id!r} step {step.index}")
                    continue
                if not tokens.completion_ids or (skip_zero_advantage and a == 0.0):
                    continue
                if not tokens.prompt_ids:
                    raise TrainingDataError(
                        f"{traj.id!r} step {step.index} has no prompt tokens, so its first "
                        "completion token has no context to be predicted from")
                logprobs = tokens.logprobs or (math.nan,) * len(tokens.completion_ids)
                samples.append(Sample(
                    traj_id=traj.id, group_id=traj.group_id, step_index=step.index,
                    input_ids=tokens.prompt_ids + tokens.completion_ids,
                    prompt_len=len(tokens.prompt_ids), advantage=float(a),
                    completion_logprobs=tuple(float(x) for x in logprobs)))
    if missing:
        message = (f"{len(missing)} steps have no recorded tokens (first: "
                   f"{', '.join(missing[:3])}); a step without recorded tokens cannot be "
                   f"trained on: {_RECORD_FIX}")
        if not skip_missing_tokens:
            raise TrainingDataError(message)
        warnings.warn(message + "; skipped them", stacklevel=2)
    return samples


@dataclass(frozen=True, eq=False)
class MicroBatch:
    """Right-padded tensors for one forward/backward pass (see the module docstring).

    Attributes:
        input_ids: ``(B, T)`` long, padded with ``pad_id``.
        attention_mask: ``(B, T)`` long, 1 on real tokens.
        loss_mask: ``(B, T-1)`` float32, 1 where the target ``input_ids[:, j+1]`` is a
            completion token.
        advantages: ``(B, T-1)`` float32, the step advantage at those targets, 0 elsewhere.
        old_logprobs: ``(B, T-1)`` float32, behaviour log-probs at those targets (NaN where
            none were recorded), 0 elsewhere.
        sample_indices: Index of each row in the list given to :func:`micro_batches`.
        global_tokens: Completion tokens in *all* micro-batches of the call.
        global_sequences: Samples in *all* micro-batches of the call.
        oversized: True when this holds one sample longer than ``max_tokens``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor
    sample_indices: tuple[int, ...]
    global_tokens: int
    global_sequences: int
    oversized: bool = False

    @property
    def num_tokens(self) -> int:
        """Completion tokens in this micro-batch."""
        return int(self.loss_mask.sum().item())

    @property
    def needs_recompute(self) -> bool:
        """Whether some trained token has no recorded behaviour log-prob."""
        return bool(torch.isnan(self.old_logprobs[self.loss_mask > 0]).any())

    def normalizer(self, aggregation: Aggregation, max_tokens: int | None = None) -> int:
        """The global denominator for ``ppo_clip_loss`` under ``aggregation``.

        ``seq_sum`` (Dr. GRPO) divides by sequences × ``max_tokens``, a constant length.
        """
        if aggregation == "token_mean":
            return self.global_tokens
        if aggregation == "seq_mean":
            return self.global_sequences
        if aggregation == "seq_sum":
            if max_tokens is None or max_tokens < 1:
                raise ValueError(f"seq_sum needs max_tokens >= 1 (the most tokens per policy "
                                 f"call), got {max_tokens}")
            return self.global_sequences * max_tokens
        raise ValueError(f"aggregation must be 'token_mean', 'seq_mean' or 'seq_sum', got "
                         f"{aggregation!r}")

    def to(self, device: torch.device | str) -> MicroBatch:
        """A copy with every tensor on ``device``."""
        moved = {name: getattr(self, name).to(device) for name in
                 ("input_ids", "attention_mask", "loss_mask", "advantages", "old_logprobs")}
        return MicroBatch(**moved, sample_indices=self.sample_indices,
                          global_tokens=self.global_tokens,
                          global_sequences=self.global_sequences, oversized=self.oversized)


def mini_batch_parts(samples: Sequence[Sample], parts: int, rng: np.random.Generator, *,
                     by: MiniBatchBy = "sample") -> list[list[int]]:
    """Split one epoch's samples at random into ``parts`` mini-batches (indices into samples).

    ``by="sample"`` shuffles the samples and cuts them into ``parts`` near-equal runs;
    ``"episode"`` and ``"group"`` shuffle and cut whole trajectories or groups instead, so an
    episode's turns (and a group's rollouts) meet in one mini-batch, where prefix packing
    computes what they share once. Each call draws one permutation from ``rng``. Parts that
    would be empty (fewer units than ``parts``) are left out.

    Example:
        >>> mini_batch_parts(samples, 2, np.random.default_rng(0), by="group")  # doctest: +SKIP
        [[4, 5, 6, 7], [0, 1, 2, 3]]
    """
    if by == "sample":
        members = [[i] for i in range(len(samples))]
    else:
        keyed: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            keyed.setdefault(s.traj_id if by == "episode" else s.group_id, []).append(i)
        members = list(keyed.values())
    order = rng.permutation(len(members))
    return [[i for unit in chunk for i in members[unit]]
            for chunk in np.array_split(order, parts) if len(chunk)]


def micro_batches(samples: list[Sample], max_tokens: int, pad_id: int, *,
                  pack: bool = False, skip_zero_advantage: bool = False) -> list[MicroBatch]:
    """Pack samples into right-padded micro-batches of at most ``max_tokens`` padded tokens.

    Samples are sorted by length, longest first (ties keep input order, so the packing is
    deterministic and the first micro-batch is the largest), then filled greedily while
    ``rows * longest_row <= max_tokens``. A sample longer than ``max_tokens`` gets a
    micro-batch of its own (``oversized=True``) and a warning, rather than an error.

    Args:
        samples: The samples of one optimizer step.
        max_tokens: Budget of padded tokens (B × T) per micro-batch.
        pad_id: Token id used for padding (it is masked out, any valid id works).
        pack: Budget *packed* tokens instead (each shared prefix counted once, see
            :mod:`agentgym.trainers.packing`): samples sharing prefixes go to the same
            micro-batch, whose forward pass then runs them as one prefix tree.
        skip_zero_advantage: Run no forward pass for samples whose every trained token has
            advantage 0, but still count their tokens and sequences in the normalizers, so
            the loss (and its gradient) equals the unskipped one when the policy term is the
            only per-token term (no KL, no entropy bonus, no value loss).

    Returns:
        The micro-batches, each carrying the global normalizers of the whole call.

    Raises:
        ValueError: ``max_tokens`` < 1.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    total_tokens = sum(s.num_completion_tokens for s in samples)
    total_sequences = len(samples)
    run = [i for i, s in enumerate(samples)  # the normalizers above still count the rest
           if not skip_zero_advantage or s.advantages.any()]
    order = sorted(run, key=lambda i: (-samples[i].length, i))
    packs: list[list[int]] = []
    oversized = sum(samples[i].length > max_tokens for i in order)
    if pack:
        packs = [[run[j] for j in p]
                 for p in packed_order([samples[i].input_ids for i in run], max_tokens)]
    for i in order if not pack else ():
        # The first row of a pack is its longest; an oversized row never gets company.
        if packs and (len(packs[-1]) + 1) * samples[packs[-1][0]].length <= max_tokens:
            packs[-1].append(i)
        else:
            packs.append([i])
    if oversized:
        longest = samples[order[0]].length
        warnings.warn(f"{oversized} samples are longer than max_tokens={max_tokens} (longest "
                      f"{longest}); each got its own micro-batch. Raise max_tokens or cap "
                      "the generation and context length", stacklevel=2)
    return [_collate([samples[i] for i in p], tuple(p), pad_id, total_tokens, total_sequences,
                     len(p) == 1 and samples[p[0]].length > max_tokens) for p in packs]


def _collate(rows: list[Sample], indices: tuple[int, ...], pad_id: int, total_tokens: int,
             total_sequences: int, oversized: bool) -> MicroBatch:
    """Right-pad ``rows`` into one :class:`MicroBatch` (first row is the longest)."""
    b, t = len(rows), max(s.length for s in rows)
    ids = np.full((b, t), pad_id, np.int64)  # (B, T)
    attn = np.zeros((b, t), np.int64)  # (B, T)
    mask = np.zeros((b, t - 1), np.float32)  # (B, T-1) target-aligned
    adv = np.zeros((b, t - 1), np.float32)  # (B, T-1)
    old = np.zeros((b, t - 1), np.float32)  # (B, T-1)
    for r, s in enumerate(rows):
        n = s.length
        ids[r, :n] = s.input_ids
        attn[r, :n] = 1
        # Completion token k (position P+k) is the target of column P+k-1.
        mask[r, :n - 1] = s.loss_mask[1:]
        adv[r, :n - 1] = s.advantages[1:]
        old[r, :n - 1] = s.old_logprobs[1:]
    return MicroBatch(
        input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(attn),
        loss_mask=torch.from_numpy(mask), advantages=torch.from_numpy(adv),
        old_logprobs=torch.from_numpy(old), sample_indices=indices,
        global_tokens=total_tokens, global_sequences=total_sequences, oversized=oversized)
