"""Shared Java VMs for the benchmarks whose engine is a bundled jar (ScienceWorld, TWX).

Both packages start one JVM per Python env object through Py4J. A JVM costs 200 MB to 1.4 GB
of resident memory however small the episode, so 64 concurrent episodes would need 64 JVMs.
Their simulators, though, are plain objects (one ``PythonInterface`` per episode) that live
happily side by side in one JVM. :class:`JVMPool` therefore starts a JVM on demand, hands out
*leases* on it (at most ``episodes_per_jvm`` at a time), starts another JVM only when every
running one is full, and keeps idle JVMs for the next episode (a cold JVM takes seconds to
load a task; a warm one a fraction of that). ``docs/text-worlds.md`` has the measured memory
per episode.

A JVM dies with the Python process (Py4J's ``die_on_exit``), and :func:`shutdown_pools` stops
them earlier. A JVM that crashes takes its episodes with it: their next engine call raises
:class:`EngineFault`, which the rollout engine records as an ``error`` trajectory.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

JRE_PACKAGE = "default-jre-headless"
"""The Debian package that provides ``java`` (OpenJDK 17 on Debian 12)."""

DEFAULT_JAVA_OPTS = ("-Xmx4g", "-XX:+UseSerialGC", "-Xss4m")
"""Why: a 4 GiB heap cap keeps 64 episodes (about 700 MB live heap) with room for GC; the serial
collector keeps the resident set near the live heap instead of growing per GC thread; a larger
thread stack because the engines recurse over their object trees."""


class EngineFault(RuntimeError):
    """A benchmark's JVM failed (died, lost its socket): an infrastructure fault, not a mistake."""

try:  # py4j comes with the benchmark packages; without it no engine call is ever made
    from py4j.protocol import Py4JError as _Py4JError
    from py4j.protocol import Py4JJavaError as JavaError
except ImportError:  # pragma: no cover
    class _Py4JError(Exception):  # type: ignore[no-redef]
        pass

    class JavaError(Exception):  # type: ignore[no-redef]
        """An exception the engine raised in Java (an input it rejected)."""


async def call_engine(fn: Callable[..., Any], *args: Any, engine: str) -> Any:
    """Run one blocking engine call in a worker thread.

    A ``JavaError`` (the engine rejected this input) passes through for the env to turn into
    an observation; any other py4j failure means the JVM is lost and becomes an EngineFault.
    """
    try:
        return await asyncio.to_thread(fn, *args)
    except JavaError:
        raise
    except _Py4JError as exc:
        raise EngineFault(f"the {engine} JVM failed: {exc!r}") from exc


def require_java() -> str:
    """The path of ``java``; raise :class:`ConfigError` naming the package when there is none."""
    java = shutil.which("java")
    if java is None:
        home = os.environ.get("JAVA_HOME")
        candidate = os.path.join(home, "bin", "java") if home else ""
        if candidate and os.access(candidate, os.X_OK):
            return candidate
        raise ConfigError(
            "this benchmark's engine is a Java jar, but no `java` is on PATH (nor in "
            f"$JAVA_HOME/bin); install a Java runtime, e.g. `apt-get install {JRE_PACKAGE}` "
            "(OpenJDK 17 works), then retry")
    return java


@dataclass(frozen=True)
class Lease:
    """One episode's share of a pooled JVM.

    Attributes:
        gateway: The Py4J ``JavaGateway`` of the JVM (``gateway.jvm`` reaches its classes).
        jvm_id: Which JVM of the pool (for logs and tests).
    """

    gateway: Any
    jvm_id: int


class _JVM:
    """One running JVM and how many leases it has out."""

    def __init__(self, jvm_id: int, gateway: Any, process: Any) -> None:
        self.jvm_id = jvm_id
        self.gateway = gateway
        self.process = process
        self.leases = 0

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        try:
            self.gateway.shutdown()
        except Exception:  # the JVM may already be gone; stopping is best effort
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class JVMPool:
    """JVMs running one jar, shared by many episodes; thread-safe.

    Args:
        jar: Path of the engine's jar (from the benchmark's installed package).
        cwd: Working directory of the JVM (the package folder, as the package itself uses).
        episodes_per_jvm: Leases one JVM holds before another is started.
        java_opts: JVM options (heap size, collector).

    Raises:
        ConfigError: ``episodes_per_jvm`` is below 1.
    """

    def __init__(self, jar: str, cwd: str, *, episodes_per_jvm: int = 64,
                 java_opts: tuple[str, ...] = DEFAULT_JAVA_OPTS) -> None:
        if episodes_per_jvm < 1:
            raise ConfigError(f"episodes_per_jvm must be >= 1, got {episodes_per_jvm}")
        self.jar = jar
        self.cwd = cwd
        self.episodes_per_jvm = episodes_per_jvm
        self.java_opts = java_opts
        self._jvms: list[_JVM] = []
        self._next_id = 0
        self._lock = threading.Lock()

    def lease(self) -> Lease:
        """A share of a running JVM, starting one when all are full (blocking: seconds).

        Raises:
            ConfigError: there is no Java runtime.
            EngineFault: the JVM did not start.
        """
        with self._lock:
            self._jvms = [j for j in self._jvms if j.alive or j.leases]
            free = [j for j in self._jvms if j.alive and j.leases < self.episodes_per_jvm]
            jvm = min(free, key=lambda j: j.leases) if free else self._start()
            jvm.leases += 1
            return Lease(jvm.gateway, jvm.jvm_id)

    def release(self, lease: Lease, *objects: Any) -> None:
        """Return a lease, letting the JVM collect the episode's ``objects`` (idempotent per call).

        Args:
            lease: From :meth:`lease`.
            objects: Java objects the episode created (detached so the JVM can free them).
        """
        with self._lock:
            jvm = next((j for j in self._jvms if j.jvm_id == lease.jvm_id), None)
            if jvm is None:
                return
            jvm.leases = max(0, jvm.leases - 1)
        for obj in objects:
            try:
                lease.gateway.detach(obj)
            except Exception:  # a dead JVM has nothing left to free
                pass

    def stats(self) -> list[tuple[int, int, int]]:
        """``(jvm_id, pid, leases)`` for each running JVM."""
        with self._lock:
            return [(j.jvm_id, j.process.pid, j.leases) for j in self._jvms if j.alive]

    def shutdown(self) -> None:
        """Stop every JVM of the pool (their leases become unusable)."""
        with self._lock:
            jvms, self._jvms = self._jvms, []
        for jvm in jvms:
            jvm.stop()

    def _start(self) -> _JVM:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

        java = require_java()
        try:
            port, process = launch_gateway(classpath=self.jar, die_on_exit=True, cwd=self.cwd,
                                           javaopts=list(self.java_opts), java_path=java,
                                           return_proc=True)
            gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True,
                                                                       port=port),
                                  java_process=process)
        except Exception as exc:
            raise EngineFault(f"could not start a JVM for {self.jar}: {exc!r}") from exc
        jvm = _JVM(self._next_id, gateway, process)
        self._next_id += 1
        self._jvms.append(jvm)
        return jvm


_POOLS: dict[str, JVMPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(jar: str, cwd: str) -> JVMPool:
    """The process-wide pool for ``jar`` (created on first use).

    ``AGENTGYM_EPISODES_PER_JVM`` overrides how many episodes share one JVM (default 64).
    """
    with _POOLS_LOCK:
        pool = _POOLS.get(jar)
        if pool is None:
            raw = os.environ.get("AGENTGYM_EPISODES_PER_JVM", "64")
            try:
                per_jvm = int(raw)
            except ValueError:
                raise ConfigError(f"AGENTGYM_EPISODES_PER_JVM must be an integer, got {raw!r}"
                                  ) from None
            pool = _POOLS[jar] = JVMPool(jar, cwd, episodes_per_jvm=per_jvm)
        return pool


def shutdown_pools() -> None:
    """Stop every pooled JVM of this process (also run at exit)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        pool.shutdown()


atexit.register(shutdown_pools)
