"""Every problem of a parsed release spec: its schema's, in the schema's own words (x-problem), the placeholders
`packager init` leaves, the training figures' rules, and the links' URLs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import resources
from ..errors import control_character, printable, shorten

TODO = "TODO"  # `packager init` writes what only a person knows as "TODO: ..."; the schema refuses it


@dataclass(frozen=True)
class SpecProblem:
    path: tuple[str | int, ...]  # where in the spec, e.g. ("release", "title"); () for the top level
    message: str
    placeholder: bool = False  # a TODO that packager init wrote is still there

    @property
    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path) or "(top level)"


def problems(data: dict[str, Any]) -> list[SpecProblem]:
    """Every schema violation, broken figure rule and unusable link of a parsed spec, by the order of paths."""
    validator = resources.validator("release")
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    found = [SpecProblem(tuple(e.absolute_path), _message(e), _placeholder(e)) for e in errors]
    todo = {p.path for p in found if p.placeholder}  # a TODO also fails the field's own rules: say it once
    found = [p for p in found if p.placeholder or p.path not in todo]
    if not any(p.path[:1] == ("training",) for p in found):  # the figure rules need well-typed figures
        found += _training_problems(data.get("training"))
    return found + _link_problems(data.get("card"), found) + _renamed_twice(data) + control_characters(data, found)


# The tables whose text reaches the card (README.md) or the bundle's runtime_config.json; [convert] and [verify]
# hold paths and figures, which reach only the terminal (escaped there, see errors.printable).
CARD_TABLES = ("release", "model", "training", "pairing", "benchmarks", "credits", "card", "runtime")


def control_characters(data: dict[str, Any], found: Sequence[SpecProblem] = ()) -> list[SpecProblem]:
    """Text of the card's tables holding a character plain text must not (errors.control_character: ESC, BEL, a
    line separator); a field already refused in `found` is said once."""
    refused = {p.path for p in found}
    problems: list[SpecProblem] = []

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*path, index))
        elif isinstance(node, str) and path not in refused and (bad := control_character(node)) is not None:
            problems.append(SpecProblem(path, f"holds the control character {printable(bad)}: card text is plain text"))

    for table in CARD_TABLES:
        walk(data.get(table), (table,))
    return problems


def _renamed_twice(data: dict[str, Any]) -> list[SpecProblem]:
    """A key given under its old and its new name: which one counts would be a guess."""
    convert = data.get("convert")
    if isinstance(convert, dict) and "source" in convert and "checkpoint" in convert:
        return [SpecProblem(("convert", "source"), "is the old name of checkpoint: keep checkpoint only")]
    return []


def _link_problems(card: Any, found: list[SpecProblem]) -> list[SpecProblem]:
    """The URL rules of [card] links the schema's pattern cannot say, for the links whose form it passed."""
    links = card.get("links") if isinstance(card, dict) else None
    if not isinstance(links, dict):
        return []
    refused = {p.path[2] for p in found if p.path[:2] == ("card", "links") and len(p.path) > 2}
    return [
        SpecProblem(("card", "links", name), said)
        for name, url in links.items()
        if name not in refused and isinstance(url, str) and (said := _url_problem(url))
    ]


def _placeholder(error: Any) -> bool:
    return isinstance(error.instance, str) and error.instance.startswith(TODO) and error.validator == "not"


def _message(error: Any) -> str:
    if _placeholder(error):
        return f"still the placeholder {shorten(repr(error.instance))}: fill in what only you know"
    return message(error)


def _training_problems(training: dict[str, Any] | None) -> list[SpecProblem]:
    if not training:
        return []
    found = []
    parts = [training.get(k) for k in ("samples", "batch_size", "grad_accum", "epochs")]
    steps = training.get("optimizer_steps")
    if steps is not None and None not in parts:
        samples, batch, accum, epochs = (p for p in parts if p is not None)
        expected = math.ceil(samples / (batch * accum)) * epochs
        if steps != expected:
            found.append(
                SpecProblem(
                    ("training", "optimizer_steps"),
                    f"{steps} != ceil(samples / (batch_size x grad_accum)) x epochs = {expected}",
                )
            )
    if (
        training.get("loss_kl") is not None
        and training.get("loss_ce") is not None
        and abs(training["loss_kl"] + training["loss_ce"] - 1) > 1e-9
    ):
        found.append(
            SpecProblem(
                ("training", "loss_ce"),
                f"loss_kl + loss_ce must be 1, they add up to {training['loss_kl'] + training['loss_ce']:g}",
            )
        )
    return found


def message(error: Any) -> str:
    """The validator's message, or the schema's own words for a broken pattern; long values cut short."""
    problem = error.schema.get("x-problem") if isinstance(error.schema, dict) else None
    if error.validator == "pattern" and problem:
        return f"{shorten(repr(error.instance), 80)} {problem}"
    if error.validator == "maxLength":
        return f"{shorten(repr(error.instance), 80)} is longer than {error.validator_value} characters"
    return error.message


def _url_problem(url: str) -> str | None:
    """What is wrong with a link: not an http(s) URL with a host, or one carrying a user name or password (the
    card is public); None if nothing."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shorten(url, 80)} is not an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "the URL carries a user name or password; the card is public, so give the link without them"
    return None
