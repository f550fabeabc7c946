"""Evaluation: suites, ``agentgym eval``, pass@k / avg@k, reports, compare, trajectory viewer.

    >>> from agentgym.evaluation import get_suite
    >>> [e.name for e in get_suite("arithmetic").entries]
    ['arithmetic', 'mental-math']

Plots need matplotlib (``pip install 'agentgym[eval]'``); it is imported only when a report
is written.
"""

from agentgym.evaluation.metrics import summarize, summarize_by_entry
from agentgym.evaluation.passk import mean_avg_at_k, mean_pass_at_k, pass_at_k
from agentgym.evaluation.runner import EvalConfig, evaluate, run_suite
from agentgym.evaluation.suites import (
    Suite,
    SuiteEntry,
    get_suite,
    load_suite_file,
    register_suite,
    suite_names,
)

__all__ = [
    "EvalConfig", "Suite", "SuiteEntry", "evaluate", "get_suite", "load_suite_file",
    "mean_avg_at_k", "mean_pass_at_k", "pass_at_k", "register_suite", "run_suite",
    "suite_names", "summarize", "summarize_by_entry",
]
