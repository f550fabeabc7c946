"""Calendar: questions about a week of meetings, answered with a calendar API's tools."""

from agentgym.envs.calendar.env import CalendarEnv, get_event, list_events, make_task

__all__ = ["CalendarEnv", "get_event", "list_events", "make_task"]
