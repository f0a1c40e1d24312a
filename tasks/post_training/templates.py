"""Record templates: ``"Review: {text}\nSentiment:"`` names the fields it reads and is filled from a record, with
renamed values (``{label: {'0': negative}}``). A leaf module."""

from __future__ import annotations

import string
from typing import Any


def template_fields(template: str) -> list[str]:
    """The record fields a template reads (``"Review: {text}"`` -> ["text"]); a ValueError for a bad template."""
    try:
        names = [name for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"template {template!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
    for name in names:
        if not name.isidentifier():
            raise ValueError(f"template {template!r}: {{{name}}} is not a field name")
    return names


def render(template: str, record: dict[str, Any], values: dict[str, dict[str, str]]) -> str:
    """A template filled from a record's fields, renamed values first (``values``)."""
    filled = {}
    for name in template_fields(template):
        value = record.get(name)
        if value is None:
            raise KeyError(name)
        value = str(value)
        filled[name] = values.get(name, {}).get(value, value)
    return template.format(**filled)

