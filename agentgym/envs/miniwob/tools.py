"""The tools a MiniWoB policy acts with: element actions by ref, and raw mouse actions.

Element tools (``click``, ``type``, ``select``, ``scroll``) take a ref from the snapshot.
``click`` is MiniWoB's own element click (``core.elementClick``: ``element.click()`` and
``focus()``, or mouse and click events on an SVG element), the primitive MiniWoB's Python side
acts with (its ``CLICK_ELEMENT``): it reaches the element wherever it is, covered or
scrolled away, and sends no pointer events. Only an element with no size on the page (which
MiniWoB gives no ref) cannot be clicked, an agent mistake reported back; the answer says when
a mouse could not have reached the element. ``type`` and ``select`` go through Playwright's
actionability checks. ``click_xy`` and ``drag`` are a real mouse at page coordinates, for the
canvas and drag tasks a snapshot cannot describe (a multimodal policy reads them off the
screenshot). ``wait`` lets page time pass, for tasks that show things after a delay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from agentgym.tools import tool

from .errors import ActionError
from .snapshot import EDITABLE

if TYPE_CHECKING:
    from .env import MiniWoBEnv


class Turn:
    """What the tools see of the env during one turn (filled in by the ToolBox).

    Args:
        env: The env whose page the tools act on.
    """

    def __init__(self, env: MiniWoBEnv) -> None:
        self.env = env

    async def blocked(self) -> str | None:
        """Why the next call must not run (a fault, or the page ended the episode), if so.

        After the episode ends MiniWoB shows its "START" cover, and a click on it would
        start a new episode over the scored one: nothing runs then.
        """
        if self.env.fault is not None:
            return "not run: the browser failed earlier in this turn"
        if await self.env.act(self.env.page.evaluate("() => WOB_DONE_GLOBAL"), "reading"):
            return "not run: the episode is already over"
        return None


ELEMENT_CLICK = """e => {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return 'hidden';  // core.getDOMInfo gives it no ref
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = x >= 0 && y >= 0 && x < innerWidth && y < innerHeight
    ? document.elementFromPoint(x, y) : undefined;
  const reach = hit === undefined ? 'out of view' :
    (hit && (hit === e || e.contains(hit)) ? '' : 'covered');
  // MiniWoB's own primitive, which finds elements by core.getDOMInfo's refs: hand it this one
  const key = 'agentgym-click';
  core.previousDOMInfo[key] = e;
  try {
    const done = core.elementClick(key);
    return done === true ? reach : 'failed: ' + done;
  } finally { delete core.previousDOMInfo[key]; }
}"""
"""MiniWoB's ``core.elementClick`` on an element; returns '' or why a mouse could not reach it
(``covered``, ``out of view``), ``hidden`` (no size: not clicked) or ``failed: <message>``."""


@tool(timeout=600)
async def click(ref: str, state: Turn) -> str:
    """Click an element of the page (MiniWoB's element click: it reaches the element itself).

    Args:
        ref: The element's ref from the snapshot, e.g. "e5".
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    element = env.element(ref)
    locator = env.locator(element)
    # Nothing to wait for: the element is on the page or gone (Playwright would wait the
    # action timeout for a gone one). So no action timeout bounds the click, only the hang
    # limit: on a busy machine Playwright's mouse click (scroll, wait until stable, hit-test)
    # ran past that timeout and the click was lost; a lookup under it can run past it too.
    if not await env.act(locator.count(), f"finding {ref}"):
        raise ActionError(f"{ref} is no longer on the page (it changed since the snapshot); "
                          "nothing clicked")
    how = await env.act(locator.evaluate(ELEMENT_CLICK, timeout=env.hang_ms), f"clicking {ref}")
    if how == "hidden":
        raise ActionError(f"{ref} is not shown (it has no size on the page); nothing clicked")
    if how.startswith("failed: "):
        raise ActionError(f"clicking {ref} failed: {how[len('failed: '):]}")
    said = f"clicked {element.role} {element.name!r}" if element.name else f"clicked {ref}"
    # a click by ref reaches an element a person's mouse would miss: say so
    return f"{said} ({how}: a mouse click there would miss it)" if how else said


@tool(name="type", timeout=600)
async def type_(ref: str, text: str, state: Turn) -> str:
    """Type text into a text box, replacing what it holds (key by key, as a person types).

    Args:
        ref: The text box's ref from the snapshot, e.g. "e3".
        text: The text to type.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    element = env.element(ref)
    if element.role not in EDITABLE:
        raise ActionError(f"{ref} is a {element.role} ({element.name!r}), not a text box; type "
                     "works on textbox elements")
    locator = env.locator(element)
    kind = await env.act(locator.evaluate("e => (e.type || '').toLowerCase()"), "typing")
    if kind in ("date", "time", "datetime-local", "month", "week", "color", "range"):
        await env.act(locator.fill(text, timeout=env.timeout_ms), f"typing into {ref}")
    else:  # real key events: autocompletes and key handlers react as they would to a person
        await env.act(locator.fill("", timeout=env.timeout_ms), f"clearing {ref}")  # focuses
        # the keys go to the focused box with no action timeout: on a busy machine typing takes
        # longer than it, and a timeout would leave the text half typed (the hang limit holds)
        await env.act(env.page.keyboard.type(text), f"typing into {ref}")
    return f"typed {text!r} into {ref}"


@tool(timeout=600)
async def select(ref: str, option: str, state: Turn) -> str:
    """Choose an option of a drop-down.

    Args:
        ref: The drop-down's (combobox) ref from the snapshot, e.g. "e9".
        option: The option's text, as the snapshot shows it.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    element = env.element(ref)
    if element.role not in ("combobox", "listbox"):
        raise ActionError(f"{ref} is a {element.role} ({element.name!r}), not a drop-down; select "
                     "works on combobox elements")
    if element.options and option not in element.options:
        raise ActionError(f"{ref} has no option {option!r}; its options: {element.options}")
    await env.act(env.locator(element).select_option(label=option, timeout=env.timeout_ms),
                  f"selecting in {ref}")
    return f"selected {option!r} in {ref}"


@tool(timeout=600)
async def press(key: str, state: Turn) -> str:
    """Press a key or a key combination on the focused element.

    Args:
        key: A key name such as "Enter", "Tab", "ArrowDown", "Backspace" or "Control+a".
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    await env.act(env.page.keyboard.press(key), f"pressing {key!r}")
    return f"pressed {key}"


SCROLL = """(e, s) => {
  let box = e;  // the nearest box around e that scrolls, else the page
  while (box && !(box.scrollHeight > box.clientHeight + 1 &&
                  /(auto|scroll)/.test(getComputedStyle(box).overflowY))) box = box.parentElement;
  if (!box) { window.scrollBy(0, s * Math.round(window.innerHeight * 0.8));
              return Math.round(window.scrollY); }
  box.scrollTop += s * Math.max(20, Math.round(box.clientHeight * 0.8));
  return Math.round(box.scrollTop);
}"""


@tool(timeout=600)
async def scroll(state: Turn, direction: Literal["down", "up"] = "down",
                 ref: str | None = None) -> str:
    """Scroll the page, or the scrolling box (a list, a text area) that holds an element.

    Args:
        direction: "down" or "up".
        ref: An element inside the box to scroll; the whole page when left out.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    sign = 1 if direction == "down" else -1
    if ref is None:
        y = await env.act(env.page.evaluate(SCROLL.replace("let box = e", "let box = null"),
                                            sign), "scrolling")
        return f"scrolled the page {direction}: now at {y} px"
    element = env.element(ref)
    y = await env.act(env.locator(element).evaluate(SCROLL, sign), f"scrolling {ref}")
    return f"scrolled the box around {ref} {direction}: now at {y} px"


@tool(timeout=600)
async def click_xy(x: float, y: float, state: Turn) -> str:
    """Click at a point of the page, in CSS pixels from its top-left corner.

    Args:
        x: Distance from the left edge.
        y: Distance from the top edge.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    width, height = env.viewport
    if not (0 <= x < width and 0 <= y < height):
        raise ActionError(f"({x}, {y}) is outside the {width}x{height} page")
    await env.act(env.page.mouse.click(x, y), f"clicking at ({x}, {y})")
    return f"clicked at ({x:g}, {y:g})"


@tool(timeout=600)
async def drag(x1: float, y1: float, x2: float, y2: float, state: Turn) -> str:
    """Drag with the mouse: press at (x1, y1), move to (x2, y2), release.

    Args:
        x1: Start, from the left edge.
        y1: Start, from the top edge.
        x2: End, from the left edge.
        y2: End, from the top edge.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    env = state.env
    width, height = env.viewport
    for x, y in ((x1, y1), (x2, y2)):
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(f"({x}, {y}) is outside the {width}x{height} page")
    mouse = env.page.mouse
    await env.act(mouse.move(x1, y1), "moving the mouse")
    await env.act(mouse.down(), "pressing the mouse button")
    await env.act(mouse.move(x2, y2, steps=8), "dragging")
    await env.act(mouse.up(), "releasing the mouse button")
    return f"dragged from ({x1:g}, {y1:g}) to ({x2:g}, {y2:g})"


@tool(timeout=600)
async def wait(seconds: float, state: Turn) -> str:
    """Let page time pass (for things that appear after a delay); uses up the time limit.

    Args:
        seconds: How long, up to 5.
        state: The turn, filled in by the ToolBox (hidden from the model).
    """
    if (blocked := await state.blocked()) is not None:
        return blocked
    if not 0 < seconds <= 5:
        raise ActionError(f"seconds must be in (0, 5], got {seconds}")
    env = state.env
    await env.act(env.page.clock.run_for(int(seconds * 1000)), "waiting")
    env.elapsed_ms += int(seconds * 1000)
    return f"waited {seconds:g} s"


TOOLS = (click, type_, select, press, scroll, click_xy, drag, wait)
"""Every MiniWoB tool, in the order the model sees them."""
