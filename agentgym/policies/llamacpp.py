"""llama.cpp backend: a ``llama-server`` process generating from a GGUF of the model's weights.

On a CPU the server holds the weights and the KV cache and nothing else: no second Python,
torch or vLLM beside the trainer's (a vLLM engine's process holds about 1.8 GB besides its
KV cache), and it starts in about a second. So it is the backend for a CPU job that must fit
a small memory budget. Build the server once with ``bash scripts/build_llama_server.sh``
(llama.cpp from the ``llama-cpp-python`` source on PyPI; about five minutes on two cores);
:func:`server_binary` says where it is looked for.

- Prompts go as token ids (``prompt_ids``, else the chat template rendered by the
  tokenizer, as every token-level backend renders it) and the sampled ids come back, so
  trajectories stay token-exact; the text is decoded from them here.
- Log-probs are the server's post-sampling probabilities: the softmax of the
  temperature-scaled logits (renormalised over the nucleus when ``top_p < 1``), as vLLM's
  ``processed_logprobs`` and the transformers backend record them. Every other llama.cpp
  sampler (top-k, min-p, penalties) is off.
- A weight sync (:meth:`LlamaCppPolicy.update_weights`) takes full weights (a LoRA run sends
  them merged), writes them as a GGUF (:mod:`agentgym.policies.gguf_export`) and restarts
  the server on it, after the running requests finish; new requests wait for it.
- :meth:`LlamaCppPolicy.suspend` stops the server until the next request, so that a
  trainer can give its memory to the update.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import AgentGymError, ConfigError
from agentgym.memory import release_free_memory
from agentgym.policies.base import Completion, GenerationRequest, SamplingParams
from agentgym.policies.gguf_export import folder_tensors, read_config, write_gguf
from agentgym.policies.models import cache_root, load_tokenizer
from agentgym.prompting import render_prompt
from agentgym.scratch import scratch_dir

SERVER_ENV = "AGENTGYM_LLAMA_SERVER"
"""Environment variable naming the ``llama-server`` binary to run."""


class LlamaServerMissingError(AgentGymError, RuntimeError):
    """No ``llama-server`` binary was found (the message says how to build one)."""


def server_binary() -> Path:
    """The ``llama-server`` to run: ``$AGENTGYM_LLAMA_SERVER``, agentgym's build, or PATH.

    Raises:
        LlamaServerMissingError: None of them exists.
    """
    named = os.environ.get(SERVER_ENV)
    candidates = [Path(named)] if named else []
    candidates.append(cache_root() / "llama.cpp" / "bin" / "llama-server")
    found = shutil.which("llama-server")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise LlamaServerMissingError(
        f"no llama-server binary (looked at {', '.join(str(p) for p in candidates)}); build "
        f"it with `bash scripts/build_llama_server.sh` (about five minutes on two cores), or "
        f"set {SERVER_ENV} to one")


def server_build(binary: Path | None = None) -> str:
    """The server's ``--version`` line: llama.cpp's version and commit.

    A record of an evaluation the server generated names it.

    Raises:
        LlamaServerMissingError: No server binary was found.
        AgentGymError: The binary did not print its version.
    """
    binary = binary or server_binary()
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentGymError(f"{binary} --version did not run: {exc}") from exc
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("version:"):
            return line.removeprefix("version:").strip()
    raise AgentGymError(f"{binary} --version printed no version line (exit {done.returncode}); "
                        f"rebuild it with `bash scripts/build_llama_server.sh`")


class LlamaCppPolicy:
    """The :class:`~agentgym.policies.base.TrainablePolicy` protocol on a ``llama-server``.

    Args:
        model: A local Llama-family model folder (config, tokenizer.json, safetensors).
        dtype: Weights dtype the server computes with (``float32`` or ``float16``).
        max_num_seqs: Sequences decoded together (the server's slots); more requests wait.
        slot_tokens: Longest prompt + completion, the KV cache each slot holds.
        kv_dtype: The KV cache's dtype (``float16`` or ``float32``; with ``float32`` the
            log-probs equal the transformers model's to about 3e-5, at twice the memory).
        seed: Seed of requests that carry none.
        threads: Threads the server computes with (default: every core).
        flash_attn: Use llama.cpp's fused attention kernel. Off by default: on two AVX-512
            cores its CPU kernel was the slower one (docs/llamacpp.md, "Server settings").
        startup_timeout: Seconds a server start may take before it counts as failed.

    Attributes:
        policy_version: Version of the weights; recorded in every completion.
        tokenizer: The model's tokenizer.
    """

    model = None  # the weights live in the server's process
    constrains_tool_calls = False

    def __init__(self, model: str, *, dtype: str = "float32", max_num_seqs: int = 16,
                 slot_tokens: int = 2048, kv_dtype: str = "float16", seed: int = 0,
                 threads: int | None = None, flash_attn: bool = False,
                 startup_timeout: float = 300.0) -> None:
        read_config(model)  # refuses other architectures before anything starts
        self.binary = server_binary()
        self.model_dir = model
        self.dtype = dtype
        self.max_num_seqs = max_num_seqs
        self.slot_tokens = slot_tokens
        if kv_dtype not in ("float16", "float32"):
            raise ConfigError(f"kv_dtype is float16 or float32, not {kv_dtype!r}")
        self.kv_type = {"float16": "f16", "float32": "f32"}[kv_dtype]
        self.seed = seed
        self.threads = threads or os.cpu_count() or 1
        self.flash_attn = flash_attn
        self.startup_timeout = startup_timeout
        self.tokenizer = load_tokenizer(model)
        self.policy_version = 0
        self._scratch = scratch_dir("agentgym-llamacpp-")
        self._weights = write_gguf(model, folder_tensors(model), self._scratch / "model.gguf",
                                   dtype=dtype)
        self._process: subprocess.Popen[bytes] | None = None
        self._url = ""
        self._session: Any = None
        self._running = 0
        self._slots = asyncio.Semaphore(max_num_seqs)  # no more requests in flight than slots
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = asyncio.Lock()  # one start or stop at a time
        self._sync = asyncio.Lock()  # one weight sync or suspension at a time
        self._open = asyncio.Event()  # cleared while weights change: new requests wait
        self._open.set()
        self._closed = False

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; the server batches concurrent requests itself."""
        if self._closed:
            raise AgentGymError("this LlamaCppPolicy was closed; create a new one")
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Completion:
        if request.params.constrain_tool_calls:
            raise ConfigError("the llama.cpp backend does not constrain tool calls; use "
                              "vllm:PATH for --constrain-tool-calls")
        ids = list(request.prompt_ids) or self.tokenizer(
            render_prompt(self.tokenizer, request.messages, request.tools),
            add_special_tokens=False)["input_ids"]
        if not ids:
            raise ConfigError("the prompt is empty after tokenization; give messages or ids")
        await self._open.wait()  # a sync in progress: start with the new weights
        self._running += 1  # counted from here, so that a sync waits for this request
        self._idle.clear()
        try:
            await self._ensure_started()
            async with self._slots:
                return await self._post(ids, request.params)
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def _post(self, ids: list[int], params: SamplingParams) -> Completion:
        version = self.policy_version
        async with self._session.post(f"{self._url}/completion",
                                      json=self._body(ids, params)) as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                raise AgentGymError(f"llama-server answered {response.status}: "
                                    f"{str(body)[:300]}")
        tokens, logprobs = sampled_tokens(body)
        finish = "length" if body.get("stop_type") == "limit" else "stop"
        return Completion(self.tokenizer.decode(tokens, skip_special_tokens=True), tuple(ids),
                          tuple(tokens), tuple(logprobs), finish, policy_version=version)

    def _body(self, ids: list[int], params: SamplingParams) -> dict[str, Any]:
        room = self.slot_tokens - len(ids)
        if room < 1:
            raise ConfigError(f"the prompt has {len(ids)} tokens but a slot holds "
                              f"{self.slot_tokens} (slot_tokens); give the server longer slots")
        seed = self.seed if params.seed is None else params.seed
        samplers = ["temperature"] + (["top_p"] if params.top_p < 1 else [])
        return {"prompt": ids, "n_predict": min(params.max_tokens, room),
                "temperature": params.temperature, "top_p": params.top_p, "top_k": 0,
                "min_p": 0.0, "samplers": samplers, "seed": seed % 2**32,
                "stop": list(params.stop), "n_probs": 1, "post_sampling_probs": True,
                "return_tokens": True, "cache_prompt": True}

    async def update_weights(self, named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                             *, version: int | None = None) -> int:
        """Serve new full weights (the model's ``state_dict`` names); set the version.

        Running requests finish on the old weights; requests that arrive meanwhile start on
        the new ones. Empty ``named_tensors`` moves only the version.
        """
        pairs: Iterable[Any] = (named_tensors.items() if isinstance(named_tensors, Mapping)
                                else named_tensors)
        items = [(str(name), tensor) for name, tensor in pairs]
        if any(".lora_" in name for name, _ in items):
            raise ConfigError("the llama.cpp backend takes full weights; a LoRA run sends "
                              "them merged (model.vllm_lora_sync: merged)")
        async with self._sync:
            self._open.clear()
            try:
                new = self.policy_version + 1 if version is None else int(version)
                if items:
                    await self._idle.wait()
                    async with self._lock:
                        await self._stop()
                        await asyncio.to_thread(write_gguf, self.model_dir, items,
                                                self._weights, dtype=self.dtype)
                self.policy_version = new
            finally:
                self._open.set()
        return self.policy_version

    async def suspend(self) -> None:
        """Stop the server (its memory goes back) until the next request starts it again."""
        async with self._sync:
            self._open.clear()
            try:
                await self._idle.wait()
                async with self._lock:
                    await self._stop()
            finally:
                self._open.set()

    async def aclose(self) -> None:
        """Stop the server and remove its files; idempotent."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            await self._stop()
        if self._session is not None:
            await self._session.close()
            self._session = None
        shutil.rmtree(self._scratch, ignore_errors=True)

    async def _ensure_started(self) -> None:
        if self._ready():
            return
        async with self._lock:
            if not self._ready():
                await self._stop()  # one that exited
                await self._start()

    def _ready(self) -> bool:
        return self._url != "" and self._process is not None and self._process.poll() is None

    async def _start(self) -> None:
        import aiohttp

        release_free_memory()  # what this process freed goes back before the server loads
        port = _free_port()
        command = [str(self.binary), "--model", str(self._weights), "--host", "127.0.0.1",
                   "--port", str(port), "--parallel", str(self.max_num_seqs),
                   "--ctx-size", str(self.slot_tokens * self.max_num_seqs),
                   "--threads", str(self.threads), "--threads-batch", str(self.threads),
                   "--cache-ram", "0", "--load-mode", "none", "--no-webui", "--no-warmup",
                   "--seed", str(self.seed % 2**32), "--cache-type-k", self.kv_type,
                   "--cache-type-v", self.kv_type,
                   "--flash-attn", "on" if self.flash_attn else "off"]
        # from the event loop's thread, not a worker's: the server dies with it (_launch)
        self._process = _launch(command, self._scratch / "server.log")
        url = f"http://127.0.0.1:{port}"
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        deadline = time.monotonic() + self.startup_timeout
        while True:  # ready when /health says so: loading takes what the machine's load makes it
            if self._process.poll() is not None:
                raise AgentGymError(f"llama-server exited ({self._process.returncode}) while "
                                    f"starting: {self._log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with self._session.get(f"{url}/health") as response:
                    if response.status == 200:
                        self._url = url
                        return
            if time.monotonic() > deadline:
                await self._stop()
                raise AgentGymError(f"llama-server did not become ready in "
                                    f"{self.startup_timeout:.0f} s: {self._log_tail()}")
            await asyncio.sleep(0.05)

    async def _stop(self) -> None:
        process, self._process, self._url = self._process, None, ""
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await asyncio.to_thread(process.wait)

    def _log_tail(self) -> str:
        try:
            return (self._scratch / "server.log").read_text(errors="replace")[-800:]
        except OSError:
            return "(no log)"


def sampled_tokens(body: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """The sampled ids and their log-probs from a ``/completion`` answer.

    The server reports a probability per whole character: a token that ends inside a
    multi-byte character gets none, and its log-prob here is NaN (an on-policy update scores
    it itself, ``UpdateConfig.recompute_missing``; an off-policy one asks for
    ``loss.recompute_logprobs``). The end-of-generation token it stops at is not among
    ``tokens`` but has the last probability; the trainer needs it (the model learns to stop
    there), so it is put back.
    """
    def logprob(entry: Mapping[str, Any]) -> float:
        p = float(entry.get("prob", 0.0))
        return math.log(p) if p > 0 else -math.inf

    tokens = [int(t) for t in body.get("tokens") or ()]
    probs = list(body.get("completion_probabilities") or ())
    logprobs, j = [], 0
    for token in tokens:
        if j < len(probs) and int(probs[j]["id"]) == token:
            logprobs.append(logprob(probs[j]))
            j += 1
        else:
            logprobs.append(math.nan)
    rest = probs[j:]
    if len(rest) == 1 and body.get("stop_type") == "eos":
        tokens.append(int(rest[0]["id"]))
        logprobs.append(logprob(rest[0]))
    elif rest:
        raise AgentGymError(f"llama-server's probabilities do not follow its {len(tokens)} "
                            f"sampled tokens ({len(rest)} left over)")
    return tokens, logprobs


def _launch(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start the server in a session of its own (stopped as a group), its output to ``log``.

    Where util-linux's ``setpriv`` is found, the kernel kills the server when the thread
    that started it ends (``--pdeathsig``): a trainer killed outright (SIGKILL, the OOM
    killer) runs no cleanup, and the server, in its own session, would hold its memory on.
    ``setpriv`` execs the server, so the pid is the server's.
    """
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv:
        command = [setpriv, "--pdeathsig", "KILL", "--", *command]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
