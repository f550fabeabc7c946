from csvlite.reader import parse_line, parse_text

__all__ = ["parse_line", "parse_text"]
