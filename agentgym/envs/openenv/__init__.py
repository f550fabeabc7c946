"""OpenEnv both ways: agentgym envs as OpenEnv servers, OpenEnv servers as agentgym envs.

- ``agentgym openenv serve ENV_ID`` (:mod:`.server`): any registered env behind
  openenv-core's own server, for TRL, SkyRL, Unsloth and any OpenEnv client.
- ``agentgym.make("openenv:http://HOST:PORT")`` (:class:`OpenEnvEnv`): any OpenEnv server as
  an agentgym env, for ``rollout``, ``eval`` and ``train``.

Needs ``pip install 'agentgym[openenv]'``. See docs/openenv.md.
"""

from agentgym.envs.openenv.env import ACT_TOOL, OpenEnvEnv, OpenEnvFault

__all__ = ["ACT_TOOL", "OpenEnvEnv", "OpenEnvFault"]
