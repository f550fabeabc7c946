"""The BFCL envs against BFCL's own inference loop and eval runner, reply for reply.

:mod:`agentgym.envs.bfcl.fidelity` runs one script of model replies (BFCL's ground truth, or a
perturbation of it) through BFCL's OpenAI function-calling handler and eval runner, and through
``bfcl/SingleTurn-v0`` / ``bfcl/MultiTurn-v0`` at their defaults with many episodes in flight;
what the model is shown before each reply, the replies taken and the verdict must agree.
CI runs a fixed random sample; ``-m sweep`` runs every entry of every category.
"""

import asyncio
import random

import pytest

from agentgym.envs.bfcl import CATEGORIES, data, fidelity, perturb


def run_cases(cases):
    return asyncio.run(fidelity.compare(cases))


def entry_cases(category, task_id):
    task = data.get_task(category, task_id=task_id)
    return [fidelity.Case(task_id, category, kind, script)
            for kind, script in perturb.scripts_for(task, random.Random(0))]


def test_a_fixed_sample_of_every_category_agrees_with_bfcl():
    outcomes = run_cases(fidelity.cases(list(CATEGORIES), per_category=1, seed=20261127))
    assert [(o.case.task_id, o.case.kind, o.differences) for o in outcomes if not o.agree] == []
    assert {o.case.category for o in outcomes} == set(CATEGORIES)
    # the scripts land on both sides of BFCL's verdict, in both kinds of env
    for multi in (True, False):
        verdicts = {o.bfcl.passed for o in outcomes
                    if (CATEGORIES[o.case.category].kind == "multi_turn") == multi}
        assert verdicts == {True, False}
    gold = [o for o in outcomes if o.case.kind == "gold"]
    assert all(o.bfcl.passed and o.env.passed for o in gold)


def test_long_context_46_follows_bfcl_past_its_step_limit():
    """Its one turn has 34 gold calls: one per reply runs into BFCL's 20-step force-quit.

    BFCL's loop quits after the 21st reply; it is the last turn, so BFCL's eval runner scores
    the calls made so far (state mismatch: 13 files left), and calls made after the gold in
    the last turn do not cost the entry. The env once ended such episodes as force-terminated.
    """
    outcomes = {o.case.kind: o for o in run_cases(
        entry_cases("multi_turn_long_context", "multi_turn_long_context_46"))}
    assert all(o.agree for o in outcomes.values()), [o.differences for o in outcomes.values()]
    per_call = outcomes["per_call"]
    assert per_call.bfcl.replies == per_call.env.replies == 21
    assert per_call.env.error_type == "multi_turn:instance_state_mismatch"
    assert outcomes["pad_last"].env.passed and outcomes["gold"].env.passed


def test_a_force_quit_before_the_last_turn_fails_the_entry_in_both():
    outcomes = {o.case.kind: o for o in run_cases(
        entry_cases("multi_turn_base", "multi_turn_base_0"))}
    pad = outcomes["pad_first"]
    assert pad.agree and not pad.env.passed
    assert pad.env.error_type == "multi_turn:force_terminated"


def test_a_difference_is_reported():
    """The comparison itself: a run that parts from BFCL's is named, not passed over."""
    case = entry_cases("simple_python", "simple_python_0")[0]
    bfcl = fidelity.bfcl_run(data.get_task("simple_python", task_id=case.task_id), case.script)
    changed = fidelity.Trace(bfcl.views[:0] + (fidelity.View((("user", "other"),),
                                                             bfcl.views[0].tools),),
                             bfcl.replies, not bfcl.passed, "some_error")
    found = fidelity.outcome(case, bfcl, changed).differences
    assert any("step 0 observation" in d for d in found)
    assert any("success" in d for d in found) and any("step 1 reward" in d for d in found)


@pytest.mark.sweep
@pytest.mark.parametrize("category", list(CATEGORIES))
def test_sweep_every_entry_agrees_with_bfcl(category):
    outcomes = run_cases(fidelity.cases([category], per_category=None, seed=0))
    print(fidelity.summary(outcomes))
    assert [(o.case.task_id, o.case.kind, o.differences) for o in outcomes if not o.agree] == []
