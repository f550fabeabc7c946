"""vLLM backend: an in-process async engine with weight updates from a torch state dict.

``pip install 'agentgym[vllm]'``; needs an NVIDIA GPU. The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that :meth:`VLLMPolicy.update_weights` can hand
the trainer's tensors to the worker without serialising them: the worker extension
:class:`WeightSyncExtension` calls the model's own ``load_weights``.

Prompts are token ids (``prompt_ids``, else the chat template rendered by the tokenizer),
so trajectories stay token-exact. Log-probs are vLLM's ``processed_logprobs``: the
log-softmax of the temperature-scaled logits, as the transformers backend records them
(with ``top_p < 1`` vLLM renormalises over the nucleus; keep ``top_p = 1`` for training).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentgym.errors import MissingExtraError
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.prompting import render_prompt


class WeightSyncExtension:
    """vLLM worker extension: load named tensors into the running model."""

    model_runner: Any

    def agentgym_load_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        """Load weights in place; returns how many tensors were given."""
        self.model_runner.model.load_weights(weights=named_tensors)
        return len(named_tensors)


class VLLMPolicy:
    """The Policy protocol on a vLLM ``AsyncLLM`` engine.

    Args:
        model: A local model path (no hub access is assumed).
        gpu_memory_utilization: Fraction of GPU memory vLLM may take.
        max_model_len: Longest prompt + completion.
        dtype: Model dtype.
        **engine_kwargs: Further ``AsyncEngineArgs``.
    """

    def __init__(self, model: str, *, gpu_memory_utilization: float = 0.5,
                 max_model_len: int = 8192, dtype: str = "bfloat16",
                 **engine_kwargs: Any) -> None:
        try:  # the checker resolves `vllm` to this very file (an optional extra; see pyproject)
            from vllm import AsyncEngineArgs  # pyright: ignore[reportAttributeAccessIssue]
            from vllm.v1.engine.async_llm import AsyncLLM  # pyright: ignore[reportMissingImports]
        except ImportError as exc:
            raise MissingExtraError("vllm", "vllm", "The vLLM backend") from exc
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        args = AsyncEngineArgs(
            model=model, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.WeightSyncExtension", **engine_kwargs)
        self.engine = AsyncLLM.from_engine_args(args)
        self.tokenizer = self._load_tokenizer(model)
        self.policy_version = 0
        self._closed = False

    @staticmethod
    def _load_tokenizer(model: str) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model, local_files_only=True)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; vLLM batches concurrent requests itself."""
        import asyncio

        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Completion:
        ids = list(request.prompt_ids) or self.tokenizer.encode(
            render_prompt(self.tokenizer, request.messages, request.tools),
            add_special_tokens=False)
        final = None
        async for output in self.engine.generate(
                {"prompt_token_ids": ids}, self._sampling(request.params),
                request_id=uuid.uuid4().hex):
            final = output
        assert final is not None, "vLLM returned no output"
        out = final.outputs[0]
        token_ids = tuple(out.token_ids)
        logprobs = tuple(float(step[t].logprob) for step, t in zip(out.logprobs or (), token_ids,
                                                                    strict=False))
        return Completion(out.text, tuple(ids), token_ids, logprobs,
                          "length" if out.finish_reason == "length" else "stop",
                          policy_version=self.policy_version)

    @staticmethod
    def _sampling(params: SamplingParams) -> Any:
        from vllm import SamplingParams as VSamplingParams

        kwargs: dict[str, Any] = {  # vLLM's SamplingParams, not ours
            "temperature": params.temperature, "top_p": params.top_p,
            "max_tokens": params.max_tokens, "stop": list(params.stop) or None,
            "include_stop_str_in_output": True, "seed": params.seed, "logprobs": 0}
        return VSamplingParams(**kwargs)

    async def update_weights(self, named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                             *, version: int | None = None) -> int:
        """Load new weights into the engine and set ``policy_version`` (default: + 1).

        vLLM's own ``load_weights`` maps Hugging Face names (fused qkv / gate_up included);
        the prefix cache is reset because cached KV came from the old weights.
        """
        items = list(named_tensors.items() if isinstance(named_tensors, Mapping)
                     else named_tensors)
        if items:
            await self.engine.collective_rpc("agentgym_load_weights", args=(items,))
            await self.engine.reset_prefix_cache()
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        return self.policy_version

    async def aclose(self) -> None:
        """Shut the engine down; idempotent."""
        if not self._closed:
            self._closed = True
            self.engine.shutdown()
