"""Calendar: answer questions about the user's meetings this week by looking them up.

Each task is a generated work week (Monday to Friday, three to five meetings a day) and one
question about one meeting: who organizes it, or which room it is in. The meeting is named
by its day and start time ("my 14:00 meeting on Thursday"), its title ("the Budget review on
Thursday") or its place in the day ("my last meeting on Monday").

Tools, as a calendar API would give them:

- ``list_events(day)``: the day's meetings, one a line: start-end time, title, id;
- ``get_event(event_id)``: one meeting's title, time, room and organizer.

The answer is written as ``<answer>...</answer>``, which ends the episode. Organizers and
rooms appear only in ``get_event``'s results and ids only in ``list_events``'s, so a solved
episode takes both calls (no meeting of a day shares its organizer or its room with another,
so picking the wrong meeting gives a wrong answer). Reward 1.0 for the right organizer or
room (case, surrounding punctuation and spacing ignored), 0.0 otherwise, on the answer step;
earlier steps are not scored (``None``). An unknown day or event id is an observation with
``valid=False``.

Tasks: ``split="train"`` and ``split="test"`` draw calendars from disjoint random streams
(the split is part of the generator's seed), so held-out tasks are never training tasks.
The expert (``--policy expert``) makes the two calls a careful assistant makes, then answers;
before opening the meeting it cites the listing's line (from the title on when the question
names the title, the whole line otherwise), so a model that imitates it copies the id from
the end of a line it has just matched rather than picking one of four or five ids at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np

from agentgym.errors import ConfigError
from agentgym.tool_env import EpisodeState, Task, ToolEnv
from agentgym.types import Message, ToolCall

SPLITS = ("train", "test")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
FIRST_NAMES = ("Priya", "Leo", "Amara", "Jonas", "Mei", "Carlos", "Sofia", "Omar", "Hanna",
               "Daniel", "Yuki", "Grace", "Tomas", "Nadia", "Victor", "Elena", "Samuel", "Ines",
               "Kofi", "Laura")
LAST_NAMES = ("Shah", "Park", "Okafor", "Berg", "Chen", "Ruiz", "Rossi", "Haddad", "Novak",
              "Kim", "Tanaka", "Mensah", "Silva", "Larsen", "Costa", "Weber", "Ali", "Moreau",
              "Dubois", "Fischer")
ROOMS = ("Harbor", "Birch", "Atlas", "Summit", "Cedar", "Orion", "Maple", "Delta", "Willow",
         "Beacon", "Granite", "Lotus")
TITLES = ("Team standup", "Budget review", "Design critique", "Hiring sync",
          "Roadmap planning", "Customer call", "Sprint retro", "Vendor demo", "Security review",
          "Quarterly planning", "Onboarding session", "Marketing sync", "Release check-in",
          "Architecture review", "Board prep", "Sales pipeline review", "Support escalation",
          "Lunch and learn", "Product demo", "Data review", "Interview debrief",
          "Offsite planning", "Legal review", "Partner call", "Code review", "Ops review")
SYSTEM_PROMPT = ("You are a calendar assistant. The user asks about their meetings this week; "
                 "look them up with the tools and answer with the name or room only.")
INSTRUCTIONS = ("Call one tool per reply, e.g.\n"
                '<tool_call>{"name": "list_events", "arguments": {"day": "Monday"}}</tool_call>\n'
                "When you know the answer, reply <answer>the answer</answer>.")
_SPLIT_STREAM = {"train": 0, "test": 1}  # part of the generator's seed: disjoint streams


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _day_events(rng: np.random.Generator, day: str, ids: list[int]) -> list[dict[str, str]]:
    """Three to five meetings on one day, in time order.

    Titles, organizers and rooms are distinct within the day, so each question about the
    day has exactly one right answer.
    """
    count = int(rng.integers(3, 6))
    hours = sorted(int(h) for h in rng.choice(np.arange(8, 17), count, replace=False))
    titles = rng.choice(len(TITLES), count, replace=False)
    people = rng.choice(len(FIRST_NAMES) * len(LAST_NAMES), count, replace=False)
    rooms = rng.choice(len(ROOMS) * 4, count, replace=False)
    events = []
    for k, hour in enumerate(hours):
        start = hour * 60 + 30 * int(rng.integers(0, 2))
        # a meeting starting on the hour may take the hour; none runs into the next hour's
        end = start + (60 if start % 60 == 0 and rng.random() < 0.5 else 30)
        first, last = divmod(int(people[k]), len(LAST_NAMES))
        room, floor = divmod(int(rooms[k]), 4)
        events.append({"id": f"ev-{ids.pop()}", "day": day, "start": _clock(start),
                       "end": _clock(end), "title": TITLES[int(titles[k])],
                       "organizer": f"{FIRST_NAMES[first]} {LAST_NAMES[last]}",
                       "room": f"{ROOMS[room]} {floor + 1}"})
    return events


def make_task(split: str, seed: int) -> Task:
    """The task of ``seed`` in ``split``: a week's calendar and one question about it."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    rng = np.random.default_rng([_SPLIT_STREAM[split], seed])
    ids = [int(i) for i in rng.choice(np.arange(1000, 10000), 5 * len(DAYS), replace=False)]
    week = {day: _day_events(rng, day, ids) for day in DAYS}
    day = DAYS[int(rng.integers(len(DAYS)))]
    events = week[day]
    how = ("time", "title", "position")[int(rng.integers(3))]
    if how == "position":
        which = ("first", "last")[int(rng.integers(2))]
        event = events[0] if which == "first" else events[-1]
        meeting = f"my {which} meeting on {day}"
    else:
        event = events[int(rng.integers(len(events)))]
        meeting = (f"my {event['start']} meeting on {day}" if how == "time"
                   else f"the {event['title']} on {day}")
    field = ("organizer", "room")[int(rng.integers(2))]
    prompt = (f"Who organizes {meeting}?" if field == "organizer"
              else f"Which room is {meeting} in?")
    solution = (ToolCall("call_0", "list_events", {"day": day}),
                ToolCall("call_1", "get_event", {"event_id": event["id"]}))
    return Task(f"{split}-{seed}", prompt, event[field],
                {"week": week, "event": event["id"], "field": field, "selector": how},
                solution)


def _week(state: EpisodeState) -> Mapping[str, list[dict[str, str]]]:
    return state.task.data["week"]


def list_events(day: str, state: EpisodeState) -> str:
    """List the meetings on one day of this week: start-end time, title and id of each.

    Args:
        day: A weekday, e.g. "Monday".
        state: The episode (hidden from the model).
    """
    name = day.strip().capitalize()
    if name not in DAYS:
        raise ValueError(f"no day {day!r}; the days are {', '.join(DAYS)}")
    return "\n".join(_line(e) for e in _week(state)[name])


def _line(e: Mapping[str, str]) -> str:
    """A meeting as list_events shows it; the id last, after what questions name it by."""
    return f"{e['start']}-{e['end']} {e['title']} {e['id']}"


def get_event(event_id: str, state: EpisodeState) -> str:
    """The details of one meeting: title, time, room and organizer.

    Args:
        event_id: An id that list_events returned, e.g. "ev-1234".
        state: The episode (hidden from the model).
    """
    wanted = event_id.strip()
    for events in _week(state).values():
        for e in events:
            if e["id"] == wanted:
                return (f"{e['title']}\nwhen: {e['day']} {e['start']}-{e['end']}\n"
                        f"room: {e['room']}\norganizer: {e['organizer']}")
    raise LookupError(f"no event {event_id!r}; use an id that list_events returned")


class CalendarEnv(ToolEnv):
    """Questions about a week of meetings, answered with calendar tools (module docstring).

    Args:
        split: ``"train"`` or ``"test"`` calendars (disjoint random streams).

    Example:
        >>> import asyncio
        >>> async def solve(env):
        ...     await env.reset(seed=3)
        ...     while not (result := await env.step(env.expert_action())).done:
        ...         pass
        ...     return result.reward
        >>> asyncio.run(solve(CalendarEnv("test")))
        1.0
    """

    def __init__(self, split: Literal["train", "test"] = "train") -> None:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        super().__init__(self._task, [list_events, get_event], verifier="exact",
                         answer_tool=None, system_prompt=SYSTEM_PROMPT,
                         instructions=INSTRUCTIONS, sync_tools="inline")

    def _task(self, seed: int) -> Task:
        return make_task(self.split, seed)

    def expert_action(self) -> Message:
        """The two calls and the answer; the call that opens the meeting cites its line first.

        The citation runs from the title on when the question names the title, else whole.
        """
        action = super().expert_action()
        assert self.task is not None
        if self.turn != 1:
            return action
        event = next(e for events in self.task.data["week"].values() for e in events
                     if e["id"] == self.task.data["event"])
        line = _line(event)
        if self.task.data["selector"] == "title":
            line = line[line.index(event["title"]):]
        return Message("assistant", line, action.tool_calls)
