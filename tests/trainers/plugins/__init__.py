"""Example plug-ins: each is the one file a new estimator or backend needs."""
