"""Reverse Polish notation."""
import operator

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def evaluate(expression):
    stack = []
    for token in expression.split():
        if token in _OPS:
            if len(stack) < 2:
                raise ValueError(f"{token!r} needs two operands")
            a = stack.pop()
            b = stack.pop()
            stack.append(_OPS[token](a, b))
        else:
            stack.append(float(token))
    if len(stack) != 1:
        raise ValueError("expression does not reduce to one value")
    return stack[0]
