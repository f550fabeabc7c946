import asyncio
import base64
import os
import shutil
import struct
import zlib

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym import Message, Step, StepResult, ToolCall, Trajectory
from agentgym.cli import app
from agentgym.evaluation.viewer import SCREENSHOT_KEY, load_episodes, write_viewer
from agentgym.policies.simple import ScriptedPolicy
from agentgym.rollout import RolloutConfig, run_groups
from agentgym.trainers.advantages import advantages_jsonl, get_estimator
from agentgym.types import Group

CHROMIUM = "/usr/bin/chromium"
HOSTILE = "</script><script>window.pwned = 1</script><b>bold?</b>"


def png(width=40, height=24):
    """A real PNG (solid orange), written by hand: no imaging library needed."""
    row = b"\x00" + b"\xff\x80\x00" * width
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


@pytest.fixture
def traj_files(tmp_path):
    """Real Sokoban rollouts (groups of 2), a web-like episode with a screenshot, an error."""
    trajs = asyncio.run(run_groups(lambda: agentgym.make("agentgym/Sokoban-v0"),
                                   ScriptedPolicy(), [1, 2], RolloutConfig(group_size=2),
                                   env_id="agentgym/Sokoban-v0"))
    shot = base64.b64encode(png()).decode()
    web = Trajectory("web-1", "shop-7", "shop-7", (Message("user", "Buy a red mug."),), (
        Step(0, Message("assistant", "", (ToolCall("c0", "click", {"selector": "#mug"}),)),
             StepResult((Message("tool", HOSTILE, tool_call_id="c0", name="click"),), 0.0,
                        info={SCREENSHOT_KEY: shot, "url": "http://shop.local/mug"})),
        Step(1, Message("assistant", "done"), StepResult((Message("user", "bought"),), 1.0,
                                                         terminated=True,
                                                         info={"success": True})),
    ), status="terminated", env_id="agentgym/WebShop-v0", seed=7).with_outcome()
    broken = Trajectory("err-1", "seed-9", "g9", (), status="error",
                        error="ConnectionError: the browser crashed", env_id="agentgym/WebShop-v0",
                        seed=9)
    path = tmp_path / "trajs.jsonl"
    lines = [t.to_json() for t in [*trajs, web, broken]]
    path.write_text("\n".join(lines[:2] + ["{truncated garbage"] + lines[2:]) + "\n")
    adv_path = tmp_path / "adv.jsonl"
    adv_path.write_text("\n".join(advantages_jsonl(Group.from_trajectories(trajs),
                                                   get_estimator("grpo"))) + "\n")
    return path, adv_path, trajs


def test_episodes_carry_advantages_screenshots_and_notes(traj_files):
    path, adv_path, trajs = traj_files
    episodes, notes = load_episodes(path, adv_path)
    assert len(episodes) == len(trajs) + 2
    assert notes == ["line 3 skipped: Expecting property name enclosed in double quotes: line "
                     "1 column 2 (char 1)"]
    assert [e["outcome"] for e in episodes[-2:]] == ["success", "error"]
    web = episodes[-2]
    assert web["steps"][0]["screenshot"] and SCREENSHOT_KEY not in web["steps"][0]["info"]
    assert web["steps"][0]["action"]["tool_calls"][0]["name"] == "click"
    assert all(s["advantage"] is not None for s in episodes[0]["steps"])


def test_page_is_self_contained(traj_files, tmp_path):
    path, adv_path, _ = traj_files
    result = CliRunner().invoke(app, ["view", str(path), "-o", str(tmp_path / "v.html"),
                                      "--advantages", str(adv_path)])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "v.html").read_text()
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert page.count("</script>") == 2  # the data cannot close its script element
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        write_viewer(tmp_path / "missing.jsonl")


@pytest.mark.browser
def test_viewer_in_chromium(traj_files, tmp_path):
    if shutil.which("chromium") is None:
        if os.environ.get("AGENTGYM_REQUIRE_BROWSER") == "1":  # CI: never skip
            pytest.fail("AGENTGYM_REQUIRE_BROWSER=1 but Chromium is not installed")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    path, adv_path, trajs = traj_files
    html = write_viewer(path, tmp_path / "view.html", adv_path)
    n = len(trajs) + 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        requests, errors = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(html.as_uri())
        count = page.get_by_test_id("count")
        assert count.inner_text() == f"{n} of {n} episodes"
        items = page.get_by_test_id("episode-item")
        assert items.count() == n
        # Click through: the second episode, then next.
        items.nth(1).click()
        assert page.get_by_test_id("episode-title").inner_text() == trajs[1].task_id
        assert page.get_by_test_id("step").count() == len(trajs[1].steps)
        assert page.get_by_test_id("tool-call").count() == len(trajs[1].steps)
        assert "advantage" in page.get_by_test_id("step-meta").first.inner_text()
        page.get_by_test_id("next").click()
        assert page.get_by_test_id("episode-title").inner_text() == trajs[2].task_id
        page.keyboard.press("j")
        assert page.get_by_test_id("episode-title").inner_text() == trajs[3].task_id
        # Filters: outcome, env, text.
        page.get_by_test_id("filter-outcome").select_option("error")
        assert count.inner_text() == f"1 of {n} episodes"
        assert "browser crashed" in page.get_by_test_id("error").inner_text()
        page.get_by_test_id("filter-outcome").select_option("")
        page.get_by_test_id("filter-env").select_option("agentgym/WebShop-v0")
        assert count.inner_text() == f"2 of {n} episodes"
        page.get_by_test_id("filter-env").select_option("")
        page.get_by_test_id("filter-text").fill("red mug")
        assert count.inner_text() == f"1 of {n} episodes"
        # The web episode: its screenshot decodes, hostile text shows as text.
        shot = page.get_by_test_id("screenshot")
        assert shot.evaluate("img => img.naturalWidth") == 40
        assert HOSTILE in page.get_by_test_id("episode").inner_text()
        assert page.evaluate("window.pwned") is None
        page.screenshot(path=str(tmp_path / "viewer.png"), full_page=True)
        if os.environ.get("AGENTGYM_VIEWER_SHOT"):  # keep a copy to look at
            shutil.copy(tmp_path / "viewer.png", os.environ["AGENTGYM_VIEWER_SHOT"])
        browser.close()
    assert (tmp_path / "viewer.png").read_bytes().startswith(b"\x89PNG")
    assert errors == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
