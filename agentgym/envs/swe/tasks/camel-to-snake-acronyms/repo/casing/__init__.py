from casing.convert import camel_to_snake, snake_to_camel

__all__ = ["camel_to_snake", "snake_to_camel"]
