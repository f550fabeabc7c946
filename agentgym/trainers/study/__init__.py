"""The credit-assignment study: does step-level credit beat GRPO on multi-turn tasks?

SFT-warm SmolLM2, then RL with each estimator under one budget (``docs/learning.md``). Its
command line is ``benchmarks/credit_study.py``; this package is what the command runs:

- :mod:`.units`: a setup (``Setup``), its units of cached work and their keys;
- :mod:`.setups`: the study's setups per env and the GPU-scale budget;
- :mod:`.run`: each unit's work, as a subprocess of the CLI, and its result;
- :mod:`.page`, :mod:`.accumulation`: the page's lines, from the units' records;
- :mod:`.report`: the page, assembled per env.
"""
