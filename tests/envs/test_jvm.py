"""The JVM pool shared by the Java-backed benchmark envs (ScienceWorld, TextWorldExpress)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from agentgym import ConfigError
from agentgym.envs import jvm
from agentgym.envs.jvm import JVMPool

twx = pytest.importorskip("textworld_express.constants")
ENTRY = "textworldexpress.runtime.PythonInterface"


def test_missing_java_is_a_config_error_naming_the_debian_package(monkeypatch) -> None:
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY)
    with pytest.raises(ConfigError, match="apt-get install default-jre-headless"):
        pool.lease()
    assert pool.stats() == []


def test_a_full_jvm_makes_the_pool_start_another_and_idle_ones_are_reused() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY, episodes_per_jvm=2)
    try:
        leases = [pool.lease() for _ in range(3)]
        assert [(lease.jvm_id, lease.isolate_id) for lease in leases] == [(0, 0), (0, 1),
                                                                           (1, 0)]
        assert sorted(n for _, _, n in pool.stats()) == [1, 2]
        for lease in leases:
            pool.release(lease)
            pool.release(lease)  # a second release changes nothing
        assert [n for _, _, n in pool.stats()] == [0, 0]
        again = pool.lease()
        assert again.jvm_id in (0, 1) and again.isolate_id in (0, 1)  # warm, not a third
        assert len(pool.stats()) == 2
    finally:
        pool.shutdown()
    assert pool.stats() == []


def test_a_dead_jvm_is_replaced_on_the_next_lease() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY)
    try:
        first = pool.lease()
        pid = pool.stats()[0][1]
        pool.release(first)
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):  # the kernel reaps it within milliseconds
            if not pool.stats():
                break
            time.sleep(0.05)
        second = pool.lease()
        assert second.jvm_id != first.jvm_id and pool.stats()[0][1] != pid
    finally:
        pool.shutdown()


def test_episodes_per_jvm_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="episodes_per_jvm must be >= 1"):
        JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY, episodes_per_jvm=0)


def test_each_lease_has_its_own_copy_of_the_engine_classes_and_their_statics() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY)
    try:
        a, b = pool.lease(), pool.lease()
        assert a.jvm_id == b.jvm_id and a.isolate_id != b.isolate_id
        # scala.util.Random is a JVM-wide singleton of the jar (ScienceWorld reseeds it at every
        # load); each isolate has its own, so drawing in one leaves the other's sequence alone.
        random_a, random_b = (_scala_random(lease).self() for lease in (a, b))
        assert not random_a.equals(random_b)
        random_a.setSeed(7)
        first = [random_a.nextInt(1000) for _ in range(3)]
        random_a.setSeed(7)
        random_b.setSeed(3)
        random_b.nextInt(1000)
        assert [random_a.nextInt(1000) for _ in range(3)] == first
    finally:
        pool.shutdown()


def test_isolated_calls_take_arguments_return_jdk_collections_and_unwrap_exceptions() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, ENTRY)
    try:
        server = pool.lease().server
        assert "coin" in list(server.getGameNames())  # a Scala list, copied into the JDK's
        assert server.load("coin", "numLocations=3") == ""
        seeds = list(server.getSeedsTrain())
        assert seeds[:3] == [0, 1, 2]
        assert '"observation"' in server.generateNewGameJSON(seeds[0], "train", False)
        with pytest.raises(AttributeError, match="no public method 'nosuch'"):
            server.nosuch()
        with pytest.raises(TypeError, match="takes no 3 arguments"):
            server.load("coin", "", "extra")
        random = _scala_random(pool.lease())
        with pytest.raises(jvm.JavaError) as info:  # the exception the method threw
            random.nextInt(0)
        assert "IllegalArgumentException" in str(info.value)
        assert "InvocationTargetException" not in str(info.value)
    finally:
        pool.shutdown()


def _scala_random(lease: jvm.Lease) -> jvm.IsolatedObject:
    """The isolate's ``scala.util.Random`` singleton (the object behind ``Random.nextInt``)."""
    loader = lease.server.getClass().getClassLoader()  # inherited from Object: callable as is
    cls = loader.loadClass("scala.util.Random$")
    return jvm.IsolatedObject(lease.gateway, cls, cls.getField("MODULE$").get(None))
