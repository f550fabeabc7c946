"""Calendar: generated weeks, why every question needs both tools, the expert, mistakes, splits."""

import re
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym import Message, ToolCall
from agentgym.envs.calendar import make_task
from agentgym.envs.calendar.env import DAYS
from agentgym.errors import ConfigError
from agentgym.policies.simple import ScriptedAgent
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.tool_env import EpisodeState

ENV = "agentgym/Calendar-v0"


def call(name, **args):
    return Message("assistant", "", tool_calls=(ToolCall("c0", name, args),))


def tool_text(task, name, **args):
    """What a tool returns in ``task``'s episode."""
    from agentgym.envs.calendar import get_event, list_events

    fn = {"list_events": list_events, "get_event": get_event}[name]
    return fn(**args, state=EpisodeState(task))


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_question_needs_both_calls(split):
    """The id is only in list_events' answer, the answer only in get_event's, and no other
    meeting of the day has the same organizer or room (a wrong pick answers wrongly)."""
    kinds = set()
    for seed in range(300):
        task = make_task(split, seed)
        week, target = task.data["week"], task.data["event"]
        day = task.solution[0].arguments["day"]
        kinds.add((task.data["field"], task.data["selector"]))
        assert task.solution[1].arguments == {"event_id": target}
        assert target not in task.prompt and task.answer.lower() not in task.prompt.lower()
        listing = tool_text(task, "list_events", day=day)
        assert target in listing
        assert all(task.answer not in tool_text(task, "list_events", day=d) for d in DAYS)
        assert task.answer in tool_text(task, "get_event", event_id=target)
        field = task.data["field"]
        values = [e[field] for e in week[day]]
        assert len(set(values)) == len(values) and 3 <= len(values) <= 5
        starts = [e["start"] for e in week[day]]
        assert starts == sorted(starts)
        assert all(a["end"] <= b["start"] for a, b in zip(week[day], week[day][1:], strict=False))
        ids = [e["id"] for d in DAYS for e in week[d]]
        assert len(set(ids)) == len(ids)
    assert kinds == {(f, s) for f in ("organizer", "room")
                     for s in ("time", "title", "position")}


def test_tasks_repeat_by_seed_and_splits_are_disjoint():
    assert make_task("train", 7) == make_task("train", 7)
    train = {repr(make_task("train", s).data["week"]) for s in range(200)}
    test = {repr(make_task("test", s).data["week"]) for s in range(200)}
    test |= {repr(make_task("test", s).data["week"]) for s in range(1_000_000, 1_000_200)}
    assert len(train) == 200 and len(test) == 400 and not train & test


async def test_expert_solves_with_two_calls_then_an_answer():
    for split in ("train", "test"):
        for seed in range(20):
            env = agentgym.make(ENV, split=split)
            await env.reset(seed=seed)
            actions, rewards = [], []
            while True:
                actions.append(env.expert_action())
                r = await env.step(actions[-1])
                rewards.append(r.reward)
                assert r.valid
                if r.done:
                    break
            assert [a.tool_calls[0].name for a in actions[:2]] == ["list_events", "get_event"]
            assert not actions[2].tool_calls and "<answer>" in actions[2].content
            assert rewards == [None, None, 1.0] and r.terminated and r.info["success"]


async def test_expert_cites_the_line_it_opens_from_the_question_s_words():
    """Before get_event, the expert quotes the listing's line of the meeting it opens: from
    the title on when the question names the title, whole otherwise (it starts with the
    time a time question names)."""
    seen = set()
    for seed in range(60):
        env = agentgym.make(ENV)
        await env.reset(seed=seed)
        listing = (await env.step(env.expert_action())).observation[0].content
        opening = env.expert_action()
        cited, event_id = opening.content, opening.tool_calls[0].arguments["event_id"]
        line = next(x for x in listing.splitlines() if x.endswith(event_id))
        how = env.task.data["selector"]
        seen.add(how)
        assert line.endswith(cited) and cited.endswith(" " + event_id)
        if how == "title":
            assert cited.split(" ev-")[0] in env.task.prompt
        else:
            assert cited == line
        if how == "time":
            assert cited[:5] in env.task.prompt
    assert seen == {"time", "title", "position"}


async def test_the_wrong_meeting_or_a_guess_scores_zero():
    env = agentgym.make(ENV)
    await env.reset(seed=5)
    task = env.task
    day = task.solution[0].arguments["day"]
    other = next(e for e in task.data["week"][day] if e["id"] != task.data["event"])
    r = await env.step(Message("assistant", f"<answer>{other[task.data['field']]}</answer>"))
    assert (r.reward, r.terminated, r.info["success"]) == (0.0, True, False)


async def test_prompt_names_the_tools_and_how_to_answer():
    env = agentgym.make(ENV)
    messages, info = await env.reset(seed=0)
    assert info["task_id"] == "train-0"
    assert [t.name for t in env.tools] == ["list_events", "get_event"]
    assert "calendar assistant" in messages[0].content
    assert env.task.prompt in messages[1].content and "<answer>" in messages[1].content


@pytest.mark.parametrize(("action", "needle"), [
    (call("list_events", day="Thrusday"), "no day 'Thrusday'; the days are Monday, Tuesday"),
    (call("get_event", event_id="ev-0000"), "use an id that list_events returned"),
    (call("get_event"), "'event_id' is a required property"),
    (call("book_room", room="Atlas 1"), "book_room"),
    (Message("assistant", "Let me check your calendar."), "no tool call"),
])
async def test_mistakes_are_invalid_observations(action, needle):
    env = agentgym.make(ENV)
    await env.reset(seed=0)
    r = await env.step(action)
    assert not r.valid and not r.done and r.reward is None
    assert needle in r.observation[-1].content


async def test_day_names_are_read_loosely():
    env = agentgym.make(ENV)
    await env.reset(seed=0)
    r = await env.step(call("list_events", day=" monday "))
    first = r.observation[0].content.splitlines()[0]
    assert r.valid and re.fullmatch(r"\d\d:\d\d-\d\d:\d\d .+ ev-\d{4}", first)


async def test_turn_limit_truncates_without_success():
    env = agentgym.make(ENV, max_turns=2)
    await env.reset(seed=0)
    await env.step(call("list_events", day="Monday"))
    r = await env.step(call("list_events", day="Tuesday"))
    assert r.truncated and not r.terminated and not r.info.get("success")


async def test_scripted_policy_through_the_rollout_engine():
    trajs = await run_groups(lambda: agentgym.make(ENV, split="test"), ScriptedAgent(),
                             range(1_000_000, 1_000_008), RolloutConfig(), env_id=ENV)
    assert [t.outcome_reward for t in trajs] == [1.0] * 8
    assert all(len(t.steps) == 3 and all(s.valid for s in t.steps) for t in trajs)


def test_bad_split():
    with pytest.raises(ConfigError, match="split must be one of"):
        agentgym.make(ENV, split="dev")
    with pytest.raises(ConfigError, match="split must be one of"):
        make_task("validation", 0)


async def test_contract_checkers():
    probe = agentgym.make(ENV)
    await probe.reset(seed=0)
    solution = []
    for _ in range(3):
        solution.append(probe.expert_action())
        await probe.step(solution[-1])
    ran = await agentgym.check_env(agentgym.make(ENV), actions=solution)
    assert "determinism" in ran and "agent mistakes are observations" in ran
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV)
        check_env(env.unwrapped)
        env.close()
    assert [str(w.message) for w in caught] == []
