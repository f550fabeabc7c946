from settings.merge import deep_merge

__all__ = ["deep_merge"]
