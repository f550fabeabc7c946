"""A reference patch as ``editor`` calls: the oracle written with the env's own edit tool.

``git apply`` of the whole diff (the default oracle) demonstrates a unified diff, whose hunk
headers must count their lines exactly and whose context lines repeat the file; a model that
learns from it must learn that format too. Here each hunk becomes one ``str_replace`` whose
``old_str`` is the lines the hunk removes, widened by context lines one at a time only until
it occurs exactly once in the file, and whose ``new_str`` is what replaces them; a new file
becomes one ``create``. Applied in order, the calls leave the tree as ``git apply`` would.

Where the file's text is not known (a repository inside an image), each edit keeps the
hunk's whole context, which ``git apply`` itself needed to place it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentgym.errors import ConfigError


def patch_edits(patch: str, read: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """``editor`` arguments, one call per hunk, that apply ``patch``.

    Args:
        patch: A unified git diff.
        read: A path (relative to the repository root) -> the file's text before the patch,
            or ``None`` where it is not known.

    Raises:
        ConfigError: unidiff (the ``swe`` extra) is not installed.
        ValueError: The patch deletes or renames a file, which ``editor`` cannot, or an
            edit's text does not occur exactly once in the file ``read`` gave.
    """
    try:
        # unidiff documents this import; its py.typed package re-exports without __all__
        from unidiff import PatchSet  # pyright: ignore[reportPrivateImportUsage]
    except ImportError:
        raise ConfigError("the SWE oracle as editor calls (expert='editor') reads diffs with "
                          "unidiff; install it with: pip install 'agentgym[swe]'") from None

    calls: list[dict[str, Any]] = []
    for changed in PatchSet(patch):
        path = changed.path
        if changed.is_removed_file or changed.is_rename:
            raise ValueError(f"{path}: the patch deletes or renames it; editor cannot")
        if changed.is_added_file:
            text = "".join(line.value for hunk in changed for line in hunk.target_lines())
            calls.append({"command": "create", "path": path, "file_text": text})
            continue
        text = read(path)
        for hunk in changed:
            old = [line.value for line in hunk.source_lines()]
            new = [line.value for line in hunk.target_lines()]
            old_str, new_str = _narrowest(old, new, text)
            if text is not None:
                text = text.replace(old_str, new_str, 1)
            calls.append({"command": "str_replace", "path": path, "old_str": old_str,
                          "new_str": new_str})
    return calls


def _narrowest(old: list[str], new: list[str], text: str | None) -> tuple[str, str]:
    """The hunk's change with the fewest context lines that make ``old_str`` unique."""
    lead = 0  # context lines the hunk starts with, shared by both sides
    while lead < min(len(old), len(new)) and old[lead] == new[lead]:
        lead += 1
    trail = 0
    while (trail < min(len(old), len(new)) - lead
           and old[len(old) - 1 - trail] == new[len(new) - 1 - trail]):
        trail += 1
    if text is None:  # the hunk as git apply placed it
        return _strings(old, new)
    before, after = 0, 0  # context lines taken back, before and after the change
    while True:
        o, n = _strings(old[lead - before:len(old) - trail + after],
                        new[lead - before:len(new) - trail + after])
        if o.strip() and text.count(o) == 1:
            return o, n
        if before < lead and (before <= after or after >= trail):
            before += 1
        elif after < trail:
            after += 1
        else:
            raise ValueError(f"the hunk {''.join(old)!r} does not occur exactly once in its file")


def _strings(old: list[str], new: list[str]) -> tuple[str, str]:
    """Both sides as text; a newline ending both is dropped (the edit is the same)."""
    o, n = "".join(old), "".join(new)
    if o.endswith("\n") and n.endswith("\n"):
        o, n = o[:-1], n[:-1]
    return o, n
