r"""Decoupled PPO's importance weights for stale steps.

Fu et al. 2025 (AReaL, arXiv:2505.24298); Hilton et al. 2021 ("Batch size-invariance for
policy optimization"). A step sampled by a behaviour policy μ older than the current
("proximal") policy π_prox is trained with

    L = −E[ w · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) ],
    r = π_θ / π_prox,   w = min(π_prox / μ, w_max)

Deviation: w is one weight per step (a turn), the geometric mean of its token ratios,
exp(mean_t(log π_prox − log μ)), truncated at ``max_weight``; the token batches carry one
advantage per step, so w is folded into the step's advantage. Fresh steps have π_prox = μ
and w = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from agentgym.trainers.batching import Sample


def importance_correct(samples: Sequence[Sample], proximal: Sequence[Sample],
                       max_weight: float) -> tuple[list[Sample], dict[str, float]]:
    """Decoupled-PPO step weights (module docstring) for stale samples.

    Args:
        samples: The stale samples, with behaviour log-probs μ.
        proximal: The same samples with log-probs of the current weights (π_prox).
        max_weight: Truncation cap of w.

    Returns:
        Samples whose old log-probs are π_prox and whose advantage is scaled by w, and the
        weight statistics (``async/is_weight_*``, ``async/is_truncated_frac``).
    """
    out, weights, truncated = [], [], 0
    for s, p in zip(samples, proximal, strict=True):
        log_w = float(np.mean(np.subtract(p.completion_logprobs, s.completion_logprobs)))
        w = math.exp(min(log_w, 50.0))  # (1,) one weight per step; huge ratios only truncate
        truncated += w > max_weight
        w = min(w, max_weight)
        weights.append(w)
        out.append(replace(p, advantage=s.advantage * w))
    w_arr = np.asarray(weights or [1.0])
    return out, {"async/is_weight_mean": float(w_arr.mean()),
                 "async/is_weight_std": float(w_arr.std()),
                 "async/is_weight_min": float(w_arr.min()),
                 "async/is_weight_max": float(w_arr.max()),
                 "async/is_truncated_frac": truncated / max(len(weights), 1)}
