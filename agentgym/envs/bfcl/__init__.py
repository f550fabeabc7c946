"""BFCL (Berkeley Function Calling Leaderboard) on its own data, executor and checkers.

Registered as ``bfcl/SingleTurn-v0`` and ``bfcl/MultiTurn-v0``; ``category=`` picks the BFCL
category (see :data:`CATEGORIES`). Everything is read from the installed ``bfcl-eval``
package (``pip install 'agentgym[bfcl]'``); see ``docs/bfcl.md``.

Files: :mod:`.data` (categories, entries, splits), :mod:`.scoring` (BFCL's checkers and
executor), :mod:`.calls` (reading the model's calls), :mod:`.single_turn` and
:mod:`.multi_turn` (the envs, on the shared :mod:`.base`), :mod:`.fidelity` and
:mod:`.perturb` (the differential check against BFCL's own inference loop and eval runner).
"""

from agentgym.envs.bfcl.data import CATEGORIES, MULTI_TURN, SINGLE_TURN, Category, task_ids
from agentgym.envs.bfcl.multi_turn import BFCLMultiTurnEnv
from agentgym.envs.bfcl.single_turn import BFCLSingleTurnEnv

__all__ = ["CATEGORIES", "MULTI_TURN", "SINGLE_TURN", "BFCLMultiTurnEnv", "BFCLSingleTurnEnv",
           "Category", "task_ids"]
