"""Rollout engines beyond the embedded asyncio one (``agentgym.rollout.run_groups``).

- :mod:`agentgym.engines.ray_engine` — env workers and generation workers as Ray actors
  (``pip install 'agentgym[ray]'``), with the same ``run_groups`` API.
- :mod:`agentgym.engines.versioned` — records the policy version of every sampled step.
- :mod:`agentgym.engines.config` — the Ray engine's settings (the ``ray`` section of a
  training config).

Nothing here is imported by ``import agentgym``; Ray is imported only when an engine starts.
"""
