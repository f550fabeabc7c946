"""A tiny CSV reader."""


def parse_line(line):
    """The fields of one CSV line."""
    return line.rstrip("\r\n").split(",")


def parse_text(text):
    """Rows of fields, one per non-empty line."""
    return [parse_line(line) for line in text.splitlines() if line.strip()]
