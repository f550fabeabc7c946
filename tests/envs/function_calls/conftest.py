import pytest

pytest.importorskip("bfcl_eval", reason="install agentgym[bfcl] and bfcl-eval (see docs/bfcl.md)")
