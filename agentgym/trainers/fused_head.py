r"""Log-probs of target tokens straight from hidden states: the output layer fused in, chunked.

    x_t = W h_t / T,   log π(y_t) = x_t[y_t] − logsumexp(x_t),   H_t = logsumexp(x_t) − Σ_v p_v x_v

    ∂/∂x_t = g_t (onehot(y_t) − p_t) − g^H_t p_t ⊙ (x_t − E_p[x_t]),   ∂/∂h_t = W^T ∂/∂x_t / T,
    ∂/∂W = Σ_t (∂/∂x_t) h_t^T / T

A scored token's logits are a vocabulary-sized row (49,152 floats for SmolLM2, 192 KiB):
in a 4096-token pass of the agent job, the scored tokens' logits, their gradient and the
gradient of the rows they were gathered from held 1.25 GB at once (docs/benchmarks.md).
Here the output layer ``W`` runs inside the chunked log-softmax instead: each chunk's
logits are made from the hidden states, used and dropped, and made again in backward (one
more ``W h`` per scored token, about 2·d·V FLOPs), so only the ``(N, d)`` hidden states and
``(N,)`` vectors are kept. The idea of the fused linear cross-entropy of Liger Kernel (Hsu
et al., 2024, "Liger Kernel: Efficient Triton Kernels for LLM Training"), here for log-probs
and entropy.

Used for causal LMs whose logits are their output layer applied to the decoder's last hidden
state and nothing more (:func:`plain_output_layer`); others keep the logits path. Under bf16
autocast the output layer here still runs in the weights' float32, with autocast off in both
passes: a bf16 logit of 16 is rounded by up to 1/16, which moves a token's log-prob by as
much (PPO clips the ratio at 0.2 from 1), and a backward that recomputed the logits in bf16
would take its softmax from other logits than the forward's.
"""

from __future__ import annotations

from typing import Any

import torch

_CHUNK_ELEMENTS = 1 << 24  # float32 logits of one chunk (rows × vocab): 64 MiB
ENABLED = True
"""Score through the fused output layer where a model allows it (False: always the logits;
``benchmarks/fused_head.py`` compares the two)."""

# CausalLM classes whose forward is ``lm_head(model(...).last_hidden_state)``, with no
# scaling, soft-capping or bias (Granite divides by a scale, Gemma 2 soft-caps: not here)
_PLAIN = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                    "Qwen3ForCausalLM"})


def plain_output_layer(model: Any) -> tuple[Any, torch.nn.Linear] | None:
    """``(decoder, output layer)`` of a model this module can fuse, else None.

    A PEFT-wrapped model is looked through (its adapters live in the decoder's layers);
    a model in a process group of several ranks (FSDP gathers the weights in the outer
    model's forward) keeps the logits path.
    """
    if not ENABLED:
        return None
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__name__ not in _PLAIN:
        return None
    head = getattr(base, "lm_head", None)
    decoder = getattr(base, "model", None)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None or decoder is None:
        return None
    if getattr(base.config, "final_logit_softcapping", None):
        return None
    return decoder, head


class HeadLogSoftmax(torch.autograd.Function):
    """``(log π(y), H)`` of targets ``(N,)`` from hidden states ``(N, d)`` and ``W`` ``(V, d)``."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                scale: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Chunk by chunk: logits, their logsumexp, the target's log-prob and the entropy."""
        with torch.autocast(hidden.device.type, enabled=False):
            return HeadLogSoftmax._forward(ctx, hidden, weight, targets, scale, with_entropy)

    @staticmethod
    def _forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                 scale: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n, vocab = hidden.shape[0], weight.shape[0]
        dtype = torch.promote_types(weight.dtype, torch.float32)
        lse = hidden.new_empty(n, dtype=dtype)  # (N,)
        logp = torch.empty_like(lse)  # (N,)
        ent = torch.zeros_like(lse)  # (N,)
        step = max(1, _CHUNK_ELEMENTS // vocab)
        for s in range(0, n, step):
            sl = slice(s, s + step)
            x = (hidden[sl].to(weight.dtype) @ weight.T).to(dtype) / scale  # (n_c, V)
            lse[sl] = torch.logsumexp(x, dim=-1)
            logp[sl] = x.gather(-1, targets[sl, None]).squeeze(-1) - lse[sl]
            if with_entropy:  # H = lse − E_p[x]
                ent[sl] = lse[sl] - (x.softmax(-1) * x).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse, ent)
        ctx.scale, ctx.with_entropy = scale, with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor, g_ent: torch.Tensor
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        """Chunk by chunk: the logits again, then the gradients of ``hidden`` and ``W``."""
        with torch.autocast(g_logp.device.type, enabled=False):
            return HeadLogSoftmax._backward(ctx, g_logp, g_ent)

    @staticmethod
    def _backward(ctx: Any, g_logp: torch.Tensor, g_ent: torch.Tensor
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, targets, lse, ent = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros_like(weight, dtype=lse.dtype) if want_w else None
        step = max(1, _CHUNK_ELEMENTS // weight.shape[0])
        for s in range(0, hidden.shape[0], step):
            sl = slice(s, s + step)
            h = hidden[sl].to(weight.dtype)  # (n_c, d)
            x = (h @ weight.T).to(lse.dtype) / ctx.scale  # (n_c, V)
            p = torch.exp(x - lse[sl, None])  # (n_c, V) softmax
            gx = -p * g_logp[sl, None]  # d log p_y / dx = onehot(y) − p
            gx.scatter_add_(-1, targets[sl, None], g_logp[sl, None])
            if ctx.with_entropy:  # dH/dx = −p ⊙ (x − E_p[x]),  E_p[x] = lse − H
                gx -= g_ent[sl, None] * p * (x - (lse[sl] - ent[sl])[:, None])
            gx = (gx / ctx.scale).to(weight.dtype)  # (n_c, V) d loss / d (W h)
            if grad_h is not None:
                grad_h[sl] = (gx @ weight).to(grad_h.dtype)
            if grad_w is not None:
                grad_w += (gx.T @ h).to(grad_w.dtype)
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None
