"""`view` refuses a file with no trajectory; env observations show in a monospace font;
`advantages` refuses a file with no scorable trajectory."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

import pytest

import agentgym
from agentgym import Trajectory
from agentgym.errors import SchemaError
from agentgym.evaluation.viewer import write_viewer
from agentgym.policies.simple import ScriptedAgent
from agentgym.rollout import RolloutConfig, run_groups

CHROMIUM = "/usr/bin/chromium"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentgym.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_view_refuses_a_file_that_holds_no_trajectory(tmp_path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("these are my notes\nnot JSON at all\n")
    with pytest.raises(SchemaError, match="holds no trajectory .*line 1 skipped"):
        write_viewer(notes, tmp_path / "notes.html")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SchemaError, match="the file is empty"):
        write_viewer(empty, tmp_path / "empty.html")
    proc = cli("view", str(notes), "-o", str(tmp_path / "page.html"))
    assert proc.returncode == 2 and "holds no trajectory" in proc.stderr
    assert not (tmp_path / "page.html").exists()


def test_advantages_refuses_a_file_of_error_episodes(tmp_path) -> None:
    broken = [Trajectory(f"e{i}", "seed-1", "g1", (), status="error",
                         error="ConnectionError: gone", seed=1) for i in range(3)]
    path = tmp_path / "errors.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in broken))
    proc = cli("advantages", "--estimator", "grpo", str(path))
    assert proc.returncode == 2, proc.stderr
    assert "no scorable trajectory (3 read" in proc.stderr and proc.stdout == ""


@pytest.mark.browser
def test_sokoban_boards_show_in_a_monospace_font(tmp_path) -> None:
    if shutil.which("chromium") is None:
        if os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1":  # CI: never skip
            pytest.fail("AGENTGYM_REQUIRE_BROWSER=1 but Chromium is not installed")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    trajs = asyncio.run(run_groups(lambda: agentgym.make("agentgym/Sokoban-v0"),
                                   ScriptedAgent(), [1], RolloutConfig(),
                                   env_id="agentgym/Sokoban-v0"))
    path = tmp_path / "sokoban.jsonl"
    path.write_text(trajs[0].to_json() + "\n")
    html = write_viewer(path, tmp_path / "view.html")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox",
                                                                     "--disable-gpu"])
        page = browser.new_page()
        page.goto(html.as_uri())
        texts = page.get_by_test_id("message-text")
        widths = texts.first.evaluate(
            """el => { const c = document.createElement('canvas').getContext('2d');
                       c.font = getComputedStyle(el).font;
                       return [c.measureText('#').width, c.measureText('.').width]; }""")
        family = texts.first.evaluate("el => getComputedStyle(el).fontFamily")
        browser.close()
    assert "monospace" in family
    assert widths[0] == widths[1]  # a wall and a floor cell are equally wide: the board aligns
