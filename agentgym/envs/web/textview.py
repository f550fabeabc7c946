"""HTML -> text for the text env: a page's words, with what can be clicked in brackets.

Links and buttons show as ``[label]``; each drop-down as ``kind: [value] [value] ...``
with the chosen value marked ``(chosen: value)``. Labels are unique on a page: a repeated
label gets ``#2``, ``#3``; an option value shared by two drop-downs is written
``kind: value``. The parser reads the HTML the shop serves (well-formed, no scripts); it is
no general browser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_BLOCKS = frozenset({"p", "li", "h1", "h2", "h3", "nav", "header", "footer", "ol", "ul",
                     "form", "main", "div", "title"})


@dataclass
class Form:
    """A form and the values it will submit."""

    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class Select:
    """A drop-down: the field it sets, its kind (label) and the real choices."""

    form: int
    name: str
    kind: str
    options: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Clickable:
    """Something ``click[label]`` acts on."""

    label: str
    kind: str  # "link", "button" or "option"
    href: str = ""
    form: int = -1
    select: int = -1
    value: str = ""


@dataclass
class Page:
    """A parsed page: its text lines, forms, drop-downs and clickables by label."""

    lines: list[str] = field(default_factory=list)
    forms: list[Form] = field(default_factory=list)
    selects: list[Select] = field(default_factory=list)
    clickables: dict[str, Clickable] = field(default_factory=dict)

    def render(self) -> str:
        """The text the model reads (drop-downs show the current choice)."""
        out = []
        for line in self.lines:
            if line.startswith("\0select"):
                s = self.selects[int(line[7:])]
                chosen = self.forms[s.form].fields.get(s.name, "")
                buttons = " ".join(f"[{self._option_label(s, v)}]" for v in s.options)
                out.append(f"{s.kind}: {buttons}" + (f" (chosen: {chosen})" if chosen else ""))
            else:
                out.append(line)
        return "\n".join(out)

    def _option_label(self, select: Select, value: str) -> str:
        plain = self.clickables.get(value)
        return value if plain is not None and plain.select == self.selects.index(select) \
            else f"{select.kind}: {value}"

    def find(self, label: str) -> Clickable | None:
        """The clickable with this label (case and surrounding brackets ignored)."""
        key = label.strip().strip("[]").strip().lower()
        for name, item in self.clickables.items():
            if name.lower() == key:
                return item
        return None


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.line: list[str] = []
        self.form = -1
        self.select = -1
        self.option: str | None = None
        self.anchor: str | None = None
        self.button = False
        self.label_text: list[str] = []
        self.in_label = False
        self.capture: list[str] | None = None
        self.skip = 0  # inside <title>/<head>

    def flush(self) -> None:
        text = " ".join("".join(self.line).split())
        if text:
            self.page.lines.append(text)
        self.line = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("head", "title"):
            self.skip += 1
        elif tag in _BLOCKS:
            self.flush()
        if tag == "form":
            self.page.forms.append(Form(a.get("action", ""), a.get("method", "get").lower()))
            self.form = len(self.page.forms) - 1
        elif tag == "input" and self.form >= 0 and a.get("type", "text") in ("hidden", "text"):
            self.page.forms[self.form].fields[a.get("name", "")] = a.get("value", "")
        elif tag == "label":
            self.in_label, self.label_text = True, []
        elif tag == "select":
            kind = " ".join("".join(self.label_text).split()) or a.get("name", "")
            self.line = [] if self.in_label else self.line  # the kind is shown with the choices
            self.page.selects.append(Select(self.form, a.get("name", ""), kind))
            self.select = len(self.page.selects) - 1
            self.page.lines.append(f"\0select{self.select}")
        elif tag == "option" and self.select >= 0:
            self.option, self.capture = a.get("value", ""), []
        elif tag == "a":
            self.anchor, self.capture = a.get("href", ""), []
        elif tag == "button":
            self.button, self.capture = True, []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("head", "title"):
            self.skip = max(0, self.skip - 1)
        elif tag == "option" and self.option is not None:
            if self.option:  # the empty "choose ..." entry is a placeholder, not a choice
                self.page.selects[self.select].options.append(self.option)
            self.option = self.capture = None
        elif tag == "select":
            self.select = -1
        elif tag == "label":
            self.in_label = False
        elif tag == "a" and self.anchor is not None:
            label = self._add(Clickable("", "link", href=self.anchor))
            self.line.append(f"[{label}]")
            self.anchor = self.capture = None
        elif tag == "button" and self.button:
            label = self._add(Clickable("", "button", form=self.form))
            self.line.append(f"[{label}]")
            self.button, self.capture = False, None
        elif tag == "form":
            self.form = -1
        if tag in _BLOCKS:
            self.flush()

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.capture is not None:
            self.capture.append(data)
            return
        if self.in_label and self.select < 0:
            self.label_text.append(data)
        if self.select < 0:
            self.line.append(data)

    def _add(self, item: Clickable) -> str:
        base = " ".join("".join(self.capture or ()).split()) or item.href or "button"
        label, n = base, 1
        while label in self.page.clickables:
            n += 1
            label = f"{base} #{n}"
        self.page.clickables[label] = Clickable(label, item.kind, item.href, item.form)
        return label


def parse_page(html: str) -> Page:
    """Parse one shop page; option clickables are added after the links and buttons."""
    parser = _Parser()
    parser.feed(html)
    parser.close()
    parser.flush()
    page = parser.page
    counts: dict[str, int] = {}
    for s in page.selects:
        for v in s.options:
            counts[v] = counts.get(v, 0) + 1
    for i, s in enumerate(page.selects):
        for v in s.options:
            plain = counts[v] == 1 and v not in page.clickables
            for label in ((v, f"{s.kind}: {v}") if plain else (f"{s.kind}: {v}",)):
                page.clickables[label] = Clickable(label, "option", form=s.form, select=i,
                                                   value=v)
    return page
