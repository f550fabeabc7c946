"""``agentgym openenv serve ENV_ID``: a registered env as an OpenEnv server."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from agentgym.errors import ConfigError, MissingExtraError

app = typer.Typer(help="OpenEnv: serve agentgym envs to OpenEnv clients (TRL, SkyRL, ...).",
                  no_args_is_help=True, add_completion=False)
console = Console()


@app.command()
def serve(
    env_id: Annotated[str, typer.Argument(help="A registered env id.")],
    kw: Annotated[list[str] | None, typer.Option(
        "--kw", help="Env keyword argument as key=value (YAML value); repeatable.")] = None,
    host: Annotated[str, typer.Option(
        help="Interface to bind; 0.0.0.0 exposes the server to the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8000,
    max_sessions: Annotated[int, typer.Option(
        help="Most episodes (WebSocket sessions) at once.")] = 64,
) -> None:
    """Serve ENV_ID through openenv-core's server: one env per WebSocket session.

    Clients: openenv-core's ``GenericEnvClient`` (send ``{"content": "..."}`` as the action),
    TRL's OpenEnv recipes, or ``agentgym rollout openenv:http://HOST:PORT``. Ctrl-C stops.
    """
    import yaml

    kwargs = {}
    for pair in kw or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kw: expected key=value, got {pair!r}")
        try:
            kwargs[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--kw: the value of {pair!r} is not valid YAML; quote it as a "
                              "string (key='text')") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {port}")
    if max_sessions < 1:
        raise ConfigError(f"--max-sessions must be >= 1, got {max_sessions}")
    try:
        from agentgym.envs.openenv.server import bind, build_app, check_env
        from agentgym.envs.openenv.server import serve as run
    except ImportError as exc:
        raise MissingExtraError("openenv-core", "openenv", "agentgym openenv serve") from exc
    check_env(env_id, kwargs)  # a bad id or kwargs: one error line, before the server starts
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick "
                          "another --port (0 picks a free one) or --host") from None
    application = build_app(env_id, kwargs, max_sessions=max_sessions)

    def ready(url: str) -> None:
        console.print(f"serving [bold]{env_id}[/bold] over OpenEnv at [cyan]{url}[/cyan] "
                      "(Ctrl-C stops)", soft_wrap=True)
        console.print(f"[dim]try: agentgym rollout openenv:{url} --policy random[/dim]",
                      soft_wrap=True)

    try:
        asyncio.run(run(application, sock, on_ready=ready))
    except KeyboardInterrupt:
        console.print("stopped")
