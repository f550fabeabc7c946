"""The sandbox contract shared by the Docker sandbox and the local process sandbox.

A sandbox is one isolated working machine for one episode: run commands, move files in and
out, see what changed. Envs hold a sandbox for an episode and release it with ``aclose``;
pools own reuse, so an env never sees state left by another episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentgym.errors import AgentGymError


class SandboxError(AgentGymError, RuntimeError):
    """The sandbox itself failed (engine down, container died): an infrastructure fault.

    Envs let it propagate so the rollout engine records an ``status="error"`` trajectory;
    a command that merely fails is an ``ExecResult`` with a non-zero exit code, not this.
    """


@dataclass(frozen=True)
class ExecResult:
    """What one command did. Output is decoded UTF-8 (errors replaced) and capped."""

    exit_code: int
    """The command's exit status; -1 when it was killed on timeout."""
    stdout: str
    stderr: str
    timed_out: bool = False
    """True when the command ran past its timeout and its process group was killed."""
    truncated: bool = False
    """True when stdout or stderr was cut to the sandbox's output cap, or (local sandbox) a
    pipe was still held open by a process it could not kill when the call let it go."""

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out


@runtime_checkable
class Sandbox(Protocol):
    """One isolated working machine. All paths are inside the sandbox unless named ``host_``."""

    async def exec(self, cmd: str, *, timeout: float = 60.0,  # noqa: ASYNC109 (enforced inside)
                   workdir: str | None = None, env: dict[str, str] | None = None) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` semantics; the timeout kills its whole process group.

        Args:
            cmd: The command line.
            timeout: Seconds before the command's process group is killed.
            workdir: Directory to run in (default: the sandbox's working directory).
            env: Extra environment variables.
        """
        ...

    async def write_file(self, path: str, content: str | bytes) -> None:
        """Create or replace the file at ``path`` (parent directories made as needed)."""
        ...

    async def read_file(self, path: str) -> bytes:
        """The file's bytes; raises ``FileNotFoundError`` when it does not exist."""
        ...

    async def copy_in(self, host_path: str, path: str) -> None:
        """Copy a host file or directory tree to ``path`` in the sandbox."""
        ...

    async def copy_out(self, path: str, host_path: str) -> None:
        """Copy a sandbox file or directory tree to ``host_path`` on the host."""
        ...

    async def diff(self, workdir: str | None = None) -> str:
        """``git diff`` of the working tree (untracked files included) at ``workdir``."""
        ...

    async def aclose(self) -> None:
        """Release the sandbox (remove the container / kill the processes). Idempotent."""
        ...


# ``git diff`` of the working tree with untracked files, through a throwaway index so the
# agent's own staging is left alone. `cp -p` keeps the index's mtime, which git needs to
# spot "racily clean" files (rewritten within the same timestamp tick as the last commit).
DIFF_SCRIPT = (
    'tmp=$(mktemp) && trap \'rm -f "$tmp"\' EXIT && '
    '{ cp -p .git/index "$tmp" 2>/dev/null || true; } && '
    'GIT_INDEX_FILE="$tmp" git add -A . >/dev/null 2>&1 && '
    'GIT_INDEX_FILE="$tmp" git diff --cached --binary --no-color --no-ext-diff HEAD'
)


async def git_diff(sandbox: Sandbox, workdir: str) -> str:
    """``git diff`` of the working tree at ``workdir`` against HEAD, untracked files included.

    The one implementation behind every provider's ``diff``: it needs only ``exec``.

    Args:
        sandbox: The sandbox to run git in.
        workdir: The repository's directory inside the sandbox.

    Raises:
        SandboxError: git failed (not a repository, no HEAD, ...).
    """
    result = await sandbox.exec(DIFF_SCRIPT, timeout=60, workdir=workdir)
    if not result.ok:
        raise SandboxError(f"git diff failed in {workdir} (exit "
                           f"{result.exit_code}): {result.stderr.strip()[:500]}")
    return result.stdout
