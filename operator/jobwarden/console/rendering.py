"""The Jinja2 environment: autoescaped templates from package data, and display helpers."""

from __future__ import annotations

import datetime
import importlib.resources
import json
from typing import Any

import jinja2


def age(seconds: float | None) -> str:
    """A short human duration: 42s, 7m, 3.5h, 2d."""
    if seconds is None:
        return "-"
    seconds = max(float(seconds), 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def when(value: datetime.datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def pretty(value: Any) -> str:
    """JSON for a <pre> block (escaped by the template like any other text)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def last_line(text: str | None, width: int = 80) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "\u2026"


def vendored_htmx() -> dict[str, Any]:
    """The manifest of the vendored htmx (``scripts/vendor-htmx`` writes it)."""
    text = importlib.resources.files("jobwarden.console").joinpath(
        "static/vendor/htmx/VENDORED.json").read_text(encoding="utf-8")
    manifest: dict[str, Any] = json.loads(text)
    return manifest


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jobwarden.console", "templates"),
        autoescape=True,  # every page and fragment: job data is text, never markup
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(age=age, when=when, pretty=pretty, last_line=last_line)
    # Live updates are htmx's hx-get + hx-trigger="every ...": the browser checks
    # the vendored file against the manifest's hash (Subresource Integrity).
    env.globals["htmx_integrity"] = vendored_htmx()["files"]["htmx.min.js"]
    return env
