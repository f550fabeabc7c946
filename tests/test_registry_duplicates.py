"""Registering an id (env, backend, sandbox provider) twice warns; the same target does not."""

import warnings

import pytest

import agentgym
from agentgym.policies.backends import register_backend, resolve


def _no_warning(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn()


def test_env_id_taken_by_another_entry_point_warns():
    agentgym.register("dup/Echo-v0", "agentgym.envs.sokoban:SokobanEnv")
    _no_warning(lambda: agentgym.register("dup/Echo-v0", "agentgym.envs.sokoban:SokobanEnv"))
    with pytest.warns(UserWarning, match="'dup/Echo-v0' registered again"):
        agentgym.register("dup/Echo-v0", "agentgym.envs.arithmetic:ArithmeticEnv")


def test_backend_name_taken_by_another_builder_warns():
    def first(target, options):
        return None

    def second(target, options):
        return None

    register_backend("dup-backend", first, target="X", summary="", trainable=False)
    _no_warning(lambda: register_backend("dup-backend", first, target="X", summary="",
                                         trainable=False))
    with pytest.warns(UserWarning, match="backend 'dup-backend' registered again"):
        register_backend("dup-backend", second, target="X", summary="", trainable=False)
    assert resolve("dup-backend:x")[0].build is second
