"""Mixed precision for the training passes: ``optim.autocast`` of train and sft.

Under ``torch.autocast(dtype=bfloat16)`` the matrix products of the forward pass (and so of
its backward) run in bfloat16 while the weights, their gradients and the optimizer's state
stay float32; the log-softmax over the vocabulary is still taken in float32, and where the
output layer is fused into it (:mod:`agentgym.trainers.fused_head`) so is the output layer.
On a CPU with AVX512-BF16 this runs a LoRA update of SmolLM2-135M shaped like the agent
job's 1.49x as fast in 77% of the memory (benchmarks/update_precision.py; 1.11x inside the
job, beside its vLLM engine); on a GPU it is the usual bf16 mixed-precision training. One
update's gradient agrees with float32's, yet the agent job's RL collapsed under it within
five steps where float32 runs never did (docs/agent-job.md, runs 19, 20 and 49) while π_old
came from the engine's recorded log-probs: a bf16 pass scores some tokens systematically
apart from them (the one opening a tool call lower at every turn), so the ratio was biased
before any update. Recomputed in bf16 by the update itself, which the trainer now does under
autocast unless ``loss.recompute_logprobs`` says otherwise, RL did not collapse (run 50).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Literal

from agentgym.cpu import warn_if_slow

if TYPE_CHECKING:
    import torch

Autocast = Literal["none", "bfloat16"]
"""The choices of ``optim.autocast`` (this module imports torch only when a pass runs, so the
configs that name this type load without it)."""


def training_precision(device: torch.device | str, autocast: Autocast
                       ) -> contextlib.AbstractContextManager[object]:
    """A context for a training pass on ``device``: bf16 autocast, or nothing."""
    import torch

    if autocast == "none":
        return contextlib.nullcontext()
    kind = torch.device(device).type
    if kind == "cpu":
        warn_if_slow("bfloat16", "optim.autocast", "Train in float32 (optim.autocast: none).")
    return torch.autocast(device_type=kind, dtype=torch.bfloat16)
