from rpn.calc import evaluate

__all__ = ["evaluate"]
