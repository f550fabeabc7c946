"""Mining SWE tasks from real packages (``agentgym swe mine``; see ``docs/swe.md``).

Bugs are injected into a package's own source, kept when its own tests catch them, and
written out as SWE-bench instances that ``agentgym/SWE-v0`` runs in the package's image.
"""
