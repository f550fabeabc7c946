r"""The policy loss on completion tokens (spec credit-assignment.md §8), shared by every estimator.

For completion token t of sample i, with advantage A_t (the step's advantage, broadcast) and
ρ_t = exp(log π_θ(y_t) − log π_old(y_t)), the policy term ℓ_t is one of (``policy_loss``):

``ppo`` — PPO-clip (Schulman et al. 2017)::

    ℓ_t = −min(ρ_t·A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_t)

``gspo`` — Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071), the
sequence-level ratio, in the paper's GSPO-token form so that per-token advantages work too::

    s_i   = exp( (1/|y_i|) Σ_{t∈i} log ρ_t )                 (geometric mean of the token ratios)
    s_i,t = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]                (value s_i; gradient s_i·∇log π_θ(y_t))
    ℓ_t   = −min(s_i,t·A_t, clip(s_i,t, 1 − ε_low, 1 + ε_high)·A_t)

``cispo`` — Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv:2506.13585): the
importance weight is clipped and detached, and every token keeps a gradient::

    ℓ_t = −sg[clip(ρ_t, 1 − ε_low, 1 + ε_high)] · A_t · log π_θ(y_t)

Then, for every variant::

    ℓ_t += β·k3_t − c_H·H_t,     k3_t = exp(r_t − log π_θ) − (r_t − log π_θ) − 1,  r = log π_ref
    token_mean:  L = Σ_tokens ℓ_t / N_tokens
    seq_mean:    L = Σ_seqs (Σ_{t∈seq} ℓ_t / |seq|) / N_seqs
    seq_sum:     L = Σ_seqs Σ_{t∈seq} ℓ_t / (N_seqs · L_max)      (Dr. GRPO, Liu et al. 2025)

ε_low = ε_high = 0.2 by default (0.28 for DAPO clip-higher), β = ``kl_coef`` (k3 is the
low-variance, always ≥ 0 KL estimator of Schulman's "Approximating KL divergence"), c_H =
``entropy_coef``. N_tokens and N_seqs are *global* counts over every micro-batch of one
optimizer step (``MicroBatch.normalizer``), so summing micro-batch losses under gradient
accumulation gives the gradient of the whole batch. ``seq_sum``'s L_max is a constant (the
most tokens per policy call), so a long completion is not down-weighted per token, as Dr.
GRPO ("Understanding R1-Zero-Like Training", arXiv:2503.20783) prescribes; its other half,
advantages not divided by the group std, is the GRPO estimator's ``mode=mean_norm``.

**Log-probs.** π_old is the behaviour log-prob recorded at sampling time (unless the caller
recomputes it): the generation backend records ``log_softmax(logits / T)`` of the sampled
token, T being the sampling temperature (T = 1 for greedy, temperature 0), top_p not
applied. :func:`token_logprobs` computes the same quantity, so its ``temperature`` must be
the sampling temperature, or ρ ≠ 1 even before any update.

Deviations and choices:

- The KL and entropy terms are per-token and aggregated with the same rule as the policy
  term (as verl does), not averaged separately.
- No dual-clip (the extra ``max(·, c·A)`` bound for A < 0); §8 does not use one.
- GSPO: a "sequence" is one sample (one policy call's completion), not a whole multi-turn
  episode. The paper clips with ε ≈ 3e-4 / 4e-4 and aggregates per sequence
  (``seq_mean``); both are left to the config (``loss.clip_low/clip_high``,
  ``loss.aggregation``).
- CISPO: MiniMax-M1 sets no lower bound on the weight (ε_low unused) and tunes ε_high; here
  both bounds come from ``clip_low``/``clip_high`` (``clip_low`` close to 1 is no lower bound).
- :class:`LossStats` are means over the tokens of one micro-batch; weight them by
  ``num_tokens`` to report a whole batch. Clip fractions count the ratio that is clipped:
  s_i for GSPO, ρ_t otherwise (for CISPO: tokens whose weight was clipped, gradient kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentgym.errors import MissingExtraError
from agentgym.trainers.batching import TrainingDataError
from agentgym.trainers.packing import pack_prefix_tree

try:
    import torch
except ImportError as exc:
    raise MissingExtraError(exc.name or "torch", "train", "agentgym.trainers") from exc

from agentgym.trainers.fused_head import HeadLogSoftmax, plain_output_layer
from agentgym.trainers.tree_attention import runs_tree_attention, tree_plan

PolicyLoss = Literal["ppo", "gspo", "cispo"]
LossAggregation = Literal["token_mean", "seq_mean", "seq_sum"]
_CHUNK_ELEMENTS = 1 << 25  # float32 working set of (rows × vocab) per chunk: 128 MiB
BATCH_SHARED_PREFIX = True
"""Let :func:`packed_token_logprobs` run a prompt that every row shares once, before a padded
batch of the rows' rests, where that costs less than the prefix tree (False: always the tree;
``benchmarks/update_memory.py`` compares the two)."""


@dataclass(frozen=True)
class LossStats:
    """Diagnostics of one :func:`ppo_clip_loss` call (means over its completion tokens).

    Attributes:
        clip_low_frac: Share of tokens with A < 0 and ratio < 1 − ε_low (no gradient there,
            except under CISPO).
        clip_high_frac: Share of tokens with A > 0 and ratio > 1 + ε_high (likewise).
        approx_kl: k3 estimate of KL(π_old ‖ π_θ): mean of (ρ − 1) − log ρ.
        ratio_mean: Mean of ρ.
        kl_ref: Mean k3 KL to the reference policy; None when no ``ref_logprobs`` came.
        entropy: Mean entropy of π_θ; None when no ``entropy`` came.
        num_tokens: Number of completion tokens.
    """

    clip_low_frac: float
    clip_high_frac: float
    approx_kl: float
    ratio_mean: float
    kl_ref: float | None
    entropy: float | None
    num_tokens: int


class _TokenLogSoftmax(torch.autograd.Function):
    """Log-prob (and entropy) of target tokens from ``(N, V)`` logits, chunked over rows.

    Saves only the logits (in their own dtype) and ``(N,)`` vectors; the float32 softmax is
    recomputed chunk by chunk in backward, so no ``(N, V)`` float32 tensor outlives a chunk.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, scale: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n, vocab = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)
        lse = logits.new_empty(n, dtype=dtype)  # (N,)
        logp = torch.empty_like(lse)  # (N,)
        ent = torch.zeros_like(lse)  # (N,)
        step = max(1, _CHUNK_ELEMENTS // vocab)
        for s in range(0, n, step):
            x = logits[s:s + step].to(dtype) / scale  # (n_c, V)
            lse[s:s + step] = torch.logsumexp(x, dim=-1)
            logp[s:s + step] = x.gather(-1, targets[s:s + step, None]).squeeze(-1) - lse[s:s + step]
            if with_entropy:  # H = lse − E_p[x]
                ent[s:s + step] = lse[s:s + step] - (x.softmax(-1) * x).sum(-1)
        ctx.save_for_backward(logits, targets, lse, ent)
        ctx.scale, ctx.with_entropy = scale, with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor, g_ent: torch.Tensor
                 ) -> tuple[torch.Tensor, None, None, None]:
        logits, targets, lse, ent = ctx.saved_tensors
        grad = torch.empty_like(logits)
        step = max(1, _CHUNK_ELEMENTS // logits.shape[1])
        for s in range(0, logits.shape[0], step):
            sl = slice(s, s + step)
            x = logits[sl].to(lse.dtype) / ctx.scale  # (n_c, V)
            p = torch.exp(x - lse[sl, None])  # (n_c, V) softmax
            gx = -p * g_logp[sl, None]  # d log p_y / dx = onehot(y) − p
            gx.scatter_add_(-1, targets[sl, None], g_logp[sl, None])
            if ctx.with_entropy:  # dH/dx = −p ⊙ (x − E_p[x]),  E_p[x] = lse − H
                gx -= g_ent[sl, None] * p * (x - (lse[sl] - ent[sl])[:, None])
            grad[sl] = (gx / ctx.scale).to(logits.dtype)
        return grad, None, None, None


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, with_entropy: bool = False,
                   mask: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each next token under ``log_softmax(logits / temperature)``.

    Column j of the result is the log-prob of ``input_ids[:, j+1]`` given ``input_ids[:, :j+1]``
    (the target-aligned layout of ``MicroBatch``). Memory: the model is asked only for the
    logits from the first masked column on (``logits_to_keep``, when its ``forward`` takes
    it), only masked positions are gathered, and the float32 log-softmax is done in chunks
    whose softmax is recomputed in backward. Where the logits are the output layer applied
    to the decoder's last hidden state (Llama, Mistral, Qwen 2 and 3), that layer runs
    inside the chunks instead and no ``(N, V)`` logits are kept
    (:mod:`agentgym.trainers.fused_head`).

    Args:
        model: A causal LM returning ``.logits`` of shape ``(B, T, V)``.
        input_ids: ``(B, T)`` right-padded token ids.
        attention_mask: ``(B, T)``, 1 on real tokens.
        temperature: The sampling temperature (0 = greedy, scored at T = 1).
        with_entropy: Also return the entropy of the tempered distribution.
        mask: ``(B, T-1)`` positions to compute (e.g. ``MicroBatch.loss_mask``); default all
            real targets. Other positions are 0.

    Returns:
        ``(logprobs, entropy)``, each ``(B, T-1)`` float32; ``entropy`` is None unless asked.

    Raises:
        ValueError: ``temperature`` is negative or not finite.
    """
    if not (temperature >= 0 and temperature != float("inf")):
        raise ValueError(f"temperature must be >= 0 (the sampling temperature), got {temperature}")
    scale = temperature if temperature > 0 else 1.0
    t = input_ids.shape[1]
    sel = (attention_mask[:, 1:] if mask is None else mask) > 0  # (B, T-1)
    cols = sel.any(dim=0).nonzero()
    first = int(cols[0]) if len(cols) else t - 1
    sub = sel[:, first:]  # (B, T-1-first)
    targets = input_ids[:, first + 1:][sub]  # (N,)
    fused = plain_output_layer(model)
    if fused is not None:  # no (N, V) logits kept: the output layer runs chunk by chunk
        decoder, head = fused
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask,
                         use_cache=False).last_hidden_state  # (B, T, d)
        logp, ent = HeadLogSoftmax.apply(hidden[:, first:t - 1][sub], head.weight, targets,
                                         scale, with_entropy)  # (N,), (N,)
    else:
        kwargs = {"logits_to_keep": t - first} if first > 0 and _takes_logits_to_keep(model) \
            else {}
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                       **kwargs).logits
        logits = logits[:, logits.shape[1] - (t - first):-1]  # (B, T-1-first, V) from `first`
        logp, ent = _TokenLogSoftmax.apply(logits[sub], targets, scale,
                                           with_entropy)  # (N,), (N,)

    def place(values: torch.Tensor) -> torch.Tensor:  # (N,) -> (B, T-1), zeros elsewhere
        full = torch.zeros(sub.shape, dtype=values.dtype, device=values.device)
        return torch.nn.functional.pad(full.masked_scatter(sub, values), (first, 0))

    return place(logp), (place(ent) if with_entropy else None)


def packed_token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          temperature: float = 1.0, with_entropy: bool = False,
                          mask: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`token_logprobs` computed with every shared prefix run once.

    Shared prefixes (a group's prompt, a full-history episode's earlier turns) run once: the
    rows become one sequence (:func:`agentgym.trainers.packing.pack_prefix_tree`) with a 4D
    attention mask (each token sees its own prefix only) and per-token position ids; a model
    on the CPU attention that takes a plan attends segment by segment instead of under the
    dense N × N mask (:mod:`agentgym.trainers.tree_attention`). Where the rows share a
    prompt and little after it (window-context samples of one env), the tree costs more
    than it saves; then the shared prompt runs once and its keys
    and values are repeated for a padded batch of the rows' rests
    (:data:`BATCH_SHARED_PREFIX`). Same arguments, layout and result as
    :func:`token_logprobs`, to floating-point summation order; the model must take a 4D
    additive float ``attention_mask`` and ``position_ids``.
    """
    if not (temperature >= 0 and temperature != float("inf")):
        raise ValueError(f"temperature must be >= 0 (the sampling temperature), got {temperature}")
    scale = temperature if temperature > 0 else 1.0
    device = input_ids.device
    lengths = attention_mask.sum(dim=1).tolist()
    rows_ids = [input_ids[r, :n].tolist() for r, n in enumerate(lengths)]
    tree = pack_prefix_tree(rows_ids)
    sel = (attention_mask[:, 1:] if mask is None else mask) > 0  # (B, T-1)
    shared = _shared_prefix(rows_ids, sel)
    plan = tree_plan(tree, device, next(model.parameters()).dtype) \
        if runs_tree_attention(model) else None
    pairs = plan.attention_pairs if plan is not None else len(tree.tokens) ** 2
    if BATCH_SHARED_PREFIX and _batched_suffixes_cheaper(model, len(tree.tokens), pairs, shared,
                                                         lengths, sel):
        return _prefix_batched_logprobs(model, input_ids, lengths, sel, shared, scale,
                                        with_entropy)
    where = torch.zeros(input_ids.shape, dtype=torch.long)  # (B, T) packed index of each token
    for r, path in enumerate(tree.paths):
        where[r, :len(path)] = torch.tensor(path)
    rows, cols = sel.nonzero(as_tuple=True)  # target input_ids[r, j+1] is predicted by token j
    sources = where.to(device)[rows, cols]  # (N,) packed index of each predicting token
    dtype = next(model.parameters()).dtype
    kwargs: dict[str, Any] = {}
    if plan is not None:
        # each segment attends to its ancestors only; the 4D placeholder is passed through
        # as is, where no mask would have transformers build an N × N one from the positions
        kwargs["tree_plan"] = plan
        additive = torch.zeros((1, 1), dtype=dtype, device=device)
    else:
        # Additive float mask (0 = attend), one copy for every layer: a boolean one is turned
        # into an N × N float mask inside each layer's attention and kept for the backward
        # pass (measured: + N² × 4 bytes per layer, 2 GB for a 4096-token pack in 30 layers).
        allowed = torch.from_numpy(tree.ancestor_mask()).to(device)
        additive = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)
    packed = {"input_ids": torch.tensor([tree.tokens], device=device),
              "attention_mask": additive[None, None],
              "position_ids": torch.tensor([tree.positions], device=device), "use_cache": False}
    targets = input_ids[rows, cols + 1]  # (N,)
    fused = plain_output_layer(model)
    if fused is not None:  # no (N, V) logits kept: the output layer runs chunk by chunk
        decoder, head = fused
        hidden = decoder(**packed, **kwargs).last_hidden_state[0]  # (N_packed, d)
        logp, ent = HeadLogSoftmax.apply(hidden[sources], head.weight, targets, scale,
                                         with_entropy)
    else:
        keep, inverse = torch.unique(sources, return_inverse=True)  # logits only where needed
        if _takes_logits_to_keep(model):
            kwargs["logits_to_keep"] = keep
        logits = model(**packed, **kwargs).logits[0]  # (U, V), or (N_packed, V)
        picked = logits[inverse] if "logits_to_keep" in kwargs else logits[sources]  # (N, V)
        logp, ent = _TokenLogSoftmax.apply(picked, targets, scale, with_entropy)

    def place(values: torch.Tensor) -> torch.Tensor:  # (N,) -> (B, T-1), zeros elsewhere
        full = torch.zeros(sel.shape, dtype=values.dtype, device=values.device)
        return full.index_put((rows, cols), values)

    return place(logp), (place(ent) if with_entropy else None)


def _shared_prefix(rows: list[list[int]], sel: torch.Tensor) -> int:
    """Tokens every row shares, ending before any row's first scored column."""
    first = int(sel.float().argmax(dim=1).min()) if bool(sel.any()) else 0
    n = min(len(r) for r in rows)
    shared = next((i for i in range(n) if len({r[i] for r in rows}) > 1), n)
    return min(shared, first)


def _batched_suffixes_cheaper(model: Any, tree_tokens: int, tree_pairs: int, shared: int,
                              lengths: list[int], sel: torch.Tensor) -> bool:
    """Whether the shared prefix once + the rows' rests as padded batches beats the tree.

    Cost in token-forwards: a token's linear layers cost ~ 24·h² per layer, attending to one
    more token ~ 4·h, so a pair costs 1/(6h) of a token. The tree attends ``tree_pairs``
    query-key pairs (N² with a dense mask); each batch of rests (:func:`_length_buckets`)
    pads to its longest and attends to the prefix.
    """
    config = getattr(model, "config", None)
    hidden = getattr(config, "hidden_size", None)
    if shared == 0 or hidden is None or len(lengths) < 2 or not _takes_logits_to_keep(model):
        return False
    if model.training and getattr(model, "is_gradient_checkpointing", False):
        return False  # checkpointed layers return no cache, and the prefix's is needed here
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        # FSDP gathers the weights in every forward pass, so ranks must make the same
        # number of them; the number of batches here depends on each rank's own rows
        return False
    pair = 1.0 / (6 * hidden)
    rests = [n - shared for n in lengths]
    tree_cost = tree_tokens + pair * tree_pairs
    batch_cost = shared
    for bucket in _length_buckets(rests):
        longest = max(rests[r] for r in bucket)  # padded rest length S of this batch
        batch_cost += len(bucket) * longest * (1 + pair * (shared + longest))
    return batch_cost < tree_cost and _kept_columns(lengths, sel) <= 64


def _length_buckets(rests: list[int]) -> list[list[int]]:
    """Row indices in batches of similar rest length (little padding), shortest first."""
    buckets: list[list[int]] = []
    for r in sorted(range(len(rests)), key=lambda i: (rests[i], i)):
        if buckets and rests[r] <= 1.25 * rests[buckets[-1][0]] + 16:
            buckets[-1].append(r)
        else:
            buckets.append([r])
    return buckets


def _kept_columns(lengths: list[int], sel: torch.Tensor) -> int:
    """Columns to score once every row is aligned to end at the same column (its last)."""
    cols = [n - 1 - int(c) for r, n in enumerate(lengths) for c in sel[r].nonzero()]
    return max(cols, default=0) + 1


def _prefix_batched_logprobs(model: Any, input_ids: torch.Tensor, lengths: list[int],
                             sel: torch.Tensor, shared: int, scale: float, with_entropy: bool
                             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs with the rows' common prefix run once and its keys/values shared.

    The prefix runs as one row (gradients kept). Rows of similar length then run as padded
    batches, each with the prefix's keys and values expanded to its rows: a row's rest is
    left-padded to end at the batch's last column (pads masked, positions continued from
    the prefix), so every scored column falls in the last ``keep`` columns.
    """
    from transformers import DynamicCache

    from agentgym.policies.kv_cache import cache_keyword

    device = input_ids.device
    argument = cache_keyword(model)
    prefix = getattr(model(input_ids=input_ids[:1, :shared], use_cache=True), argument)
    keep = _kept_columns(lengths, sel)
    picked, where_rows, where_cols = [], [], []
    for bucket in _length_buckets([n - shared for n in lengths]):
        b, rest = len(bucket), max(lengths[r] for r in bucket) - shared
        cache = DynamicCache()
        for i, layer in enumerate(prefix.layers):  # (1, heads, P, d) -> (b, heads, P, d)
            cache.update(layer.keys.expand(b, -1, -1, -1), layer.values.expand(b, -1, -1, -1), i)
        ids = torch.zeros((b, rest), dtype=input_ids.dtype, device=device)  # (b, S) left-padded
        attn = torch.zeros((b, shared + rest), dtype=torch.long, device=device)
        attn[:, :shared] = 1
        pos = torch.zeros((b, rest), dtype=torch.long, device=device)
        for j, r in enumerate(bucket):
            pad = rest - (lengths[r] - shared)
            ids[j, pad:] = input_ids[r, shared:lengths[r]]
            attn[j, shared + pad:] = 1
            pos[j, pad:] = torch.arange(shared, lengths[r], device=device)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True,
                       logits_to_keep=keep, **{argument: cache}).logits  # (b, K, V)
        last = logits.shape[1] - 1  # K = min(keep, S): every row ends at column K-1
        mine = sel[bucket]  # (b, T-1)
        rows, cols = mine.nonzero(as_tuple=True)  # row j's target [r, c+1] comes from token c
        ends = torch.tensor([lengths[r] for r in bucket], device=device)[rows]
        picked.append(logits[rows, last - (ends - 1 - cols)])
        where_rows.append(torch.tensor(bucket, device=device)[rows])
        where_cols.append(cols)
    rows, cols = torch.cat(where_rows), torch.cat(where_cols)
    logp, ent = _TokenLogSoftmax.apply(torch.cat(picked), input_ids[rows, cols + 1], scale,
                                       with_entropy)

    def place(values: torch.Tensor) -> torch.Tensor:  # (N,) -> (B, T-1), zeros elsewhere
        full = torch.zeros(sel.shape, dtype=values.dtype, device=values.device)
        return full.index_put((rows, cols), values)

    return place(logp), (place(ent) if with_entropy else None)


def kl_k3(ref_logprobs: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref): ``exp(d) − d − 1`` with ``d = ref − logπ``.

    It is ≥ 0 everywhere and 0 where the two log-probs are equal.
    """
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2,
                  aggregation: LossAggregation = "token_mean",
                  normalizer: float, ref_logprobs: torch.Tensor | None = None,
                  kl_coef: float = 0.0, entropy: torch.Tensor | None = None,
                  entropy_coef: float = 0.0, policy_loss: PolicyLoss = "ppo"
                  ) -> tuple[torch.Tensor, LossStats]:
    """The policy loss of one micro-batch (see the module docstring for the equations).

    Args:
        logprobs: ``(B, T')`` log π_θ of the targets, with gradient.
        old_logprobs: ``(B, T')`` log π_old (behaviour or recomputed).
        advantages: ``(B, T')`` advantage of each target token.
        mask: ``(B, T')`` 1 on completion tokens; every other position is ignored. Each
            row is one sequence (GSPO's ratio and ``seq_mean`` are per row).
        clip_low: ε_low.
        clip_high: ε_high.
        aggregation: ``token_mean``, ``seq_mean`` or ``seq_sum`` (Dr. GRPO).
        normalizer: Global token count (token_mean), sequence count (seq_mean) or sequence
            count × L_max (seq_sum) of the optimizer step:
            ``MicroBatch.normalizer(aggregation, max_tokens=L_max)``.
        ref_logprobs: ``(B, T')`` reference log-probs, needed when ``kl_coef`` > 0.
        kl_coef: Weight β of the k3 KL to the reference.
        entropy: ``(B, T')`` entropy of π_θ, needed when ``entropy_coef`` > 0.
        entropy_coef: Weight of the entropy bonus (subtracted from the loss).
        policy_loss: ``ppo`` (token ratios), ``gspo`` (sequence ratios) or ``cispo``
            (clipped, detached importance weights).

    Returns:
        ``(loss, stats)``: the scalar loss to backpropagate and its :class:`LossStats`.

    Raises:
        TrainingDataError: ``old_logprobs`` is NaN on a completion token (not recorded).
        ValueError: Shapes differ, a setting is out of range or a needed input is missing.
    """
    for name, x in (("old_logprobs", old_logprobs), ("advantages", advantages), ("mask", mask),
                    ("ref_logprobs", ref_logprobs), ("entropy", entropy)):
        if x is not None and x.shape != logprobs.shape:
            raise ValueError(f"{name} must have the shape of logprobs {tuple(logprobs.shape)}, "
                             f"got {tuple(x.shape)}")
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if aggregation not in ("token_mean", "seq_mean", "seq_sum"):
        raise ValueError(f"aggregation must be 'token_mean', 'seq_mean' or 'seq_sum', got "
                         f"{aggregation!r}")
    if policy_loss not in ("ppo", "gspo", "cispo"):
        raise ValueError(f"policy_loss must be 'ppo', 'gspo' or 'cispo', got {policy_loss!r}")
    if not normalizer > 0:
        raise ValueError(f"normalizer must be > 0, got {normalizer}; use "
                         "MicroBatch.normalizer(aggregation)")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (token_logprobs of the reference model)")
    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs entropy (token_logprobs(..., with_entropy=True))")
    m = mask > 0  # (B, T')
    missing = int((torch.isnan(old_logprobs) & m).sum())
    if missing:
        raise TrainingDataError(
            f"old_logprobs is NaN at {missing} completion tokens: those steps were recorded "
            "without behaviour log-probs; enable recompute (loss.recompute_logprobs=true), i.e. "
            "fill MicroBatch.old_logprobs with token_logprobs(...) under torch.no_grad()")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    # Sanitize off-mask positions first, so that no inf/NaN there reaches a gradient.
    log_ratio = torch.where(m, logprobs - old_logprobs, zero)  # (B, T')
    adv = torch.where(m, advantages.to(logprobs.dtype), zero)  # (B, T')
    ratio = torch.exp(log_ratio)  # (B, T') ρ_t
    per_token, clip_ratio = _policy_term(policy_loss, logprobs, log_ratio, ratio, adv, m,
                                         clip_low, clip_high)  # (B, T'), (B, T')
    k3 = None
    if ref_logprobs is not None:
        k3 = kl_k3(torch.where(m, ref_logprobs, logprobs.detach()), logprobs)  # (B, T')
        if kl_coef:
            per_token = per_token + kl_coef * k3
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * entropy
    per_token = torch.where(m, per_token, zero)  # (B, T')
    if aggregation == "seq_mean":  # mean within each sequence, then sum over sequences
        loss = (per_token.sum(-1) / m.sum(-1).clamp(min=1)).sum() / normalizer
    else:  # token_mean: / N_tokens; seq_sum: / (N_seqs · L_max), both in the normalizer
        loss = per_token.sum() / normalizer
    with torch.no_grad():
        n = int(m.sum())

        def mean(x: torch.Tensor) -> float:
            return float(x[m].float().mean()) if n else 0.0

        stats = LossStats(
            clip_low_frac=mean(((clip_ratio < 1 - clip_low) & (adv < 0)).float()),
            clip_high_frac=mean(((clip_ratio > 1 + clip_high) & (adv > 0)).float()),
            approx_kl=mean(ratio - 1 - log_ratio), ratio_mean=mean(ratio),
            kl_ref=None if k3 is None else mean(k3),
            entropy=None if entropy is None else mean(entropy), num_tokens=n)
    return loss, stats


def _policy_term(policy_loss: PolicyLoss, logprobs: torch.Tensor, log_ratio: torch.Tensor,
                 ratio: torch.Tensor, adv: torch.Tensor, m: torch.Tensor, clip_low: float,
                 clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token policy term ℓ_t of ``policy_loss`` and the ratio its clip acts on."""
    low, high = 1 - clip_low, 1 + clip_high
    if policy_loss == "cispo":  # −sg[clip(ρ)]·A·log π_θ: every token keeps its gradient
        weight = ratio.detach().clamp(low, high)  # (B, T')
        return -weight * adv * logprobs, ratio.detach()
    if policy_loss == "gspo":  # s_i = exp(mean_t log ρ_t), per row; GSPO-token form
        seq_log = log_ratio.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
        seq = torch.exp(seq_log.detach())  # (B, 1)
        ratio = seq * torch.exp(logprobs - logprobs.detach())  # (B, T') value s_i
        ratio = torch.where(m, ratio, torch.ones_like(ratio))
    clipped = ratio.clamp(low, high)  # (B, T')
    return -torch.minimum(ratio * adv, clipped * adv), ratio.detach()


def _takes_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` (or that of a PEFT/DDP-wrapped model) takes ``logits_to_keep``."""
    from agentgym.policies.kv_cache import forward_parameters

    return "logits_to_keep" in forward_parameters(model)
