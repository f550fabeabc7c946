"""The README's Python examples run."""

import asyncio
import re
from pathlib import Path

import pytest

import agentgym

README = (Path(__file__).parent.parent / "README.md").read_text()


@pytest.mark.slow
def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(block, namespace)  # noqa: S102 - the README's own code
    assert namespace["add"].spec.parameters["required"] == ["a", "b"]
    asyncio.run(agentgym.check_env(agentgym.make("demo/Guess-v0")))


def test_readme_commands_name_real_files():
    assert "bash .ci/test.sh" in README
    assert "bash .ci/test.sh" in (Path(__file__).parent.parent / ".ci" / "run").read_text()
