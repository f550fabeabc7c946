"""Example plug-ins: each is the one file a new generation backend needs."""
