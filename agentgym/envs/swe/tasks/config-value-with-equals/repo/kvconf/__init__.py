from kvconf.parser import loads

__all__ = ["loads"]
