"""Whether this CPU multiplies 16-bit matrices at speed, and a warning where it does not.

torch (oneDNN) and vLLM's CPU build run bfloat16 and float16 matrix products with AVX-512
instructions (AVX512-BF16 and AMX where present). An x86-64 CPU without AVX-512 (AVX2 only,
such as an AMD EPYC of the Zen 3 generation) gets a fallback that is not a speed-up but a
slow-down: on a 2-core EPYC with AVX2, a 1024 x 1024 product ran at 0.85 GFLOP/s in bfloat16
and 0.78 in float16 against 116 in float32, and a bf16 vLLM engine played the agent job's
episodes 3.4x slower than a float32 one (docs/vllm.md). So a 16-bit dtype on such a CPU is
warned about where it is chosen: the vLLM engine's weights, the transformers backend's, bf16
autocast.
"""

from __future__ import annotations

import platform
import warnings

HALF = ("bfloat16", "float16")
SLOW_CAPABILITIES = ("AVX2", "NO AVX", "DEFAULT")
"""torch's x86-64 CPU capabilities (``torch.backends.cpu.get_cpu_capability``) without AVX-512."""


def slow_on_this_cpu(dtype: str, capability: str | None = None) -> bool:
    """Whether ``dtype``'s matrix products fall back to a slow path on this x86-64 CPU.

    ``capability`` is torch's name for the CPU's vector extensions; None: this machine's.
    """
    if dtype not in HALF or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if capability is None:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    return capability in SLOW_CAPABILITIES


def warn_if_slow(dtype: str, where: str, fix: str, capability: str | None = None) -> bool:
    """Warn (and return True) when ``dtype`` on this CPU would be far slower than float32."""
    if not slow_on_this_cpu(dtype, capability):
        return False
    warnings.warn(f"{where} is {dtype}, but this CPU has no AVX-512: its {dtype} matrix "
                  "products take a fallback slower than float32's (on an AVX2 EPYC: a vLLM "
                  f"engine 3.4x, torch's products over 100x). {fix}", stacklevel=3)
    return True
