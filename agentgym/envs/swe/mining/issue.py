"""Issue text for a mined bug, written from what a user would see, never from the patch.

The evidence is the failing run of the package's own tests: which tests fail, the assertion
and the traceback of the first failure, and the public function involved (the first frame of
the package's code that the failing test called; when the failure is an assertion in the test
itself, the function the bug sits in). Frames of the package's own source keep only their
location (``file:line: in function``), not their code line, and any line holding the changed
code is dropped, so the text never shows the injected change.

:func:`rewrite_issue` optionally has any OpenAI-compatible model reword the text; a rewrite
that quotes the changed code is discarded in favour of the original.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence

_HEADER_RE = re.compile(r"^_{3,} (.+?) _{3,}$")
_FRAME_RE = re.compile(r"^(\S+\.py):(\d+): in (\S+)$")
_CALL_RE = re.compile(r"([A-Za-z]\w*)\s*\(")
_ADDRESS_RE = re.compile(r"(?:\b0x|(?<![0-9A-Za-z])x)[0-9a-fA-F]{6,}")
"""Object addresses (``0x7f...``, or ``...x7f...`` in a repr pytest shortened)."""
MAX_TRACEBACK_LINES = 40
MAX_LISTED = 6
_TITLES = ("{entry} gives a wrong result", "Regression in {entry}",
           "{entry} no longer behaves as its tests expect", "Unexpected behaviour of {entry}")


def failure_sections(output: str) -> dict[str, list[str]]:
    """Test headline (``Class.test[param]``) -> its traceback lines, from ``--tb=short``."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("=" * 5):  # the next section of the report
            current = None
            continue
        match = _HEADER_RE.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif current is not None:
            current.append(line)
    return sections


def headline(test_id: str) -> str:
    """The name pytest prints above a test's traceback (``Class.test[p]``)."""
    return ".".join(test_id.split("::")[1:])


def _is_test_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return "tests/" in path or "test/" in path or name.startswith("test_") \
        or name.endswith("_test.py") or name == "conftest.py"


def clean_traceback(lines: Sequence[str], changed: Sequence[str]) -> tuple[list[str], str | None]:
    """The traceback as the issue shows it, and the first package function it enters.

    Args:
        lines: One test's ``--tb=short`` traceback.
        changed: Stripped lines of the changed code (never shown).

    Returns:
        The kept lines (package frames reduced to their location) and the name of the first
        package function called from the test, or None when the failure did not leave the test.
    """
    out: list[str] = []
    entry: str | None = None
    in_package = False
    for line in lines:
        frame = _FRAME_RE.match(line.strip())
        if frame:
            in_package = not _is_test_path(frame.group(1))
            if in_package and entry is None:
                entry = frame.group(3)
            out.append(line)
            continue
        if in_package and not line.lstrip().startswith("E "):
            continue  # the code line of a package frame could show the change
        if any(c and c in line for c in changed):
            continue
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    if len(out) > MAX_TRACEBACK_LINES:
        half = MAX_TRACEBACK_LINES // 2
        out = [*out[:half], "...", *out[-half:]]
    return out, entry


def scrub_addresses(line: str) -> str:
    """``line`` with object addresses replaced, so the text is the same on every run."""
    return _ADDRESS_RE.sub("0x...", line)


def _called_public(trace: Sequence[str], public: Collection[str]) -> str | None:
    """The first public package function a test-frame code line calls."""
    for line in trace:
        if _FRAME_RE.match(line.strip()) or line.lstrip().startswith("E "):
            continue
        for name in _CALL_RE.findall(line):
            if name in public:
                return name
    return None


def write_issue(*, package: str, version: str, module: str, function: str,
                failing: Sequence[str], output: str, changed: Sequence[str],
                instance_id: str, public: Collection[str] = ()) -> str:
    """The problem statement of one mined task.

    Args:
        package: Distribution name.
        version: Its version.
        module: Dotted module of the changed code (``toolz.itertoolz``).
        function: Qualified name of the changed function.
        failing: FAIL_TO_PASS test ids.
        output: The test run's output on the buggy code (``-rA --tb=short``).
        changed: Stripped text of the changed lines, before and after (never shown).
        instance_id: Picks the title wording, so it is stable per task.
        public: Names of the package's public functions and classes; when the failure
            does not enter a public one, the issue names the first the test calls.
    """
    sections = failure_sections(output)
    first = failing[0]
    trace, entry = clean_traceback(sections.get(headline(first), []), changed)
    trace = [scrub_addresses(line) for line in trace]
    if entry is None or entry.startswith("_"):
        entry = _called_public(trace, public)
    if entry is None and not function.rsplit(".", 1)[-1].startswith("_"):
        entry = function
    name = f"`{module}.{entry}`" if entry else f"the `{module}` module"
    pick = int(hashlib.sha256(instance_id.encode()).hexdigest(), 16) % len(_TITLES)
    title = _TITLES[pick].format(entry=name)
    listed = [f"- `{t}`" for t in failing[:MAX_LISTED]]
    if len(failing) > MAX_LISTED:
        listed.append(f"- ... and {len(failing) - MAX_LISTED} more")
    count = "one test" if len(failing) == 1 else f"{len(failing)} tests"
    verb = "fails" if len(failing) == 1 else "fail"
    parts = [f"{title}\n",
             f"With {package} {version}, {count} of the package's own test suite {verb}; "
             f"the failure points at {name}.\n", "Failing tests:", *listed, "",
             f"The first failure (`{first}`):", "```", *trace, "```", "",
             "These tests passed before; they should pass again without being changed."]
    return "\n".join(parts) + "\n"


async def rewrite_issue(text: str, *, base_url: str, model: str,
                        changed: Sequence[str], keep: Sequence[str] = ()) -> str:
    """``text`` reworded by an OpenAI-compatible model, or the original when that leaks or drops.

    A rewrite that quotes the changed code, or drops the evidence in ``keep``, is discarded.

    Args:
        text: The issue from :func:`write_issue`.
        base_url: API root of the server (``http://127.0.0.1:8000/v1``).
        model: Model name it serves.
        changed: Stripped lines of the changed code; a rewrite that quotes one is discarded.
        keep: Strings the rewrite must still hold (the first failing test's id, so the agent
            can run it); a rewrite missing one is discarded.
    """
    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.openai import OpenAIPolicy
    from agentgym.types import Message

    prompt = ("Rewrite this bug report as a user of the library would write it on an issue "
              "tracker. Keep the failing test names, the error and the function name; do not "
              "guess at the cause or propose a fix.\n\n" + text)
    request = GenerationRequest(messages=(Message("user", prompt),),
                                params=SamplingParams(temperature=0.0, max_tokens=700))
    async with OpenAIPolicy(base_url, model, token_ids=False) as policy:
        (completion,) = await policy.generate([request])
    rewritten = completion.text.strip()
    if (not rewritten or any(c and c in rewritten for c in changed)
            or any(k not in rewritten for k in keep)):
        return text
    return rewritten + "\n"
