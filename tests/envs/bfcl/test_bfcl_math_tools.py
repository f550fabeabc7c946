"""BFCL's math tools in the multi-turn env: bounded cost, no process-wide precision, no frozen loop.

``MathAPI.logarithm`` sets mpmath's global precision and ``square_root`` the decimal context's;
``power`` and ``round_number`` build exact integers as large as the arguments ask. An episode
must neither hold a core for long on one argument's value nor leave the process computing at
another precision, and a step timeout must be able to fire while BFCL's code runs.
"""

import asyncio
import decimal
import threading

import mpmath
import pytest
from bfcl_helpers import make, run

from agentgym import Message, ToolCall
from agentgym.envs.bfcl import scoring, task_ids
from agentgym.envs.bfcl.data import get_task


def call(name, **arguments):
    return Message("assistant", "", tool_calls=(ToolCall("c1", name, arguments),))


@pytest.fixture(scope="module")
def math_entry():
    return next(i for i in task_ids("multi_turn_base")
                if "MathAPI" in get_task("multi_turn_base", task_id=i).entry["involved_classes"])


# Each of these computes for 0.1 s to minutes in BFCL's MathAPI (all but the 4th and 5th are cheap
# enough to finish without the guard, so a missing guard fails the test instead of hanging it).
COSTLY = [
    ("logarithm", {"value": 2, "base": 10, "precision": 30_000}),
    ("power", {"base": 10**300, "exponent": 10_000}),
    ("round_number", {"number": 5, "decimal_places": -100_000}),
    ("square_root", {"number": 2, "precision": 10**7}),
    ("power", {"base": 3, "exponent": 10**9}),
    ("logarithm", {"value": 2, "base": 10, "precision": 3e4}),  # a float precision
]


@pytest.mark.parametrize(("name", "arguments"), COSTLY, ids=lambda v: str(v)[:40])
def test_costly_math_arguments_are_refused_without_running(math_entry, name, arguments):
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": math_entry}))
    result = run(env.step(call(name, **arguments)))
    assert result.info["executed"] == []
    assert result.observation[0].content.startswith("Error during execution: ")
    assert "too large" in result.observation[0].content


def test_cheap_math_calls_still_run_as_in_bfcl(math_entry):
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": math_entry}))
    cases = [("logarithm", {"value": 980.0, "base": 20, "precision": 10}),  # BFCL's data
             ("power", {"base": 2, "exponent": 100_000}),  # 100,000 bits: runs, too long to print
             ("power", {"base": 2.5, "exponent": 10**9}),  # a float: overflows at once
             ("round_number", {"number": 123456, "decimal_places": -3}),
             ("square_root", {"number": 2, "precision": 5_000})]
    for name, arguments in cases:
        result = run(env.step(call(name, **arguments)))
        assert result.info["executed"] == [scoring.call_string(name, arguments)], name
    assert "Exceeds the limit" in run(env.step(call("power", base=2, exponent=100_000))
                                      ).observation[0].content
    assert run(env.step(call("round_number", number=123456, decimal_places=-3))
               ).observation[0].content == '{"result": 123000}'


def test_math_tools_leave_the_process_precision_alone(math_entry):
    mp_before, decimal_before = mpmath.mp.dps, decimal.getcontext().prec
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": math_entry}))
    log50 = run(env.step(call("logarithm", value=2, base=10, precision=50)))
    root = run(env.step(call("square_root", number=2, precision=1)))
    assert log50.info["executed"] and root.info["executed"]
    with mpmath.workdps(50):  # what BFCL's own MathAPI computes, in a fresh process
        expected = str({"result": mpmath.log(2) / mpmath.log(10)})
    assert log50.observation[0].content == expected
    assert root.observation[0].content == "{'result': Decimal('1')}"
    # the precision BFCL's code set went no further than its call
    assert mpmath.mp.dps == mp_before and decimal.getcontext().prec == decimal_before
    # and a later call at the default precision computes as in a fresh process
    log4 = run(env.step(call("logarithm", value=36.0, base=6.0, precision=4)))
    assert "mpf('2.0')" in log4.observation[0].content


def test_the_checker_replay_leaves_the_precision_alone_too(math_entry):
    env = make("multi_turn_base")
    run(env.reset(options={"task_id": math_entry}))
    run(env.step(call("logarithm", value=2, base=10, precision=40)))
    run(env.step(call("square_root", number=2, precision=2)))
    while not run(env.step(Message("assistant", "Done."))).terminated:  # checker at each turn end
        pass
    assert mpmath.mp.dps == 15 and decimal.getcontext().prec == 28


def test_a_step_timeout_fires_while_a_tool_call_runs(math_entry, monkeypatch):
    """BFCL's code runs off the event loop: the loop keeps serving while a call works."""
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api import MathAPI

    release, started = threading.Event(), threading.Event()
    add = MathAPI.add

    def slow_add(self, a, b):
        started.set()
        release.wait(timeout=20)  # stands in for a long computation
        return add(self, a, b)

    monkeypatch.setattr(MathAPI, "add", slow_add)
    env = make("multi_turn_base")

    async def main():
        await env.reset(options={"task_id": math_entry})
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await env.step(call("add", a=1, b=2))
            return ticks
        finally:
            ticker.cancel()
            release.set()

    try:
        assert run(main()) > 0
        assert started.is_set()
    finally:
        release.set()
        run(env.aclose())


def test_closing_an_episode_while_other_threads_run_bfcl_code():
    """BFCL keeps instances in its module globals; episodes add theirs from worker threads
    while another episode closes and removes its own (which once failed with "dictionary
    changed size during iteration")."""
    import sys

    env = make("multi_turn_base")
    run(env.reset(options={"task_id": "multi_turn_base_0"}))
    namespace = vars(scoring.bfcl().multi_turn_utils)
    stop = threading.Event()

    def churn():  # what other episodes' worker threads do to the namespace
        i = 0
        while not stop.is_set():
            namespace[f"churn_{i % 64}"] = i
            namespace.pop(f"churn_{(i + 32) % 64}", None)
            i += 1

    interval = sys.getswitchinterval()
    namespace.update({f"churn_filler_{i}": i for i in range(20_000)})  # a long iteration
    sys.setswitchinterval(1e-6)
    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(100):
            scoring.Executor(env.task).close()
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
        for key in [k for k in list(namespace) if k.startswith("churn_")]:
            namespace.pop(key, None)
        run(env.aclose())
