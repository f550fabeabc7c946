"""``python -m agentgym.envs.miniwob``: list the MiniWoB++ tasks of the installed package."""

from .experts import SOLVERS
from .tasks import html_dir, package_version, task_names

names = task_names()
print(f"miniwob {package_version()}: {len(names)} tasks in {html_dir()}")
for name in names:
    print(f"  {name}{'  (scripted solver)' if name in SOLVERS else ''}")
print('make one with agentgym.make("miniwob/NAME-v0") or '
      'agentgym.make("miniwob/MiniWoB-v0", task=NAME)')
