"""``agentgym view``: a self-contained HTML page to browse trajectories (no CDN, no server).

The page embeds the episodes as JSON and renders them with inline JavaScript: a list on the
left, filterable by env, outcome (success / failure / error) and text; the chosen episode on
the right: prompt, each step's action (text and tool calls), observation, reward, validity,
the per-step advantage when given, and a screenshot when the env recorded one.

Inputs:

- trajectory JSONL (``agentgym rollout``, ``agentgym eval``'s ``results.jsonl``);
- advantages (optional): the ``{"id": ..., "advantages": [...]}`` lines of
  ``agentgym advantages``, passed with ``--advantages`` or mixed into the trajectory file;
- screenshots: a step's ``result.info["screenshot_png"]``, a base64-encoded PNG (web envs
  put it there). It is shown inline and left out of the info listing.

Unreadable lines are skipped and counted on the page, never fatal.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentgym.errors import SchemaError
from agentgym.evaluation.metrics import succeeded
from agentgym.evaluation.viewer_page import PAGE
from agentgym.files import atomic_write, refuse_overwrite
from agentgym.types import Trajectory

SCREENSHOT_KEY = "screenshot_png"
"""The step-info key holding a base64 PNG screenshot of the page after the step."""
MAX_INFO_CHARS = 4000


def _advantages(lines: Iterable[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in lines:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, too deep, a number too long
            continue
        if isinstance(data, dict) and "advantages" in data and "id" in data:
            out[str(data["id"])] = [float(a) for a in data["advantages"]]
    return out


def load_episodes(path: str | os.PathLike[str], advantages: str | os.PathLike[str] | None = None,
                  limit: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Episodes ready for the page, and one note per skipped line.

    Raises:
        FileNotFoundError: ``path`` (or ``advantages``) does not exist.
        SchemaError: ``path`` holds no trajectory line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {str(path)!r}")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    adv = _advantages(lines)
    if advantages is not None:
        if not Path(advantages).is_file():
            raise FileNotFoundError(f"no advantages file at {str(advantages)!r}; write one with "
                                    "`agentgym advantages TRAJ.jsonl --estimator grpo > FILE`")
        adv.update(_advantages(Path(advantages).read_text(encoding="utf-8").splitlines()))
    episodes, notes = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if "advantages" in data and "schema_version" not in data:
                continue
            traj = Trajectory.from_dict(data)
        except Exception as exc:  # a viewer shows what it can
            notes.append(f"line {number} skipped: {str(exc)[:100]}")
            continue
        episodes.append(_episode(traj, adv.get(traj.id)))
        if limit is not None and len(episodes) >= limit:
            notes.append(f"showing the first {limit} episodes (--limit)")
            break
    if not episodes:  # an empty page and success would hide a wrong file
        first = notes[0] if notes else "the file is empty"
        raise SchemaError(f"{str(path)!r} holds no trajectory ({first}); expected trajectory "
                          "JSONL: `agentgym rollout` output or an eval's results.jsonl")
    return episodes, notes


def _message(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"name": c.name, "arguments": json.dumps(dict(c.arguments))}
                             for c in m.tool_calls]
    if m.name:
        out["name"] = m.name
    return out


def _info(info: Mapping[str, Any]) -> str:
    rest = {k: v for k, v in info.items() if k != SCREENSHOT_KEY}
    text = json.dumps(rest, default=repr) if rest else ""
    return text if len(text) <= MAX_INFO_CHARS else text[:MAX_INFO_CHARS] + " …"


def _episode(traj: Trajectory, advantages: list[float] | None) -> dict[str, Any]:
    outcome = "error" if not traj.scorable else ("success" if succeeded(traj) else "failure")
    steps = []
    for i, s in enumerate(traj.steps):
        shot = s.result.info.get(SCREENSHOT_KEY)
        steps.append({
            "index": s.index, "action": _message(s.action),
            "observation": [_message(m) for m in s.result.observation],
            "reward": s.result.reward, "valid": s.valid,
            "end": "terminated" if s.result.terminated else
                   ("truncated" if s.result.truncated else ""),
            "advantage": advantages[i] if advantages and i < len(advantages) else None,
            "screenshot": shot if isinstance(shot, str) else None,
            "info": _info(s.result.info),
            "tokens": len(s.tokens.completion_ids) if s.tokens else None,
        })
    return {"id": traj.id, "env": traj.env_id or "?", "task": traj.task_id,
            "group": traj.group_id, "seed": traj.seed, "status": traj.status,
            "outcome": outcome, "reward": traj.outcome_reward, "error": traj.error,
            "prompt": [_message(m) for m in traj.prompt],
            "tools": [t.name for t in traj.tools], "steps": steps,
            "metrics": {k: v for k, v in traj.metrics.items()}}


def render(episodes: list[dict[str, Any]], title: str, notes: list[str] = ()) -> str:  # type: ignore[assignment]
    """The HTML page for ``episodes``."""
    # "<" escaped inside the JSON so no "</script>" in the data can end the script element.
    data = json.dumps({"episodes": episodes, "notes": list(notes)}, ensure_ascii=False,
                      default=repr).replace("<", "\\u003c")
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", data)


def write_viewer(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 advantages: str | os.PathLike[str] | None = None,
                 limit: int | None = None) -> Path:
    """Write the viewer page for the trajectory file ``path``; returns the HTML path.

    Example:
        >>> write_viewer("runs/rollout.jsonl", "runs/rollout.html")  # doctest: +SKIP
    """
    target = Path(out) if out is not None else Path(path).with_suffix(".html")
    refuse_overwrite(target, [path, advantages], "--out")  # e.g. `view X -o X`
    episodes, notes = load_episodes(path, advantages, limit)
    return atomic_write(target, render(episodes, f"agentgym · {Path(path).name}", notes))
