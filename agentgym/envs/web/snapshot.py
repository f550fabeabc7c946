"""Accessibility snapshots with stable element references.

Playwright's ``aria_snapshot(mode="ai")`` tags every node with a ref (``e7``, ``f2e7``)
that changes from one page load to the next. :func:`stabilize` keeps refs only on the
elements an agent can act on, renumbers them ``e1, e2, ...`` in document order (so the same
page always reads the same, and its hash can serve as a state key), drops focus and cursor
marks and unnamed wrapper nodes, and returns the table that maps each stable ref back to
Playwright's ref for the locator ``aria-ref=...``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

INTERACTIVE = frozenset({"link", "button", "textbox", "searchbox", "combobox", "checkbox",
                         "radio", "listbox", "spinbutton", "slider", "switch", "tab",
                         "menuitem"})
EDITABLE = frozenset({"textbox", "searchbox", "spinbutton"})
_LINE_RE = re.compile(r'^(?P<indent>\s*)- (?P<role>[\w-]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?'
                      r"(?P<rest>.*)$")
_REF_RE = re.compile(r" \[ref=(?P<ref>[\w-]+)\]")
_NOISE_RE = re.compile(r" \[(?:active|cursor=pointer)\]")


@dataclass
class Element:
    """An element the agent can act on.

    Attributes:
        ref: Stable ref shown to the agent (``e3``).
        target: Playwright's ref for ``page.locator(f"aria-ref={target}")``.
        role: ARIA role (``link``, ``button``, ``textbox``, ``combobox``, ...).
        name: Accessible name.
        value: Text value (text boxes) or selected option (drop-downs).
        url: Link target, for links.
        options: Choices of a drop-down.
    """

    ref: str
    target: str
    role: str
    name: str
    value: str = ""
    url: str = ""
    options: list[str] = field(default_factory=list)


def find_element(elements: Mapping[str, Element], ref: str,
                 error: type[Exception] = ValueError) -> Element:
    """The element a ref names (``e3``, ``[e3]`` or ``ref=e3``).

    Raises:
        error: No element has that ref; the message lists the refs there are.
    """
    found = elements.get(ref.strip().strip("[]").removeprefix("ref="))
    if found is None:
        known = ", ".join(f"{e.ref} ({e.role} {e.name!r})" for e in list(elements.values())[:40])
        raise error(f"no element with ref {ref!r} on this page; refs here: {known}")
    return found


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def stabilize(raw: str) -> tuple[str, dict[str, Element]]:
    """The agent-facing snapshot and its ref table (see the module docstring)."""
    out: list[str] = []
    elements: dict[str, Element] = {}
    dropped: list[int] = []  # indents of removed wrapper lines whose children move up
    current: Element | None = None
    current_indent = -1
    for line in raw.splitlines():
        indent = len(line) - len(line.lstrip())
        while dropped and indent <= dropped[-1]:
            dropped.pop()
        shift = 2 * len(dropped)
        if current is not None and indent <= current_indent:
            current = None
        match = _LINE_RE.match(line)
        if match is None:  # "- /url: ..." or a continuation: keep, moved with its parent
            if current is not None and line.strip().startswith("- /url:"):
                current.url = line.strip()[len("- /url:"):].strip()
            out.append(line[shift:])
            continue
        role, name, rest = match["role"], match["name"], match["rest"]
        ref = _REF_RE.search(rest)
        rest = _NOISE_RE.sub("", _REF_RE.sub("", rest))
        if role == "generic" and name is None and rest.strip() in ("", ":"):
            dropped.append(indent)
            continue
        if current is not None and current.role == "combobox" and role == "option":
            option = _unquote(name or "")
            current.options.append(option)
            if "[selected]" in rest:
                current.value = option
        label = f' "{name}"' if name is not None else ""
        if role in INTERACTIVE and ref is not None:
            stable = f"e{len(elements) + 1}"
            value = _unquote(rest.split(":", 1)[1]) if role in EDITABLE and ":" in rest else ""
            current = Element(stable, ref["ref"], role, _unquote(f'"{name}"') if name else "",
                              value)
            current_indent = indent
            elements[stable] = current
            label += f" [ref={stable}]"
        out.append(f"{line[shift:indent]}- {role}{label}{rest}")
    return "\n".join(out), elements
