"""SALT on the spec's worked example, history depths, action canonicalization and properties.

Worked example (spec §4): GRPO base, R = 1, 0, 0, 1 → A = ±.866025 (unbiased std .57735).
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.errors import ConfigError
from agentgym.trainers.advantages import SALTOptions, get_estimator, parse_options, reference
from agentgym.trainers.advantages import salt as salt_mod
from agentgym.trainers.advantages.salt import canonical_action
from agentgym.types import Group, Message, Step, StepResult, ToolCall, Trajectory

from .test_advantages import check, error, groups_st

A = 0.866025  # the example's |A|


def run(groups, **options):
    return get_estimator("salt", **options)(groups)


def call(name, **arguments):
    return Message("assistant", tool_calls=(ToolCall("id", name, arguments),))


def path(tid, moves, outcome, *, invalid=(), group="w", end_terminated=True):
    """A trajectory through (state_key, action) pairs, ending with ``outcome``."""
    steps = tuple(Step(t, act, StepResult((), None, terminated=end_terminated and
                                          t == len(moves) - 1), state_key=key,
                       valid=t not in invalid) for t, (key, act) in enumerate(moves))
    return Trajectory(tid, group, group, (), steps, outcome_reward=outcome)


SQ, SQ2, C1, C2 = call("search", q="q"), call("search", q="q'"), call("click", i=1), \
    call("click", i=2)
BUY, BACK = call("buy"), call("back")
EXAMPLE = [Group("w", (
    path("t1", [("s0", SQ), ("s1", C1), ("s2", BUY)], 1.0),
    path("t2", [("s0", SQ), ("s1", C1), ("s2", BACK), ("s1", C2), ("s3", BUY)], 0.0),
    path("t3", [("s0", SQ), ("s1", C2), ("s3", BUY)], 0.0),
    path("t4", [("s0", SQ2), ("s4", C1), ("s2", BUY)], 1.0)))]


def test_worked_example_spec_values():
    result = run(EXAMPLE)
    np.testing.assert_allclose(result["t1"], [-0.289, 0.0, 0.866], atol=1e-3)
    np.testing.assert_allclose(result["t3"], [-0.289, -0.866, -0.866], atol=1e-3)


def test_worked_example_every_step_by_hand():
    # search[q]→s1 in t1, t2, t3: (A − 2A)/3; click[i1]→s2 in t1, t2: 0; buy→WIN in t1, t4: A;
    # back→s1 only t2; click[i2]→s3 and buy→FAIL in t2, t3: −A; t4's first two edges unique
    expected = {"t1": [-A / 3, 0.0, A], "t2": [-A / 3, 0.0, -A, -A, -A],
                "t3": [-A / 3, -A, -A], "t4": [A, A, A]}
    for history in (0, 1, 2, "all"):  # no two histories differ on this graph
        check(run(EXAMPLE, history=history), expected)


def test_each_edge_keeps_the_base_total():
    """Averaging over T(e) moves advantage among the steps of an edge but keeps their total
    (no trajectory loops here): where those steps also share their input (prompt and action
    tokens), Σ A·∇log π is the base's, so SALT's policy gradient equals GRPO's there."""
    salt, base = run(EXAMPLE), get_estimator("grpo")(EXAMPLE)
    first = [salt[t][0] for t in ("t1", "t2", "t3")]  # search[q]→s1, shared by t1, t2, t3
    assert sum(first) == pytest.approx(sum(base[t][0] for t in ("t1", "t2", "t3")))
    assert len(set(np.round(first, 9))) == 1 and first[0] != base["t1"][0]
    assert sum(map(np.sum, salt.values())) == pytest.approx(sum(map(np.sum, base.values())))


def test_bases_rloo_and_gigpo_episode_term():
    # RLOO: A = ±2/3; search[q]→s1 over t1, t2, t3 → −2/9
    check(run(EXAMPLE, base="rloo"), {"t1": [-2 / 9, 0.0, 2 / 3],
                                      "t2": [-2 / 9, 0.0, -2 / 3, -2 / 3, -2 / 3],
                                      "t3": [-2 / 9, -2 / 3, -2 / 3], "t4": [2 / 3] * 3})
    # GiGPO episode term, per-step entries: 6 ones, 8 zeros; mean 3/7, std .513552
    win, loss = (4 / 7) / 0.513552, (-3 / 7) / 0.513552
    result = run(EXAMPLE, base="gigpo", episode_stats="step")
    np.testing.assert_allclose(result["t1"], [(win + 2 * loss) / 3, (win + loss) / 2, win],
                               atol=1e-5)
    check(run(EXAMPLE, base="gigpo"), run(EXAMPLE))  # trajectory entries = GRPO


# Two routes into s1 and on: H decides how far back the context reaches.
# ta: s0 -a-> s1 -c-> s2 -e-> s3 -f-> end (R 1);  tb: s0 -b-> s1 -c-> s2 -e-> s3 -f-> end (R 0)
ROUTES = [Group("r", (
    path("ta", [("s0", call("a")), ("s1", call("c")), ("s2", call("e")), ("s3", call("f"))], 1.0,
         group="r"),
    path("tb", [("s0", call("b")), ("s1", call("c")), ("s2", call("e")), ("s3", call("f"))], 0.0,
         group="r")))]
B = 0.707107  # ±.5 / .707107


@pytest.mark.parametrize(("history", "merged"), [
    (0, [1, 2]),  # (s1, c, s2) and (s2, e, s3) shared
    (1, [2]),  # step 1 sees (s0, a) vs (s0, b); step 2 sees (s1, c) in both
    (2, []),  # step 2 now sees back to the first action
    ("all", []),
])
def test_history_depth(history, merged):
    values = [0.0 if t in merged else B for t in range(3)] + [B]
    check(run(ROUTES, history=history), {"ta": values, "tb": [-v for v in values]})


def test_loops_count_once():
    # edge (s0, x, s0): ta twice, tb once; T(e) = {ta, tb} → mean 0, not (2B − B)/3
    g = Group("l", (path("ta", [("s0", call("x")), ("s0", call("x")), ("s0", call("y"))], 1.0,
                         group="l"),
                    path("tb", [("s0", call("x")), ("s0", call("z"))], 0.0, group="l")))
    check(run([g]), {"ta": [0.0, 0.0, B], "tb": [0.0, -B]})


def test_invalid_penalty_after_the_mean():
    # t2's click[i1] is invalid (its call parsed: still mergeable): 0 − λ
    g = [Group("w", (EXAMPLE[0].trajectories[0],
                     path("t2", [("s0", SQ), ("s1", C1), ("s2", BACK), ("s1", C2), ("s3", BUY)],
                          0.0, invalid=[1]), *EXAMPLE[0].trajectories[2:]))]
    result = run(g, invalid_penalty=0.25)
    np.testing.assert_allclose(result["t2"], [-A / 3, -0.25, -A, -A, -A], atol=1e-5)
    np.testing.assert_allclose(result["t1"], [-A / 3, 0.0, A], atol=1e-5)


HERMES = ('Let me look.\n<tool_call>{"arguments": {"b": 1, "a": [1, 2]},\n "name": "move"}'
          '</tool_call>')


@pytest.mark.parametrize("action", [
    Message("assistant", tool_calls=(ToolCall("c9", "move", {"a": [1, 2], "b": 1}),)),
    Message("assistant", HERMES),
    Message("assistant", "<action>move(b=1, a=[1, 2])</action>"),
    Message("assistant", 'Sure: {"name": "move", "parameters": {"a": [1,  2], "b": 1}}'),
])
def test_canonical_action_merges_representations(action):
    step = Step(0, action, StepResult(()))
    assert canonical_action(step, {}) == ("calls", '[["move",{"a":[1,2],"b":1}]]')
    # a call that parsed stays mergeable on an invalid step
    assert canonical_action(Step(0, action, StepResult(()), valid=False), {}) is not None


@pytest.mark.parametrize(("text", "valid", "expected"), [
    ("  go\n north ", True, ("text", "go north")),  # plain-text env: whitespace collapsed
    ("Go north", True, ("text", "Go north")),  # case kept
    ("go north", False, None),  # invalid and no call: not mergeable
    ("", True, None),
    ('<tool_call>{"name": "move", "arguments": {</tool_call>', True, None),  # marker, no call
])
def test_canonical_action_text(text, valid, expected):
    assert canonical_action(Step(0, Message("assistant", text), StepResult(()), valid=valid),
                            {}) == expected


def test_different_arguments_or_order_do_not_merge():
    a = canonical_action(Step(0, call("move", a=1), StepResult(())), {})
    assert a != canonical_action(Step(0, call("move", a="1"), StepResult(())), {})
    two = (ToolCall("1", "x", {}), ToolCall("2", "y", {}))
    assert canonical_action(Step(0, Message("assistant", tool_calls=two), StepResult(())), {}) \
        != canonical_action(Step(0, Message("assistant", tool_calls=two[::-1]), StepResult(())),
                            {})


def test_unmergeable_steps_keep_the_base():
    # t3's first action cannot be parsed, t2's first state is None: both keep their own A
    t2, t3 = EXAMPLE[0].trajectories[1:3]
    bad = Message("assistant", "<tool_call>{oops</tool_call>")
    t3 = Trajectory("t3", "w", "w", (), (Step(0, bad, StepResult(())), *t3.steps[1:]),
                    outcome_reward=0.0)
    t2 = Trajectory("t2", "w", "w", (), (Step(0, SQ, StepResult(())), *t2.steps[1:]),
                    outcome_reward=0.0)
    g = [Group("w", (EXAMPLE[0].trajectories[0], t2, t3, EXAMPLE[0].trajectories[3]))]
    result = run(g)
    assert result["t1"][0] == pytest.approx(A, abs=1e-5)  # alone on search[q]→s1 now
    assert result["t2"][0] == result["t3"][0] == pytest.approx(-A, abs=1e-5)


def test_errors_and_small_groups():
    g = Group("w", (*EXAMPLE[0].trajectories, error("e", group="w")))
    result = run([g])
    assert "e" not in result
    check(result, run(EXAMPLE))
    alone = Group("z", (path("z1", [("s0", SQ)], 1.0, group="z"), error("e2", group="z")))
    check(run([alone]), {"z1": [0.0]})


@pytest.mark.parametrize(("options", "match"), [
    ({"base": "ppo"}, "base expects one of 'grpo', 'rloo', 'gigpo'"),
    ({"history": -1}, "history must be an integer >= 0 or 'all'"),
    ({"history": "some"}, "history expects an integer or 'all'"),
    ({"history": True}, "history expects"),
    ({"episode_stats": "step"}, "episode_stats applies to base='gigpo' only"),
    ({"mode": "std"}, "mode expects 'mean_std_norm' or 'mean_norm' or none"),
    ({"bsae": "rloo"}, "did you mean 'base'"),
])
def test_bad_options(options, match):
    with pytest.raises(ConfigError, match=match):
        get_estimator("salt", **options)


def test_options_defaults_and_parsing():
    o = SALTOptions()
    assert (o.base, o.history, o.mode, o.episode_stats, o.gamma) == ("grpo", 0, None, None, 1.0)
    assert parse_options(SALTOptions, {"history": "all", "base": "rloo", "mode": "none"}) == {
        "history": "all", "base": "rloo", "mode": None}
    assert parse_options(SALTOptions, {"history": "3"}) == {"history": 3}
    # RLOO's own default mode is mean_norm
    check(run(EXAMPLE, base="rloo"), run(EXAMPLE, base="rloo", mode="mean_norm"))


def test_doctest():
    assert doctest.testmod(salt_mod).failed == 0


# ---------------------------------------------------------------- properties

ACTIONS = [Message("assistant", "go north"), Message("assistant", "go  north"),
           Message("assistant", '<tool_call>{"name": "m", "arguments": {"d": 1}}</tool_call>'),
           Message("assistant", "<tool_call>{bad</tool_call>"), call("m", d=1), call("m", d=2)]
salt_options = st.fixed_dictionaries({
    "base": st.sampled_from(["grpo", "rloo"]), "history": st.sampled_from([0, 1, 2, "all"]),
    "mode": st.sampled_from([None, "mean_std_norm", "mean_norm"]),
    "invalid_penalty": st.sampled_from([0.0, 0.1])})


@st.composite
def graph_groups(draw):
    groups = []
    for g in range(draw(st.integers(1, 3))):
        trajs = []
        for i in range(draw(st.integers(1, 5))):
            tid = f"g{g}t{i}"
            if draw(st.integers(0, 5)) == 0:
                trajs.append(error(tid, group=f"g{g}"))
                continue
            moves = draw(st.lists(st.tuples(st.sampled_from([None, "s0", "a", "b"]),
                                            st.sampled_from(ACTIONS)), max_size=6))
            invalid = [t for t in range(len(moves)) if draw(st.booleans())]
            trajs.append(path(tid, moves, draw(st.sampled_from([0.0, 1.0, 0.5])),
                              invalid=invalid, group=f"g{g}"))
        groups.append(Group(f"g{g}", tuple(trajs)))
    return groups


@settings(max_examples=150, deadline=None)
@given(graph_groups(), salt_options)
def test_matches_plain_python_reference(groups, options):
    result = run(groups, **options)
    expected = reference.salt_reference(groups, **options)
    assert list(result) == list(expected)
    for tid, values in expected.items():
        np.testing.assert_allclose(result[tid], values, rtol=1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(graph_groups(), salt_options, st.randoms(use_true_random=False))
def test_permuting_trajectories_and_groups_changes_nothing(groups, options, rnd):
    shuffled = [Group(g.task_id, tuple(rnd.sample(g.trajectories, len(g.trajectories))))
                for g in groups]
    rnd.shuffle(shuffled)
    a, b = run(groups, **options), run(shuffled, **options)
    assert set(a) == set(b)
    for tid in a:
        np.testing.assert_allclose(a[tid], b[tid], rtol=1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(groups_st(unique_keys=True), salt_options,
       st.sampled_from([None, "trajectory", "step"]))
def test_all_unique_edges_equal_the_base(groups, options, episode_stats):
    options = {**options, "mode": options["mode"] or "mean_std_norm"}
    base_options = {"mode": options["mode"], "invalid_penalty": options["invalid_penalty"]}
    base = run(groups, **options)
    check(base, get_estimator(options["base"], **base_options)(groups))
    if episode_stats is not None:
        salt = run(groups, **{**options, "base": "gigpo", "episode_stats": episode_stats})
        gigpo = get_estimator("gigpo", step_weight=0.0, episode_stats=episode_stats,
                              **base_options)(groups)
        for tid in gigpo:
            np.testing.assert_array_equal(salt[tid], gigpo[tid])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "s0", "a"]), st.sampled_from(ACTIONS)),
                max_size=6), st.integers(1, 5), st.booleans(), salt_options)
def test_identical_trajectories_leave_only_the_penalty(moves, copies, err, options):
    invalid = list(range(0, len(moves), 2))
    trajs = [path(f"t{i}", moves, 1.0, invalid=invalid) for i in range(copies)]
    result = run([Group("w", (*trajs, *([error("e", group="w")] if err else [])))], **options)
    lam = options["invalid_penalty"] if copies >= 2 else 0.0
    for t in trajs:
        assert result[t.id].tolist() == [-lam if k in invalid else 0.0
                                         for k in range(len(moves))]


_PIECES = ["I go", " up", "<tool_call>", "</tool_call>", "<action>", "</action>", "up",
           '{"name": "move", "arguments": {"d": 1}}', '{"name": "move"', "move(d=1)", "\n", ""]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=8).map("".join), min_size=1,
                max_size=12), st.lists(st.booleans(), min_size=12, max_size=12))
def test_shared_parse_cache_gives_each_text_its_own_key(texts, valid):
    # One cache over many texts (blocks shared, reasoning around them varying) must give the
    # key a fresh parse of each text alone gives.
    cache: dict = {}
    for text, ok in zip(texts, valid, strict=False):
        step = Step(0, Message("assistant", text), StepResult(()), valid=ok)
        assert canonical_action(step, cache) == canonical_action(step, {})


def test_each_distinct_call_is_parsed_once(monkeypatch):
    parsed = []
    real = salt_mod.text_action
    monkeypatch.setattr(salt_mod, "text_action", lambda text: parsed.append(text) or real(text))
    cache: dict = {}
    for t in range(20):  # reasoning differs on every step; the call alternates between two
        text = f"Turn {t}: thinking. <tool_call>{{\"name\": \"move\", \"arguments\": " \
               f"{{\"d\": {t % 2}}}}}</tool_call>"
        canonical_action(Step(t, Message("assistant", text), StepResult(())), cache)
    assert len(parsed) == 2
