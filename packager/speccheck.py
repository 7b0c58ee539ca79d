"""Release-spec checks the schema cannot word well: pattern failures in the schema's own words, and links."""

from __future__ import annotations

from typing import Any

from .errors import SpecError, shorten


def message(error: Any) -> str:
    """The validator's message, or the schema's own words for a broken pattern; long values cut short."""
    problem = error.schema.get("x-problem") if isinstance(error.schema, dict) else None
    if error.validator == "pattern" and problem:
        return f"{shorten(repr(error.instance), 80)} {problem}"
    if error.validator == "maxLength":
        return f"{shorten(repr(error.instance), 80)} is longer than {error.validator_value} characters"
    return error.message


def check_links(links: dict[str, str], where: str) -> None:
    """Each link is an http(s) URL with a host, and without a user name or password (the card is public)."""
    from urllib.parse import urlsplit

    for name, url in links.items():
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(f"{where}: card.links.{name}: {shorten(url, 80)} is not an http:// or https:// URL "
                            "with a host")
        if parts.username is not None or parts.password is not None:
            raise SpecError(f"{where}: card.links.{name}: the URL carries a user name or password; the card is "
                            "public, so give the link without them")
