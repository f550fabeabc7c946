"""A model folder's own held-out evaluation, kept beside its weights for the next run.

``agentgym sft`` with ``model.generation: vllm`` evaluates its last weights on the held-out
tasks and exports those weights as ``run_dir/model``; ``agentgym train`` from that folder
begins by evaluating the same weights on the same tasks on the same engine (in the agent
job, docs/agent-job.md, 200 episodes: minutes for the same numbers). So the SFT writes
``model/heldout.json`` beside the weights: the evaluation's settings
(:func:`evaluation_key`), a digest of the weights it sent the engine (:func:`weights_digest`),
its metrics and each task's outcome. A run whose evaluation before its first step has the
same settings, and whose first sync sends weights with the same digest, takes that record
instead of evaluating (its metrics say ``eval/recorded``); anything else evaluates.

Why the digest of what was sent is enough: the engine holds its folder's weights overwritten
by what it was sent. The SFT's folder is its base model and it sends every weight it trains
(all of them, or all of them with the adapters merged in); the exported folder is that base
with the same trained weights written in. So equal sent weights mean equal engines, and
adapters sent alone (vLLM LoRA requests) never match: the next run's adapters start at zero.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import agentgym
from agentgym.files import atomic_write
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.vllm_generation import ENGINES, llamacpp_key

RECORD = "heldout.json"
"""The record's file name in a model folder."""


def evaluation_key(config: TrainConfig, tokenizer: Any) -> dict[str, Any] | None:
    """What decides a run's held-out evaluation besides the weights; None if not recordable.

    ``tokenizer`` is the engine's (prompts are rendered with its chat template, read from
    the engine's own folder: the base model's for the SFT, the export for the next run).

    Recordable: one env with held-out seeds, evaluated greedily (a sampled evaluation run
    again would draw other episodes) on a vLLM engine (whose weights are exactly what it was
    sent; in-process generation runs adapters unmerged, which rounds differently from the
    merged model the next run loads).
    """
    env = config.env
    if config.envs or not env.eval_seeds or env.eval_temperature > 0 \
            or config.model.generation not in ENGINES:
        return None
    r, m = config.rollout, config.model
    kwargs = {**env.kwargs, **env.eval_kwargs}
    if env.max_turns is not None:
        kwargs["max_turns"] = env.max_turns
    return {"agentgym": agentgym.__version__, "env": env.id, "kwargs": kwargs,
            "seeds": [env.eval_first_seed, env.eval_seeds], "draws": env.eval_draws,
            "agent": {"context": r.context, "history_length": r.history_length,
                      "max_prompt_tokens": r.max_prompt_tokens, "max_tokens": r.max_tokens,
                      "top_p": r.top_p, "tool_format": r.tool_format,
                      "summarize": asdict(r.summarize.for_eval())},
            "episodes": {"concurrency": r.concurrency, "step_timeout": r.step_timeout,
                         "max_steps": r.max_steps},
            "engine": {**({"llamacpp": llamacpp_key(config)}
                          if m.generation == "llamacpp" else {}),
                       "dtype": m.vllm_dtype or m.dtype, "max_num_seqs": m.max_batch_size,
                       "kv_cache_gib": m.vllm_kv_cache_gib, "device": m.device},
            "chat_template": hashlib.sha256(
                str(getattr(tokenizer, "chat_template", None)).encode()).hexdigest(),
            "vocabulary": len(tokenizer) if tokenizer is not None else None}


def weights_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 over the tensors' names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


@dataclass(frozen=True)
class Record:
    """One held-out evaluation of the weights with digest ``weights_sha256``."""

    key: dict[str, Any]
    """The evaluation's settings (:func:`evaluation_key`)."""
    weights_sha256: str
    """:func:`weights_digest` of the weights the engine was sent."""
    metrics: dict[str, float]
    """Its ``eval/*`` metrics."""
    outcomes: dict[str, float]
    """Each task's outcome (:func:`agentgym.trainers.heldout.task_outcomes`)."""

    def write(self, folder: str | Path) -> Path:
        """Keep it in ``folder`` (a model folder) as :data:`RECORD`."""
        return atomic_write(Path(folder) / RECORD, json.dumps(asdict(self), sort_keys=True))


def read_record(folder: str | Path, key: Mapping[str, Any], digest: str) -> Record | None:
    """The folder's record if it evaluated the weights with ``digest`` with settings ``key``.

    None when there is no record, it cannot be read, or its settings or weights differ:
    the run then evaluates, as it would without one.
    """
    try:
        raw = json.loads((Path(folder) / RECORD).read_text())
        record = Record(raw["key"], raw["weights_sha256"],
                        {k: float(v) for k, v in raw["metrics"].items()},
                        {k: float(v) for k, v in raw["outcomes"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    same = record.key == json.loads(json.dumps(dict(key))) and record.weights_sha256 == digest
    return record if same else None
