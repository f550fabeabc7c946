"""Advantage estimators, losses and the training loop (``pip install 'agentgym[train]'``)."""
