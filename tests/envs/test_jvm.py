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


def test_missing_java_is_a_config_error_naming_the_debian_package(monkeypatch) -> None:
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH)
    with pytest.raises(ConfigError, match="apt-get install default-jre-headless"):
        pool.lease()
    assert pool.stats() == []


def test_a_full_jvm_makes_the_pool_start_another_and_idle_ones_are_reused() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH, episodes_per_jvm=2)
    try:
        leases = [pool.lease() for _ in range(3)]
        assert [lease.jvm_id for lease in leases] == [0, 0, 1]
        assert sorted(n for _, _, n in pool.stats()) == [1, 2]
        objects = [lease.gateway.jvm.textworldexpress.runtime.PythonInterface()
                   for lease in leases]
        for lease, obj in zip(leases, objects, strict=True):
            pool.release(lease, obj)
        assert [n for _, _, n in pool.stats()] == [0, 0]
        assert pool.lease().jvm_id in (0, 1)  # a warm JVM, not a third one
        assert len(pool.stats()) == 2
    finally:
        pool.shutdown()
    assert pool.stats() == []


def test_a_dead_jvm_is_replaced_on_the_next_lease() -> None:
    pool = JVMPool(twx.JAR_PATH, twx.BASEPATH)
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
        JVMPool(twx.JAR_PATH, twx.BASEPATH, episodes_per_jvm=0)
