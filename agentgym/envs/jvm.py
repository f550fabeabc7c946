"""Shared Java VMs for the benchmarks whose engine is a bundled jar (ScienceWorld, TWX).

Both packages start one JVM per Python env object through Py4J. A JVM costs 200 MB to 1.4 GB
of resident memory however small the episode, so 64 concurrent episodes would need 64 JVMs.
:class:`JVMPool` therefore runs many episodes in one JVM: it starts a JVM on demand, hands out
*leases* on it (at most ``episodes_per_jvm`` at a time), starts another JVM only when every
running one is full, and keeps idle JVMs for the next episode (a cold JVM takes seconds to
load a task; a warm one a fraction of that). ``docs/text-worlds.md`` has the measured memory
per episode.

**Episodes never share engine state.** The engines keep state in JVM-wide singletons:
ScienceWorld's object-id counter (``util.UniqueIdentifier``) and the Scala ``Random`` it
reseeds at every task load and draws from while the world runs. Two episodes in the same
classes would reset and draw from each other's (one episode's load renumbers the other's new
objects; its gold path then names objects that are not there). So each lease holds an
*isolate*: a class loader of its own over the jar, whose parent knows only the JDK, so every
class of the jar, Scala's runtime included, and with them every static, exists once per
isolate. An isolate serves one episode at a time and is kept for the next (its classes stay
loaded and compiled; the engines reset all episode state on load, as they do when the package
itself plays episode after episode on one simulator). Py4J caches methods by class *name*, so
it cannot call objects of a class loaded twice; :class:`IsolatedObject` calls them through
Java reflection instead.

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
from typing import TYPE_CHECKING, Any, cast

from agentgym.errors import ConfigError

JRE_PACKAGE = "default-jre-headless"
"""The Debian package that provides ``java`` (OpenJDK 17 on Debian 12)."""

DEFAULT_JAVA_OPTS = ("-Xmx4g", "-XX:+UseSerialGC", "-Xss4m",
                     "-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
"""Why: a 4 GiB heap cap keeps 64 episodes (about 700 MB live heap) with room for GC; the serial
collector keeps the resident set near the live heap instead of growing per GC thread; a larger
thread stack because the engines recurse over their object trees.

``hashCode=2`` gives every object the same identity hash. ScienceWorld 1.2.3 iterates some sets
of objects in identity-hash order (which plant its gold agent picks; the order heat spreads in,
which decides whether steam shows up: upstream fixed both after 1.2.3, in "Order EnvObject
enumeration deterministically" and "Make heat transfer ordering deterministic"), and HotSpot's
default identity hashes come from a per-thread generator. A load of the same variation then
plays differently after other loads, or from another thread (checked: the third load of
find-plant variation 153 in one process picks the cherry tree, the first two the pea plant).
With one hash, sets iterate in insertion order and an episode depends only on its task,
variation and actions, in any JVM, isolate or thread. :data:`REFERENCE_JAVA_OPTIONS` gives the
package's own engine the same setting in the differential checks."""

REFERENCE_JAVA_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"
"""``JAVA_TOOL_OPTIONS`` for a JVM the benchmark package starts itself (the reference side of a
differential check), so that it hashes as the pooled JVMs do."""


class EngineFault(RuntimeError):
    """A benchmark's JVM failed (died, lost its socket): an infrastructure fault, not a mistake."""

if TYPE_CHECKING:  # checked against py4j's own classes
    import subprocess

    from py4j.protocol import Py4JError as _Py4JError
    from py4j.protocol import Py4JJavaError as JavaError
else:
    try:  # py4j comes with the benchmark packages; without it no engine call is ever made
        from py4j.protocol import Py4JError as _Py4JError
        from py4j.protocol import Py4JJavaError as JavaError
    except ImportError:  # pragma: no cover
        class _Py4JError(Exception):
            pass

        class JavaError(Exception):
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


class IsolatedObject:
    """A Java object of an isolate, whose methods are called through Java reflection.

    ``obj.step("look around")`` finds the public method ``step`` of one argument and runs
    ``Method.invoke`` on the object. Arguments and results convert as in any Py4J call. An
    exception the method throws comes back as :class:`JavaError` about that exception (not
    about the reflective call that carried it).

    Args:
        gateway: The JVM's Py4J gateway.
        cls: The object's class (``java.lang.Class``, from the isolate's loader).
        obj: The object.
    """

    def __init__(self, gateway: Any, cls: Any, obj: Any) -> None:
        self._gateway, self._obj = gateway, obj
        self._array = cls.getMethods()
        # All signatures in a few round trips (a Py4J call per method would take hundreds);
        # copied into an Object[] first, as Py4J matches no Object[] parameter to a Method[].
        jvm = gateway.jvm
        copy = gateway.new_array(jvm.java.lang.Object, len(self._array))
        jvm.java.lang.System.arraycopy(self._array, 0, copy, 0, len(self._array))
        text = str(jvm.java.util.Arrays.toString(copy))[1:-1]
        self._index: dict[tuple[str, int], int] = {}
        for i, signature in enumerate(text.split(", ")):
            head, _, rest = signature.partition("(")
            params = rest.partition(")")[0]
            arity = len(params.split(",")) if params else 0
            self._index.setdefault((head.rsplit(".", 1)[-1], arity), i)
        self._methods: dict[tuple[str, int], Any] = {}
        self._no_args = gateway.new_array(gateway.jvm.java.lang.Object, 0)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or not any(n == name for n, _ in self._index):
            raise AttributeError(f"the engine object has no public method {name!r}")

        def call(*args: Any) -> Any:
            return self._invoke(name, args)
        return call

    def _invoke(self, name: str, args: tuple[Any, ...]) -> Any:
        key = (name, len(args))
        method = self._methods.get(key)
        if method is None:
            if key not in self._index:
                raise TypeError(f"the engine's {name}() takes no {len(args)} arguments")
            method = self._methods[key] = self._array[self._index[key]]
        values = self._no_args
        if args:
            values = self._gateway.new_array(self._gateway.jvm.java.lang.Object, len(args))
            for i, arg in enumerate(args):
                values[i] = arg
        try:
            result = method.invoke(self._obj, values)
        except JavaError as exc:  # unwrap the InvocationTargetException around the real one
            cause = exc.java_exception.getCause()
            if cause is None:
                raise
            raise JavaError(f"An error occurred while calling {name}", cause) from None
        return self._own(result)

    def _own(self, value: Any) -> Any:
        """A result Py4J can use.

        Its class may be the isolate's (a Scala collection wrapper), whose own methods Py4J
        would look up in another isolate's class of the same name.
        """
        from py4j.java_collections import JavaList, JavaMap, JavaSet
        from py4j.java_gateway import JavaObject

        jdk = self._gateway.jvm.java.util
        if isinstance(value, JavaList):
            return jdk.ArrayList(value)  # copied in Java, by methods declared in the JDK
        if isinstance(value, JavaMap):
            return jdk.LinkedHashMap(value)
        if isinstance(value, JavaSet):
            return jdk.LinkedHashSet(value)
        if isinstance(value, JavaObject):
            # declared by Object: callable on any class (py4j is unannotated and infers its
            # __getattr__ as "field or None"; a Java method is never None)
            cls = value.getClass()  # pyright: ignore[reportOptionalCall]
            if cls.getClassLoader() is not None:  # not the JDK's: the isolate's
                return IsolatedObject(self._gateway, cls, value)
        return value


class _Isolate:
    """A class loader of its own over the jar, and the engine's entry object made in it."""

    def __init__(self, gateway: Any, jar: str, entry_class: str) -> None:
        jvm = gateway.jvm
        urls = gateway.new_array(jvm.java.net.URL, 1)
        urls[0] = jvm.java.io.File(jar).toURI().toURL()
        # The parent knows only the JDK: the jar's classes, Scala's included, load anew here.
        self.loader = jvm.java.net.URLClassLoader(
            urls, jvm.java.lang.ClassLoader.getPlatformClassLoader())
        cls = self.loader.loadClass(entry_class)
        no_types = gateway.new_array(jvm.java.lang.Class, 0)
        obj = cls.getConstructor(no_types).newInstance(gateway.new_array(jvm.java.lang.Object, 0))
        self.server = IsolatedObject(gateway, cls, obj)


@dataclass(frozen=True)
class Lease:
    """One episode's share of a pooled JVM: an isolate of the engine no other episode uses.

    Attributes:
        gateway: The Py4J ``JavaGateway`` of the JVM.
        jvm_id: Which JVM of the pool (for logs and tests).
        server: The engine's entry object (e.g. ScienceWorld's ``PythonInterface``) in this
            lease's isolate, as an :class:`IsolatedObject`.
        isolate_id: Which isolate of the JVM (for tests: a released one is handed out again).
        number: This lease's number in the pool (a lease released twice is returned once).
    """

    gateway: Any
    jvm_id: int
    server: Any
    isolate_id: int
    number: int


class _JVM:
    """One running JVM, how many leases it has out, and its idle isolates."""

    def __init__(self, jvm_id: int, gateway: Any, process: Any) -> None:
        self.jvm_id = jvm_id
        self.gateway = gateway
        self.process = process
        self.leases = 0
        self.isolates: dict[int, _Isolate] = {}  # by id, in use or idle
        self.idle: list[int] = []  # ids of the isolates no lease holds
        self.holder: dict[int, int] = {}  # isolate id -> number of the lease holding it

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive:
            try:
                self.gateway.shutdown()
            except Exception:  # the JVM may be going already; stopping is best effort
                pass
        self.disconnect()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def disconnect(self) -> None:
        """Tell Py4J the JVM is gone, so that its objects' finalizers stop calling it.

        Py4J's own shutdown assumes a live JVM: on a dead one it retries through every
        pooled connection and leaves the client "connected", and each Java object collected
        later then tries a new socket and logs the refusal.
        """
        client = self.gateway._gateway_client  # Py4J keeps its client private
        client.is_connected = False
        client.close()


class JVMPool:
    """JVMs running one jar, shared by many episodes, each in its own isolate; thread-safe.

    Args:
        jar: Path of the engine's jar (from the benchmark's installed package).
        cwd: Working directory of the JVM (the package folder, as the package itself uses).
        entry_class: The class whose object a lease holds (the package's ``PythonInterface``).
        episodes_per_jvm: Leases one JVM holds before another is started.
        java_opts: JVM options (heap size, collector).

    Raises:
        ConfigError: ``episodes_per_jvm`` is below 1.
    """

    def __init__(self, jar: str, cwd: str, entry_class: str, *, episodes_per_jvm: int = 64,
                 java_opts: tuple[str, ...] = DEFAULT_JAVA_OPTS) -> None:
        if episodes_per_jvm < 1:
            raise ConfigError(f"episodes_per_jvm must be >= 1, got {episodes_per_jvm}")
        self.jar = jar
        self.cwd = cwd
        self.entry_class = entry_class
        self.episodes_per_jvm = episodes_per_jvm
        self.java_opts = java_opts
        self._jvms: list[_JVM] = []
        self._next_id = 0
        self._leases_made = 0
        self._lock = threading.Lock()

    def lease(self) -> Lease:
        """An isolate in a running JVM, starting a JVM or an isolate as needed (seconds).

        Raises:
            ConfigError: there is no Java runtime.
            EngineFault: the JVM did not start, or the engine's classes did not load in it.
        """
        with self._lock:
            for dead in [j for j in self._jvms if not j.alive]:
                dead.disconnect()
            self._jvms = [j for j in self._jvms if j.alive or j.leases]
            free = [j for j in self._jvms if j.alive and j.leases < self.episodes_per_jvm]
            jvm = min(free, key=lambda j: j.leases) if free else self._start()
            jvm.leases += 1
            if jvm.idle:
                return self._hand_out(jvm, jvm.idle.pop())
        try:  # outside the lock: loading the engine's classes takes a second or more
            isolate = _Isolate(jvm.gateway, self.jar, self.entry_class)
        except Exception as exc:
            with self._lock:
                jvm.leases -= 1
            if isinstance(exc, JavaError | _Py4JError):
                raise EngineFault(f"could not load {self.entry_class} from {self.jar} in "
                                  f"JVM {jvm.jvm_id}: {exc!r}") from exc
            raise
        with self._lock:
            isolate_id = len(jvm.isolates)
            jvm.isolates[isolate_id] = isolate
            return self._hand_out(jvm, isolate_id)

    def _hand_out(self, jvm: _JVM, isolate_id: int) -> Lease:  # with the lock held
        self._leases_made += 1
        jvm.holder[isolate_id] = self._leases_made
        return Lease(jvm.gateway, jvm.jvm_id, jvm.isolates[isolate_id].server, isolate_id,
                     self._leases_made)

    def release(self, lease: Lease) -> None:
        """Return a lease; its isolate waits idle for the next episode (idempotent)."""
        with self._lock:
            jvm = next((j for j in self._jvms if j.jvm_id == lease.jvm_id), None)
            if jvm is None:
                return
            if jvm.holder.get(lease.isolate_id) != lease.number:  # released already
                return
            del jvm.holder[lease.isolate_id]
            jvm.leases -= 1
            if jvm.alive:
                jvm.idle.append(lease.isolate_id)

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
            # without enable_auth and with return_proc, py4j returns (port, process)
            port, process = cast("tuple[int, subprocess.Popen[str]]", launch_gateway(
                classpath=self.jar, die_on_exit=True, cwd=self.cwd,
                javaopts=list(self.java_opts), java_path=java, return_proc=True))
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


def shared_pool(jar: str, cwd: str, entry_class: str) -> JVMPool:
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
            pool = _POOLS[jar] = JVMPool(jar, cwd, entry_class, episodes_per_jvm=per_jvm)
        return pool


def shutdown_pools() -> None:
    """Stop every pooled JVM of this process (also run at exit)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        pool.shutdown()


atexit.register(shutdown_pools)
