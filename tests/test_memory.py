"""glibc's mmap threshold is fixed for training processes (freed tensors leave the process)."""

import platform
import sys

import pytest

from agentgym.memory import fix_mmap_threshold


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only")
def test_the_threshold_is_set_on_glibc():
    assert fix_mmap_threshold() is True


def test_it_is_a_no_op_elsewhere(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert fix_mmap_threshold() is False
