"""URL query strings."""
from urllib.parse import unquote_plus


def build_query(params):
    return "&".join(f"{k}={v}" for k, v in params.items())


def parse_query(query):
    out = {}
    for pair in query.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            out[unquote_plus(key)] = unquote_plus(value)
    return out
