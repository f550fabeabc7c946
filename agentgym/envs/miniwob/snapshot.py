"""MiniWoB pages as accessibility snapshots with stable refs on everything that shows.

MiniWoB tasks act on more than buttons and links: a folder name in a tree, a sender in an
inbox, a word in a paragraph are plain ``generic`` nodes with click handlers. So unlike the
shop's snapshot (:mod:`agentgym.envs.web.snapshot`, refs on interactive roles only), every
node Playwright's ``aria_snapshot(mode="ai")`` tags keeps a ref, unless it is an empty
wrapper (no name, no text, no pointer cursor), which is dropped with its children moved
up. Refs are renumbered ``e1, e2, ...`` in document order, so the same page always reads
the same and its hash identifies the page state. Lines are written without the YAML
quoting Playwright adds, which a model does not need.
"""

from __future__ import annotations

import re

from agentgym.envs.web.snapshot import EDITABLE, Element

_KEY_RE = re.compile(r'^(?P<role>[\w/-]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<attrs>.*)$')
_ATTR_RE = re.compile(r"\[(?P<attr>[^\]]*)\]")


def _yaml_unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def _split_item(item: str) -> tuple[str, str | None]:
    """``key: value`` of one YAML list item, honouring a single-quoted key."""
    if item.startswith("'"):
        i = 1
        while i < len(item):
            if item[i] == "'" and item[i + 1:i + 2] == "'":
                i += 2
                continue
            if item[i] == "'":
                break
            i += 1
        key, rest = item[1:i].replace("''", "'"), item[i + 1:]
        return key, (rest[1:] if rest.startswith(":") else None)
    # a key has no ": " inside a double-quoted name; find the first colon outside quotes
    quoted = False
    for i, ch in enumerate(item):
        if ch == '"' and (i == 0 or item[i - 1] != "\\"):
            quoted = not quoted
        elif ch == ":" and not quoted:
            return item[:i], item[i + 1:]
    return item, None


def stabilize(raw: str) -> tuple[str, dict[str, Element]]:
    """The agent-facing snapshot and its ref table (see the module docstring).

    Args:
        raw: Playwright's ``aria_snapshot(mode="ai")`` of the page.

    Returns:
        The snapshot text and the elements by stable ref.
    """
    out: list[str] = []
    elements: dict[str, Element] = {}
    dropped: list[int] = []  # indents of removed wrappers, whose children move up
    owner: tuple[int, Element] | None = None  # the element a "/url" or option line belongs to
    for line in raw.splitlines():
        indent = len(line) - len(line.lstrip())
        while dropped and indent <= dropped[-1]:
            dropped.pop()
        pad = " " * max(0, indent - 2 * len(dropped))
        if owner is not None and indent <= owner[0]:
            owner = None
        item = line.strip().removeprefix("- ")
        key, value = _split_item(item)
        value = _yaml_unquote(value) if value and value.strip() else ""
        if key.startswith("/url"):
            if owner is not None:
                owner[1].url = value
            continue
        match = _KEY_RE.match(key)
        if match is None or key == "text":
            out.append(f"{pad}- {key}: {value}" if value else f"{pad}- {key}")
            continue
        role, name = match["role"], match["name"]
        name = name.replace('\\"', '"') if name is not None else ""
        attrs = [a["attr"] for a in _ATTR_RE.finditer(match["attrs"])]
        target = next((a[4:] for a in attrs if a.startswith("ref=")), None)
        pointer = "cursor=pointer" in attrs
        shown = [a for a in attrs if not a.startswith(("ref=", "cursor=", "active"))]
        if role == "generic" and not name and not value and not pointer and not shown:
            dropped.append(indent)
            continue
        if owner is not None and owner[1].role in ("combobox", "listbox") and role == "option":
            owner[1].options.append(name)
            if "selected" in attrs:
                owner[1].value = name
        label = f'{role} "{name}"' if name else role
        if target is not None:
            element = Element(f"e{len(elements) + 1}", target, role, name,
                              value if role in EDITABLE else "")
            elements[element.ref] = element
            owner = (indent, element)
            label += f" [ref={element.ref}]"
        label += "".join(f" [{a}]" for a in shown)
        out.append(f"{pad}- {label}: {value}" if value else f"{pad}- {label}")
    return "\n".join(out), elements
