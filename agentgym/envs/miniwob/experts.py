"""Scripted solvers for a set of MiniWoB tasks: the ``expert`` policy and the wiring's proof.

MiniWoB ships no gold action sequences, so these solvers play the part: each reads the task
from the utterance (as a person would) and the page's DOM (where the answer is on screen
but hard to address, e.g. which tree folder holds a file), and answers with tool calls on
the snapshot's refs, going through the same tools a model uses. That a solver reaches
MiniWoB's own reward on nearly every seed is the test that seeding, actions, the clock and
the reward readout are wired right; its misses are counted, never hidden.

A solver maps the env to the tool calls of its next turn; several calls may share a turn.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.types import Message, ToolCall

from .env import HANG_S

if TYPE_CHECKING:
    from .env import MiniWoBEnv

Call = tuple[str, dict[str, Any]]
Solver = Callable[["MiniWoBEnv"], Awaitable[list[Call]]]
SOLVERS: dict[str, Solver] = {}
"""Task name -> solver."""


class ExpertError(RuntimeError):
    """The solver found no move on this page (a page it was not written for)."""


def read_timeout_ms(env: MiniWoBEnv) -> float:
    """How long a solver's own read of the page may wait, in milliseconds.

    The solver's lookups are not the agent's actions: on a loaded machine with many episodes
    in flight they slow down, and the bound is the env's hang limit, not its action timeout.
    """
    return (env.action_timeout + HANG_S) * 1000


def solver(*tasks: str) -> Callable[[Solver], Solver]:
    """Register a solver for ``tasks``."""
    def register(fn: Solver) -> Solver:
        for task in tasks:
            SOLVERS[task] = fn
        return fn
    return register


async def next_action(env: MiniWoBEnv) -> Message:
    """The solver's next turn for ``env``'s task, as one assistant message."""
    fn = SOLVERS.get(env.task)
    if fn is None:
        raise ConfigError(f"miniwob/{env.task} has no scripted solver; tasks with one: "
                          f"{sorted(SOLVERS)} (use --policy random otherwise)")
    calls = await fn(env)
    return Message("assistant", "", tool_calls=tuple(
        ToolCall(f"call_{i}", name, args) for i, (name, args) in enumerate(calls)))


# -- finding the ref of a DOM element --------------------------------------------------------
async def targets(env: MiniWoBEnv, js: str, arg: Any = None) -> list[Call]:
    """Click calls for the elements a page function returns (an element, a list, or null).

    An element's ref is the snapshot node that is the element, else the outermost node
    inside it (a click there bubbles up to it). An element the snapshot has no node for
    (an icon drawn by CSS, a link inside a paragraph) is clicked at its centre instead.
    Candidates whose name matches the element's text are tried first, so a lookup costs
    about one round trip per element.
    """
    handle = await env.page.evaluate_handle(
        f"(arg) => {{ const r = ({js})(arg); return r == null ? [] : "
        "(Array.isArray(r) ? r : [r]); }", arg)
    try:
        calls: list[Call] = []
        for i in range(await handle.evaluate("a => a.length")):
            node = await handle.evaluate_handle("(a, i) => a[i]", i)
            text = await node.evaluate("e => (e.innerText || e.value || '').trim()")
            inside = None
            for element in sorted(env.elements.values(), key=lambda e: e.name != text):
                relation = await env.locator(element).evaluate(
                    "(e, t) => e === t ? 2 : (t.contains(e) ? 1 : 0)", node,
                    timeout=read_timeout_ms(env))
                if relation == 2:
                    calls.append(("click", {"ref": element.ref}))
                    break
                if relation == 1 and inside is None:
                    inside = element
            else:
                if inside is not None:
                    calls.append(("click", {"ref": inside.ref}))
                else:
                    calls.append(await _by_point(env, node))
                    if calls[-1][0] == "scroll":  # scroll first; the clicks come next turn
                        return calls[-1:]
        return calls
    finally:
        await handle.dispose()


async def _by_point(env: MiniWoBEnv, node: Any) -> Call:
    """Click an element at its centre, or scroll its box towards it when it is out of view."""
    x, y, shown, below = await node.evaluate("""e => {
      const r = e.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;
      const hit = document.elementFromPoint(x, y);
      return [x, y, !!hit && (hit === e || e.contains(hit)), y > 0];
    }""")
    if shown:
        return ("click_xy", {"x": round(x, 1), "y": round(y, 1)})
    for element in env.elements.values():  # any ref inside the same scrolling box
        near = await env.locator(element).evaluate("""(e, t) => {
          let box = t.parentElement;
          while (box && !(box.scrollHeight > box.clientHeight + 1)) box = box.parentElement;
          return !!box && box !== document.documentElement && box.contains(e);
        }""", node, timeout=read_timeout_ms(env))
        if near:
            return ("scroll", {"ref": element.ref, "direction": "down" if below else "up"})
    return ("scroll", {"direction": "down" if below else "up"})


async def ref(env: MiniWoBEnv, js: str, arg: Any = None) -> str:
    """The ref of the one element a page function returns (a text box, a drop-down)."""
    found = await targets(env, js, arg)
    if not found or "ref" not in found[0][1]:
        raise ExpertError(f"miniwob/{env.task}: the solver found no ref to act on")
    return found[0][1]["ref"]


async def target(env: MiniWoBEnv, js: str, arg: Any = None) -> Call:
    """A click on the one element a page function returns."""
    found = await targets(env, js, arg)
    if not found:
        raise ExpertError(f"miniwob/{env.task}: the solver found nothing to click")
    return found[0]


def quoted(utterance: str) -> list[str]:
    """The double-quoted parts of an utterance."""
    return re.findall(r'"([^"]*)"', utterance)


async def visible(env: MiniWoBEnv, selector: str) -> bool:
    """Whether an element matching ``selector`` is shown."""
    return bool(await env.page.evaluate(
        "s => { const e = document.querySelector(s); return !!e && e.offsetParent !== null; }",
        selector))


# -- the solvers -------------------------------------------------------------------------------
@solver("click-button")
async def _click_button(env: MiniWoBEnv) -> list[Call]:
    js = "t => [...document.querySelectorAll('#area button')].find(b => b.textContent.trim() === t)"
    return [await target(env, js, quoted(env.utterance)[0])]


@solver("click-link")
async def _click_link(env: MiniWoBEnv) -> list[Call]:
    js = "t => [...document.querySelectorAll('#area span.alink')].find(a => a.textContent === t)"
    return [await target(env, js, quoted(env.utterance)[0])]


@solver("click-checkboxes")
async def _click_checkboxes(env: MiniWoBEnv) -> list[Call]:
    listed = re.match(r"Select (.*) and click Submit\.", env.utterance)
    wanted = [] if listed is None or listed[1] == "nothing" else listed[1].split(", ")
    js = ("w => [...document.querySelectorAll('#boxes label')].filter(l => "
          "w.includes(l.textContent.trim()) !== l.querySelector('input').checked)"
          ".map(l => l.querySelector('input'))")
    calls = await targets(env, js, wanted)
    return calls + [await target(env, "() => document.getElementById('subbtn')")]


@solver("enter-text", "enter-text-2")
async def _enter_text(env: MiniWoBEnv) -> list[Call]:
    text = quoted(env.utterance)[0]
    if env.task == "enter-text-2":  # "Type "X" in all lower case letters ..."
        text = text.lower() if "lower case" in env.utterance else text.upper()
    box = await ref(env, "() => document.getElementById('tt')")
    return [("type", {"ref": box, "text": text}),
            await target(env, "() => document.getElementById('subbtn')")]


@solver("login-user")
async def _login_user(env: MiniWoBEnv) -> list[Call]:
    user, password = quoted(env.utterance)[:2]
    return [("type", {"ref": await ref(env, "() => document.getElementById('username')"),
                      "text": user}),
            ("type", {"ref": await ref(env, "() => document.getElementById('password')"),
                      "text": password}),
            await target(env, "() => document.getElementById('subbtn')")]


@solver("enter-password")
async def _enter_password(env: MiniWoBEnv) -> list[Call]:
    password = quoted(env.utterance)[0]
    return [("type", {"ref": await ref(env, "() => document.getElementById('password')"),
                      "text": password}),
            ("type", {"ref": await ref(env, "() => document.getElementById('verify')"),
                      "text": password}),
            await target(env, "() => document.getElementById('subbtn')")]


@solver("choose-list")
async def _choose_list(env: MiniWoBEnv) -> list[Call]:
    listed = re.match(r"Select (.*) from the list and click Submit\.", env.utterance)
    if listed is None:
        raise ExpertError(f"unexpected utterance {env.utterance!r}")
    box = await ref(env, "() => document.querySelector('#area select')")
    return [("select", {"ref": box, "option": listed[1]}),
            await target(env, "() => document.querySelector('#area button')")]


@solver("click-tab")
async def _click_tab(env: MiniWoBEnv) -> list[Call]:
    number = re.search(r"Tab #(\d)", env.utterance)
    if number is None:
        raise ExpertError(f"unexpected utterance {env.utterance!r}")
    js = "n => document.querySelector(`#area ul a[href='#tabs-${n}']`)"
    return [await target(env, js, number[1])]


@solver("focus-text", "focus-text-2")
async def _focus_text(env: MiniWoBEnv) -> list[Call]:
    nth = re.search(r"(\d)(?:st|nd|rd|th) input", env.utterance)
    js = "n => document.querySelectorAll('#area input[type=text]')[n]"
    return [await target(env, js, int(nth[1]) - 1 if nth else 0)]


@solver("click-dialog")
async def _click_dialog(env: MiniWoBEnv) -> list[Call]:
    return [await target(env, "() => document.querySelector('button.ui-button')")]


@solver("navigate-tree")
async def _navigate_tree(env: MiniWoBEnv) -> list[Call]:
    # Click the target when it shows; else open the outermost closed folder above it.
    js = """name => {
      const spans = [...document.querySelectorAll('#tree span')]
        .filter(s => s.textContent === name);
      const shown = spans.find(s => s.offsetParent !== null);
      if (shown) return shown;
      for (const s of spans) {
        const closed = [];
        const up = li => li.parentElement.closest('li');
        for (let li = up(s.closest('li')); li; li = up(li))
          if (li.querySelector(':scope > ul').style.display === 'none') closed.push(li);
        const outer = closed.pop();
        if (outer && outer.offsetParent !== null) return outer.querySelector(':scope > span');
      }
      return null;
    }"""
    return [await target(env, js, quoted(env.utterance)[0])]


@solver("use-autocomplete", "use-autocomplete-nodelay")
async def _use_autocomplete(env: MiniWoBEnv) -> list[Call]:
    parts = quoted(env.utterance)
    start, end = parts[0], (parts[1] if len(parts) > 1 else "")
    js = """([start, end]) => [...document.querySelectorAll('ul.ui-autocomplete li')]
      .find(li => li.offsetParent !== null && li.textContent.startsWith(start)
                  && li.textContent.endsWith(end))"""
    found = await targets(env, js, [start, end])
    if found:
        return [found[0],
                await target(env, "() => document.getElementById('subbtn')")]
    value = await env.page.evaluate("() => document.getElementById('tags').value")
    if value == start:  # typed, the menu is still on its way
        return [("wait", {"seconds": 0.5})]
    return [("type", {"ref": await ref(env, "() => document.getElementById('tags')"),
                      "text": start})]


EMAIL = {"delete": "trash", "important": "star"}


@solver("email-inbox", "email-inbox-noscroll")
async def _email_inbox(env: MiniWoBEnv) -> list[Call]:
    text = env.utterance
    name = re.search(r"Find the email by (.*?) and", text)
    if name is None:
        raise ExpertError(f"unexpected utterance {text!r}")
    action = ("reply" if "reply to" in text else "forward" if "forward" in text else
              "delete" if "trash" in text else "important")
    if await visible(env, "#reply"):
        reply = await ref(env, "() => document.getElementById('reply-text')")
        return [("type", {"ref": reply, "text": quoted(text)[0]}),
                await target(env, "() => document.getElementById('send-reply')")]
    if await visible(env, "#forward"):
        to = await ref(env, "() => document.querySelector('#forward .forward-sender')")
        forward_to = re.search(r"forward that email to (.*)\.$", text)
        if forward_to is None:
            raise ExpertError(f"unexpected utterance {text!r}")
        return [("type", {"ref": to, "text": forward_to[1]}),
                await target(env, "() => document.getElementById('send-forward')")]
    if await visible(env, "#email"):
        js = "a => document.querySelector(`#email .email-${a}`)"
        return [await target(env, js, action)]
    thread = ("n => [...document.querySelectorAll('#main .email-thread')].find(t => "
              "t.querySelector('.email-sender').textContent === n)")
    if action in EMAIL:
        icon = f"n => ({thread})(n).querySelector('.email-actions .{EMAIL[action]}')"
        return [await target(env, icon, name[1])]
    return [await target(env, thread, name[1])]
