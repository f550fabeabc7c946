"""``agentgym sandbox ...``: build the base image, run or stop a private engine, sweep leftovers.

The library side lives in :mod:`agentgym.sandboxes.image` and
:mod:`agentgym.sandboxes.engine`; this module only parses options and prints. Docker is
imported when a command runs, so registering the commands costs nothing.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentgym.sandboxes.image import DEFAULT_IMAGE, build_image, build_lock, image_ready, recipe

app = typer.Typer(help="Docker sandboxes: build the base image, run or stop a private engine.",
                  no_args_is_help=True)


@app.command("build-image")
def build_image_cmd(
    name: Annotated[str, typer.Option(help="Image name to create.")] = DEFAULT_IMAGE,
    base: Annotated[str | None, typer.Option(
        "--from", help="Build FROM this Debian/Ubuntu image (needs a registry).")] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when up to date.")] = False,
) -> None:
    """Build the Python + git + pytest sandbox image locally (debootstrap, no registry)."""
    from agentgym.sandboxes.engine import client, engine_lease

    with engine_lease() as url:
        c = client(url)
        if not force and image_ready(c, name, base):
            typer.echo(f"{name} is up to date (recipe {recipe(base)}) in the engine at {url}")
            return
        with build_lock(c):
            build_image(c, name, base=base, log=typer.echo)
        typer.echo(f"{name} is ready in the engine at {url}")


@app.command()
def engine(
    stop: Annotated[bool, typer.Option(help="Stop the private engine instead.")] = False,
) -> None:
    """Start the private Docker engine (or say which engine is in use) and print DOCKER_HOST.

    An engine started here runs until ``--stop``, whatever later commands do.
    """
    from agentgym.sandboxes.engine import (
        default_root,
        find_engine,
        keep_engine,
        private_socket,
        start_engine,
        stop_engine,
    )

    if stop:
        typer.echo("stopped" if stop_engine() else "no private engine was running")
        return
    url = find_engine() or start_engine()
    if url == private_socket(default_root()):
        keep_engine()  # a later command's lease must not stop what the user started
    typer.echo(f"export DOCKER_HOST={url}")


@app.command("sweep")
def sweep_cmd() -> None:
    """Remove sandbox containers left behind by processes that are gone."""
    from agentgym.sandboxes.engine import client, find_engine, sweep

    url = find_engine()
    if url is None:
        typer.echo("no Docker engine is reachable")
        raise typer.Exit(1)
    typer.echo(f"removed {sweep(client(url))} leftover sandbox container(s)")
