"""Stop a run whose update stopped being finite, before the step is checkpointed.

A loss, gradient norm or weight that is NaN or ±inf never recovers: every later step and
every checkpoint would carry it, and the run would still end "complete". The update calls
:func:`check_update` after each optimizer step's backward pass (before ``optimizer.step``)
and :func:`check_weights` once its steps are done; either raises :class:`NonFiniteError`
naming the training step and the quantity. The loop checkpoints a step only after its update
returned, so the newest checkpoint stays the last good one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from agentgym.errors import AgentGymError


class NonFiniteError(AgentGymError, RuntimeError):
    """The loss, gradient norm or weights of a training step are not finite."""


def _fix(step: int) -> str:
    return (f"the run stops before step {step} is checkpointed, so its newest checkpoint "
            "is the last good one. Lower optim.lr (or set optim.grad_clip), check the "
            "rewards for extreme values, then resume with --resume or start again")


def check_update(step: int, loss: float, grad_norm: float, *, optimizer_step: int = 1,
                 optimizer_steps: int = 1) -> None:
    """Raise unless one optimizer step's loss and gradient norm are finite.

    Args:
        step: The training step (1-based, as metrics and checkpoints count it).
        loss: The optimizer step's loss (summed over micro-batches).
        grad_norm: Its gradient norm before clipping.
        optimizer_step: Which optimizer step of the update (1-based), for the message.
        optimizer_steps: How many the update has.

    Raises:
        NonFiniteError: Naming the step and the quantity.
    """
    for name, value in (("loss", loss), ("gradient norm", grad_norm)):
        if not math.isfinite(value):
            raise NonFiniteError(
                f"training step {step}: the {name} is {value} (optimizer step "
                f"{optimizer_step} of {optimizer_steps}), not a finite number; {_fix(step)}")


def check_fit(model: str, loss: float, grad_norm: float, fix: str) -> None:
    """Raise unless an auxiliary model's optimizer step has a finite loss and gradient norm.

    Called before the step is taken (GAE's critic, SPA's progress model).

    Args:
        model: What is fit, for the message ("the value model").
        loss: Its loss over the optimizer step.
        grad_norm: Its gradient norm before clipping.
        fix: The setting to change ("lower value.lr").
    """
    for name, value in (("loss", loss), ("gradient norm", grad_norm)):
        if not math.isfinite(value):
            raise NonFiniteError(
                f"fitting {model}: the {name} is {value}, not a finite number; its weights "
                f"were not updated and the run stops before this step is checkpointed: {fix}, "
                "then resume with --resume or start again")


def check_weights(step: int, named_parameters: Iterable[tuple[str, torch.Tensor]],
                  all_ranks: Callable[[float], float] | None = None) -> None:
    """Raise unless every updated (trainable) parameter is finite.

    Args:
        step: The training step (1-based).
        named_parameters: The trainable parameters (this process's shards under FSDP).
        all_ranks: Sums a count over processes, so that every rank raises together;
            None in one process.

    Raises:
        NonFiniteError: Naming the step and the first non-finite parameters.
    """
    bad = []
    with torch.no_grad():
        for name, param in named_parameters:
            to_local = getattr(param, "to_local", None)  # an FSDP shard: this rank's part
            local = to_local() if to_local is not None else param
            if local.numel() and not bool(torch.isfinite(local).all()):
                bad.append(name)
    count = all_ranks(float(len(bad))) if all_ranks is not None else float(len(bad))
    if count:
        where = f" ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})" if bad else ""
        raise NonFiniteError(f"training step {step}: {int(count)} updated weight tensor(s) "
                             f"hold NaN or inf{where}; {_fix(step)}")
