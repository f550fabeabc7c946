"""Execution sandboxes (Docker containers and a local process sandbox)."""
