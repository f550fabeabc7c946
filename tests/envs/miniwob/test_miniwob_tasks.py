"""The task list, argument checks, suites and the snapshot parser (no browser needed)."""

from __future__ import annotations

import pytest
from miniwob_helpers import needs_browser

import agentgym
from agentgym.errors import ConfigError

miniwob = pytest.importorskip("agentgym.envs.miniwob.tasks")


@pytest.fixture(autouse=True)
def _package() -> None:
    needs_browser()


def test_tasks_come_from_the_installed_package() -> None:
    names = miniwob.task_names()
    assert len(names) == 130 and {"click-button", "email-inbox", "use-autocomplete"} <= set(names)
    assert miniwob.task_page("click-button").is_file()
    assert miniwob.package_version() == "1.1.0"


def test_every_task_has_its_own_id_listed_by_agentgym_envs() -> None:
    from typer.testing import CliRunner

    from agentgym.cli import app

    aliases = {i: s for i, s in agentgym.registry.items() if s.alias_of == "miniwob/MiniWoB-v0"}
    assert set(aliases) == {f"miniwob/{t}-v0" for t in miniwob.task_names()}
    assert all(s.kwargs == {"task": i[len("miniwob/"):-len("-v0")]} for i, s in aliases.items())
    base = agentgym.spec("miniwob/MiniWoB-v0")
    assert all((s.entry_point, s.max_turns, s.requires) ==
               (base.entry_point, base.max_turns, base.requires) for s in aliases.values())
    env = agentgym.make("miniwob/click-tab-2-v0")
    assert env.unwrapped.task == "click-tab-2" and env.max_turns == base.max_turns
    assert agentgym.make("miniwob/MiniWoB-v0", task="click-tab-2").unwrapped.task == "click-tab-2"
    listing = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["envs"]).output
    assert "miniwob/click-tab-2-v0" in listing and "miniwob/use-autocomplete-v0" in listing


def test_a_mistyped_task_id_names_the_closest() -> None:
    from agentgym.errors import UnknownEnvError

    with pytest.raises(UnknownEnvError, match="miniwob/click-button-v0"):
        agentgym.make("miniwob/click-buton-v0")


def test_unknown_task_and_bad_arguments_raise_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="did you mean 'click-button'"):
        agentgym.make("miniwob/MiniWoB-v0", task="click-buton")
    with pytest.raises(ConfigError, match="turn_ms must be an int"):
        agentgym.make("miniwob/MiniWoB-v0", turn_ms=0)
    with pytest.raises(ConfigError, match="reward must be 'raw' or 'discounted'"):
        agentgym.make("miniwob/MiniWoB-v0", reward="shaped")


# The 54 tasks of Kim et al. 2023 (RCI), as task_names.json of the authors' repository
# (github.com/posgnu/rci-agent) lists them.
RCI_TASKS = {
    "choose-list", "click-button", "click-button-sequence", "click-checkboxes",
    "click-checkboxes-large", "click-checkboxes-soft", "click-checkboxes-transfer",
    "click-collapsible", "click-collapsible-2", "click-color", "click-dialog", "click-dialog-2",
    "click-link", "click-menu", "click-option", "click-scroll-list", "click-shades",
    "click-shape", "click-tab", "click-tab-2", "click-tab-2-hard", "click-test", "click-test-2",
    "click-widget", "count-shape", "email-inbox", "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk", "email-inbox-nl-turk", "enter-date", "enter-password",
    "enter-text", "enter-text-dynamic", "enter-time", "focus-text", "focus-text-2",
    "grid-coordinate", "guess-number", "identify-shape", "login-user", "login-user-popup",
    "multi-layouts", "multi-orderings", "navigate-tree", "search-engine", "simple-algebra",
    "social-media", "social-media-all", "social-media-some", "terminal", "text-transform",
    "tic-tac-toe", "use-autocomplete", "use-spinner",
}


def test_the_miniwob_suite_is_the_rci_task_set() -> None:
    from agentgym.evaluation.suites import get_suite

    core = get_suite("miniwob")
    assert len(RCI_TASKS) == 54 and core.version >= 2
    assert [e.kwargs["task"] for e in core.entries] == sorted(RCI_TASKS)


def test_suites_name_real_tasks_with_versioned_seeds() -> None:
    from agentgym.evaluation.suites import get_suite

    core, every = get_suite("miniwob"), get_suite("miniwob-all")
    assert core.version >= 1 and every.version >= 1
    assert [e.kwargs["task"] for e in every.entries] == list(miniwob.task_names())
    assert {e.kwargs["task"] for e in core.entries} < set(miniwob.task_names())
    assert all(e.name == e.kwargs["task"] for e in core.entries)  # per-task rows in reports
    assert core.entries[0].seeds[0] == 1_000_000 and core.requires == ("browser",)


def test_snapshot_keeps_refs_on_text_and_drops_empty_wrappers() -> None:
    from agentgym.envs.miniwob.snapshot import stabilize

    raw = "\n".join([
        "- generic [ref=f1e2]:",
        '  - generic [ref=f1e3]: "Click on Tab #3."',
        "  - generic [ref=f1e4]:",
        "    - 'link \"Tab #1\" [ref=f1e6] [cursor=pointer]':",
        '      - /url: "#tabs-1"',
        "    - checkbox \"ab\" [checked] [ref=f1e7]",
        "    - combobox [ref=f1e8]:",
        '      - option "Chad" [selected]',
        '      - option "Peru"',
        "    - textbox [ref=f1e9]: typed",
        "    - generic [ref=f1e10] [cursor=pointer]",
    ])
    text, elements = stabilize(raw)
    assert text.splitlines()[:3] == ["- generic [ref=e1]: Click on Tab #3.",
                                     '- link "Tab #1" [ref=e2]',
                                     '- checkbox "ab" [ref=e3] [checked]']
    assert [e.target for e in elements.values()] == ["f1e3", "f1e6", "f1e7", "f1e8", "f1e9",
                                                      "f1e10"]
    assert elements["e2"].url == "#tabs-1"
    assert elements["e4"].options == ["Chad", "Peru"] and elements["e4"].value == "Chad"
    assert elements["e5"].value == "typed"


def test_the_asked_for_tasks_have_scripted_solvers() -> None:
    from agentgym.envs.miniwob.experts import SOLVERS

    assert {"click-button", "click-checkboxes", "enter-text", "login-user", "choose-list",
            "click-tab", "focus-text", "navigate-tree", "use-autocomplete",
            "email-inbox"} <= set(SOLVERS)
