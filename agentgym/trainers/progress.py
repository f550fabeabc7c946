r"""SPA's progress estimator: a causal LM backbone with a scalar head on each action's last token.

    ĉ_t = w·h_t + b,   h_t = last hidden state at the last token of action t
    L   = mean over trajectories of (R − Σ_t ĉ_t)²

Paper: Wang et al. 2025, "SPA-RL: Reinforcing LLM Agents via Stepwise Progress Attribution",
arXiv 2505.20732 (credit-assignment spec §5). The estimator splits the outcome reward R of a
trajectory into per-step contributions ĉ_t whose sum should match R; the step rewards built
from them are in ``agentgym.trainers.advantages.spa``, the fitting in
``agentgym.trainers.progress_train``.

How we read the recorded tokens (never re-tokenized):

- A step's sequence is its ``prompt_ids + completion_ids``; h_t is taken at its last token.
- **Packing**: consecutive steps whose sequences extend each other (the ``full`` context is
  token-exact, so each prompt starts with the previous prompt and completion) share one row,
  and every h_t of that row comes from a single forward pass. A step whose sequence does
  not extend the row (``window`` context, a re-rendered prompt) starts a new row. h_t is
  causal either way: it sees the context up to and including action t, nothing later.
- **Head**: zero-initialized, so an unfitted estimator says ĉ_t = 0 (no progress signal)
  rather than noise. It may take its own learning rate (``ProgressConfig.head_lr``).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.errors import ConfigError
from agentgym.trainers.advantages.base import outcome_score
from agentgym.trainers.batching import TrainingDataError
from agentgym.types import Trajectory

try:
    import torch
except ImportError as exc:  # pragma: no cover - batching raises first
    raise ImportError("the progress estimator needs torch: pip install 'agentgym[train]'") from exc

FORMAT = "agentgym-progress-estimator"
META = "progress.json"  # written last: marks a complete estimator folder
_RECORD_FIX = ("record trajectories with a model policy that returns token ids (agentgym "
               "rollout ENV --policy smollm2, or agentgym train), which stores Step.tokens")


@dataclass(frozen=True)
class Packed:
    """One trajectory as token rows for the estimator.

    Attributes:
        traj_id: The trajectory's id.
        rows: Token rows; each holds one or more consecutive steps.
        marks: ``(row, position, step)`` for every step: where its action ends.
        num_steps: Steps in the trajectory.
        target: R, the outcome score (NaN when unknown, e.g. when only scoring).
    """

    traj_id: str
    rows: tuple[tuple[int, ...], ...]
    marks: tuple[tuple[int, int, int], ...]
    num_steps: int
    target: float

    @property
    def num_tokens(self) -> int:
        """Tokens in all rows."""
        return sum(len(r) for r in self.rows)


def pack(traj: Trajectory) -> Packed:
    """The rows and action-end positions of a trajectory (module docstring, "Packing").

    Raises:
        TrainingDataError: A step has no recorded tokens.
    """
    rows: list[tuple[int, ...]] = []
    marks: list[tuple[int, int, int]] = []
    for k, step in enumerate(traj.steps):
        seq = () if step.tokens is None else step.tokens.prompt_ids + step.tokens.completion_ids
        if not seq:  # an empty completion still has a last token: the end of its prompt
            raise TrainingDataError(f"trajectory {traj.id!r} step {k} has no recorded tokens; "
                                    f"the progress estimator reads recorded ids: {_RECORD_FIX}")
        if rows and len(seq) >= len(rows[-1]) and seq[:len(rows[-1])] == rows[-1]:
            rows[-1] = seq  # extends the row: one forward pass covers both steps
        else:
            rows.append(seq)
        marks.append((len(rows) - 1, len(seq) - 1, k))
    target = outcome_score(traj) if traj.scorable else float("nan")
    return Packed(traj.id, tuple(rows), tuple(marks), len(traj.steps), target)


def micro_batches(packs: Sequence[Packed], max_tokens: int) -> list[list[int]]:
    """Indices of ``packs`` split so that each part pads to at most ``max_tokens`` tokens.

    A trajectory is never split (its contributions are summed inside one part); one longer
    than the budget gets a part of its own.
    """
    parts: list[list[int]] = []
    current: list[int] = []
    rows, longest = 0, 0
    for i, p in enumerate(packs):
        n_rows, length = len(p.rows), max((len(r) for r in p.rows), default=0)
        if current and (rows + n_rows) * max(longest, length) > max_tokens:
            parts.append(current)
            current, rows, longest = [], 0, 0
        current.append(i)
        rows, longest = rows + n_rows, max(longest, length)
    if current:
        parts.append(current)
    return parts


class ProgressModel(torch.nn.Module):
    """Backbone (a transformers base model, no LM head) plus a scalar head.

    Example:
        >>> model = ProgressModel.load("smollm2")  # doctest: +SKIP
        >>> contributions = model.contributions([pack(traj)])  # [(T,) array]  # doctest: +SKIP
    """

    def __init__(self, backbone: Any, source: str = "") -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.source = source

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return self.head.weight.device

    @classmethod
    def from_causal_lm(cls, lm: Any, source: str = "policy") -> ProgressModel:
        """A copy of ``lm``'s base model (the policy's weights stay untouched) with a new head."""
        backbone = copy.deepcopy(lm.base_model)
        for p in backbone.parameters():
            p.requires_grad_(True)
        return cls(backbone, source).to(next(lm.parameters()).device).eval()

    @classmethod
    def load(cls, name_or_path: str | Path, *, device: str = "cpu",
             dtype: str = "float32") -> ProgressModel:
        """A saved estimator folder, or a fresh head on ``smollm2`` / a local HF checkpoint.

        Raises:
            ConfigError: Not a folder (nor ``smollm2``), or a broken estimator folder.
        """
        path = Path(name_or_path).expanduser()
        if (path / META).is_file():
            meta = json.loads((path / META).read_text())
            if meta.get("format") != FORMAT:
                raise ConfigError(f"{path / META} is not an agentgym progress estimator")
            from transformers import AutoModel

            backbone = AutoModel.from_pretrained(path / "backbone", local_files_only=True,
                                                 dtype=getattr(torch, dtype))
            model = cls(backbone, meta.get("source", ""))
            from safetensors.torch import load_file

            model.head.load_state_dict(load_file(path / "head.safetensors"))
            return model.to(device).eval()
        from agentgym.policies.models import load_model

        lm, _ = load_model(str(name_or_path), device=device, dtype=dtype)
        model = cls(lm.base_model, str(name_or_path))
        for p in model.parameters():
            p.requires_grad_(True)
        return model.to(device).eval()

    def save(self, path: str | Path) -> Path:
        """Write the estimator folder (backbone, head, ``progress.json``); returns it."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(path / "backbone")
        save_file({k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()},
                  path / "head.safetensors")
        (path / META).write_text(json.dumps({"format": FORMAT, "version": 1,
                                             "source": self.source}))
        return path

    def forward(self, packs: Sequence[Packed]) -> list[torch.Tensor]:
        """ĉ of every step of ``packs``, one ``(T_i,)`` tensor per trajectory, in one pass."""
        rows = [r for p in packs for r in p.rows]
        vocab = self.backbone.config.vocab_size
        top = max((max(r) for r in rows if r), default=0)
        if top >= vocab:
            raise TrainingDataError(f"token id {top} is outside the estimator's vocabulary "
                                    f"({vocab}); use an estimator backbone that shares the "
                                    "policy's tokenizer")
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T), right-padded
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, :len(r)] = torch.tensor(r)
            mask[b, :len(r)] = 1
        row_base = np.cumsum([0] + [len(p.rows) for p in packs])
        gather_row = [row_base[i] + row for i, p in enumerate(packs) for row, _, _ in p.marks]
        gather_pos = [pos for p in packs for _, pos, _ in p.marks]
        hidden = self.backbone(input_ids=ids.to(self.device),
                               attention_mask=mask.to(self.device)).last_hidden_state  # (B,T,H)
        h = hidden[torch.tensor(gather_row, device=self.device),
                   torch.tensor(gather_pos, device=self.device)]  # (S, H) one per step
        c = self.head(h.float()).squeeze(-1)  # (S,)
        out, start = [], 0
        for p in packs:  # marks are in step order, so slices are already ordered by step
            out.append(c[start:start + p.num_steps])
            start += p.num_steps
        return out

    @torch.no_grad()
    def contributions(self, packs: Sequence[Packed], max_tokens: int = 8192
                      ) -> list[np.ndarray]:
        """ĉ per step of each trajectory, ``(T_i,)`` float64, without gradients."""
        was_training = self.training
        self.eval()
        out: list[np.ndarray] = [np.zeros(0)] * len(packs)
        try:
            for part in micro_batches(packs, max_tokens):
                live = [i for i in part if packs[i].num_steps]
                if not live:
                    continue
                for i, c in zip(live, self([packs[i] for i in live]), strict=True):
                    out[i] = c.double().cpu().numpy()
        finally:
            self.train(was_training)
        return out


def sum_loss(contributions: Sequence[torch.Tensor], targets: Sequence[float]) -> torch.Tensor:
    """Σ_i (R_i − Σ_t ĉ_{i,t})² over the given trajectories (the caller divides by the count)."""
    sums = torch.stack([c.sum() for c in contributions])  # (N,) Σ_t ĉ
    target = torch.tensor(list(targets), dtype=sums.dtype, device=sums.device)  # (N,) R
    return ((target - sums) ** 2).sum()


def fit_metrics(contributions: Sequence[np.ndarray], packs: Sequence[Packed],
                success: Sequence[bool] | None = None) -> dict[str, float]:
    """Held-out MSE of (R − Σĉ), Pearson correlation of Σĉ with R, mean ĉ by success.

    Keys whose value is undefined (no trajectories, constant R or Σĉ) are left out.
    """
    scored = [(c, p) for c, p in zip(contributions, packs, strict=True)
              if np.isfinite(p.target)]
    out: dict[str, float] = {}
    if not scored:
        return out
    sums = np.array([c.sum() for c, _ in scored])
    target = np.array([p.target for _, p in scored])
    out["mse"] = float(np.mean((target - sums) ** 2))
    if len(scored) >= 2 and sums.std() > 0 and target.std() > 0:
        out["corr"] = float(np.corrcoef(sums, target)[0, 1])
    if success is not None:
        flags = [s for s, p in zip(success, packs, strict=True) if np.isfinite(p.target)]
        for name, want in (("c_mean_success", True), ("c_mean_failure", False)):
            steps = [c for (c, _), s in zip(scored, flags, strict=True) if s == want and len(c)]
            if steps:
                out[name] = float(np.concatenate(steps).mean())
    return out


def with_step_values(traj: Trajectory, key: str, values: np.ndarray) -> Trajectory:
    """``traj`` with one float per step written into ``step.result.info[key]``."""
    steps = tuple(replace(s, result=replace(s.result, info={**s.result.info, key: float(v)}))
                  for s, v in zip(traj.steps, values, strict=True))
    return replace(traj, steps=steps)


def save_checkpoint(root: Path, step: int, model: ProgressModel,
                    optimizer: torch.optim.Optimizer, keep: int = 2,
                    extra: Callable[[Path], None] | None = None) -> Path:
    """Write ``<root>/step-<N>/`` atomically: optimizer state, ``extra``'s files, the model.

    ``extra`` writes the caller's own files into the folder. The model's metadata is written
    last, so only a complete folder counts; the newest ``keep`` complete folders are kept.
    """
    final, tmp = root / f"step-{step:06d}", root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if extra is not None:
        extra(tmp)
    model.save(tmp)  # writes META last: the marker of a complete folder
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(p for p in root.glob("step-*") if (p / META).exists())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(root: Path, step: int, model: ProgressModel,
                    optimizer: torch.optim.Optimizer, missing: str) -> Path:
    """Restore ``model`` and ``optimizer`` from ``<root>/step-<N>/``; returns the folder.

    Raises:
        ConfigError: no complete folder for ``step`` (``missing`` says what and how to fix).
    """
    path = root / f"step-{step:06d}"
    if not (path / META).exists():
        raise ConfigError(f"--resume: the run checkpoint is at step {step} but {path} holds "
                          f"no {missing}")
    saved = ProgressModel.load(path, device=str(model.device))
    model.load_state_dict(saved.state_dict())
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    return path
