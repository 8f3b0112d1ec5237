"""Validate and normalise 5-field cron text before the library evaluates it.

The evaluation (which minutes match) is cronsim's; this module only decides
*which text we accept* and explains refusals. That split exists because
cronsim deliberately accepts more than Vixie/Debian cron: a sixth seconds
field, ``L``, ``LW``, ``5L`` and ``MON#2``. Jobwarden promises standard
5-field cron (DESIGN section 6), so those are refused here with a message
saying why, instead of being silently honoured on one version and rejected on
the next. cronsim's own errors are terse ("Bad minute"); checking every token
here lets the message name the field, the token and the allowed range.

The normalised form (single spaces, names upper-cased, macros lower-cased) is
what gets stored, so two spellings of one schedule compare equal.
"""

from __future__ import annotations

import dataclasses
import re

from jobwarden.schedules import errors

__all__ = ["FIELDS", "MACROS", "normalise"]

#: The accepted shorthands and the 5-field expression each stands for.
MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_QUARTZ = "Quartz/Spring syntax is not standard 5-field cron and is not supported"


@dataclasses.dataclass(frozen=True)
class Field:
    """One of the five positions: its name, numeric range and symbolic names."""

    name: str
    low: int
    high: int
    names: dict[str, int]
    example: str

    @property
    def step_span(self) -> int:
        # Day-of-week accepts 7 as a second Sunday; steps count the 7 distinct days.
        return 7 if self.name == "day-of-week" else self.high - self.low + 1


FIELDS: tuple[Field, ...] = (
    Field("minute", 0, 59, {}, "0-59"),
    Field("hour", 0, 23, {}, "0-23"),
    Field("day-of-month", 1, 31, {}, "1-31"),
    Field("month", 1, 12, {n: i + 1 for i, n in enumerate(_MONTH_NAMES)}, "1-12 or JAN-DEC"),
    Field("day-of-week", 0, 7, {n: i for i, n in enumerate(_DAY_NAMES)}, "0-7 or SUN-SAT"),
)

_FIELD_LAYOUT = "minute hour day-of-month month day-of-week"
_WEEKDAY_NEAREST = re.compile(r"^([0-9]+|L)W$")
_LAST_WEEKDAY = re.compile(r"^([0-7]|SUN|MON|TUE|WED|THU|FRI|SAT)L$")


def normalise(text: str) -> str:
    """Return the canonical spelling of a cron expression, or raise ScheduleError."""
    stripped = text.strip()
    if not stripped:
        raise errors.ScheduleError("the cron expression is empty")
    if stripped.startswith("@"):
        return _macro(stripped)
    parts = stripped.split()
    if len(parts) == 6:
        raise errors.ScheduleError(
            f"cron expression {stripped!r} has 6 fields; expected 5 ({_FIELD_LAYOUT}). "
            "A seconds field (or a Quartz year field) is not supported: slots are whole "
            "minutes. For sub-minute schedules use an interval such as '30s'."
        )
    if len(parts) == 7:
        raise errors.ScheduleError(
            f"cron expression {stripped!r} has 7 fields (Quartz seconds and year); "
            f"expected 5 ({_FIELD_LAYOUT}). {_QUARTZ}."
        )
    if len(parts) != 5:
        raise errors.ScheduleError(
            f"cron expression {stripped!r} has {len(parts)} fields; expected 5 ({_FIELD_LAYOUT})"
        )
    return " ".join(_field(field, part.upper()) for field, part in zip(FIELDS, parts, strict=True))


def _macro(text: str) -> str:
    macro = text.lower()
    if macro in MACROS:
        return macro
    if macro == "@reboot":
        raise errors.ScheduleError(
            "'@reboot' has no time slots (it means 'when the cron daemon starts'); "
            "a schedule needs a cron expression or an interval"
        )
    if macro.startswith("@every"):
        raise errors.ScheduleError(
            f"{text!r} is an interval, not a cron expression: pass it as the interval "
            "(e.g. interval='5m') instead"
        )
    allowed = ", ".join(sorted(MACROS))
    raise errors.ScheduleError(f"unknown cron macro {text!r}; supported: {allowed}")


def _field(field: Field, text: str) -> str:
    if "?" in text:
        raise errors.ScheduleError(
            f"'?' in the {field.name} field ({text!r}) is Quartz's 'no specific value'; "
            f"{_QUARTZ}. Use '*' instead."
        )
    for item in text.split(","):
        _item(field, item, text)
    return text


def _item(field: Field, item: str, whole: str) -> None:
    if not item:
        raise errors.ScheduleError(f"empty list element in the {field.name} field ({whole!r})")
    _refuse_quartz(field, item)
    base, slash, step = item.partition("/")
    if slash:
        _step(field, step, item)
    if base == "*":
        return
    start, dash, end = base.partition("-")
    low = _value(field, start, item)
    if dash:
        high = _value(field, end, item)
        if high < low:
            raise errors.ScheduleError(
                f"range {base!r} in the {field.name} field goes backwards; "
                "wrap-around ranges are not supported (use a list, e.g. '22-23,0-2')"
            )


def _refuse_quartz(field: Field, item: str) -> None:
    token = item.partition("/")[0]
    if "#" in item:
        raise errors.ScheduleError(
            f"{item!r} in the {field.name} field is Quartz's nth-weekday ('#'); {_QUARTZ}"
        )
    if token in ("L", "LW") or _WEEKDAY_NEAREST.match(token):
        raise errors.ScheduleError(
            f"{item!r} in the {field.name} field is Quartz's last-day/nearest-weekday "
            f"('L'/'W'); {_QUARTZ}"
        )
    if _LAST_WEEKDAY.match(token):
        raise errors.ScheduleError(
            f"{item!r} in the {field.name} field is Quartz's last-weekday-of-month ('L'); {_QUARTZ}"
        )


def _step(field: Field, step: str, item: str) -> None:
    if not step.isdigit() or "/" in step:
        raise errors.ScheduleError(
            f"bad step in {item!r} in the {field.name} field: the step must be a positive "
            "whole number, as in '*/15'"
        )
    value = int(step)
    if value == 0:
        raise errors.ScheduleError(f"step 0 in {item!r} in the {field.name} field never advances")
    if value >= field.step_span:
        raise errors.ScheduleError(
            f"step {value} in {item!r} in the {field.name} field is not smaller than the "
            f"field's {field.step_span} values ({field.example}), so it would match only "
            "its start; write that single value instead"
        )


def _value(field: Field, token: str, item: str) -> int:
    where = "" if token == item else f" in {item!r}"
    if not token:
        raise errors.ScheduleError(f"missing {field.name} value{where} ({field.example})")
    if token in field.names:
        return field.names[token]
    if token.isdigit():
        value = int(token)
        if field.low <= value <= field.high:
            return value
        raise errors.ScheduleError(
            f"{field.name} value {value}{where} is out of range ({field.example})"
        )
    raise errors.ScheduleError(f"{token!r}{where} is not a valid {field.name} ({field.example})")
