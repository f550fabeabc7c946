"""The base image recipe (no engine needed) and the built image (engine needed)."""

from __future__ import annotations

import os

import pytest

from agentgym.sandboxes.image import PACKAGES, _prepare_rootfs, apt_mirror, recipe


def test_recipe_changes_with_what_goes_in():
    assert recipe() == recipe()
    assert recipe(base="python:3.11-slim") != recipe()
    assert recipe(packages=(*PACKAGES, "curl")) != recipe()


def test_apt_mirror_is_a_url():
    assert apt_mirror().startswith(("http://", "https://", "file:/"))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to uid 1000 needs root")
def test_prepare_rootfs_trims_and_adds_the_user(tmp_path):
    root = tmp_path / "rootfs"
    for d in ("etc", "usr/bin", "usr/share/doc/git", "var/lib/apt/lists"):
        (root / d).mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "usr/share/doc/git/README").write_text("docs")
    (root / "var/lib/apt/lists/index").write_text("lists")
    _prepare_rootfs(root)
    assert "agent:x:1000:1000" in (root / "etc/passwd").read_text()
    assert not any((root / "usr/share/doc").iterdir())
    assert not any((root / "var/lib/apt/lists").iterdir())
    assert (root / "testbed").stat().st_uid == 1000
    assert os.readlink(root / "usr/bin/python") == "python3"
    assert "directory = *" in (root / "etc/gitconfig").read_text()


@pytest.mark.docker
def test_built_image_is_labelled_and_runs_as_agent(docker_client, sandbox_image):
    from agentgym.sandboxes.image import RECIPE_LABEL, image_ready

    assert image_ready(docker_client, sandbox_image)
    assert docker_client.images.get(sandbox_image).labels[RECIPE_LABEL] == recipe()
    out = docker_client.containers.run(
        sandbox_image, ["sh", "-c", "id -un && python -c 'import pytest; print(pytest.__name__)'"],
        user="1000:1000", network_mode="none", remove=True)
    assert out.decode().split() == ["agent", "pytest"]
