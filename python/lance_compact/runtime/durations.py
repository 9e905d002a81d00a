"""Durations and moments, the one parser for every parameter, setting and flag that takes one.

Accepted, as text (a CALL's STRING argument, a table property, a catalog or driver setting, a
service flag, a PySpark helper's ``str``):

- ``<n> <unit>``, one or more, with or without a space: ``'7 days'``, ``'12 hours'``,
  ``'1 day 12 hours'``, ``'0.5 seconds'``, and the short forms ``'7d'``, ``'2h'``, ``'10m'``,
  ``'30s'`` (units: us/microsecond(s), ms/millisecond(s), s/sec/second(s),
  m/min/minute(s), h/hr/hour(s), d/day(s), w/week(s), mo/month(s), y/year(s)); an optional
  leading ``interval`` (Spark's legacy interval text, ``'interval 7 days'``);
- for a moment ("older than"): an ISO timestamp (``'2026-11-20 00:00:00'``, UTC unless it
  names its offset).

Spark's own types reach here as the canonical text the JVM binding makes of them
(``CompactionArguments.scala``): an INTERVAL DAY TO SECOND as ``'<n> days|hours|minutes|seconds'``,
an INTERVAL YEAR TO MONTH as ``'<n> months'``, a CALENDAR INTERVAL as ``'<m> months <d> days
<s> seconds'``, a TIMESTAMP (or TIMESTAMP_NTZ, in the session's time zone, as Spark casts one)
as an ISO instant ``'2026-11-20T00:00:00Z'``. Python's ``timedelta`` and ``datetime`` are taken
as they are.

Months and years are calendar months counted back from now (as Spark's ``timestamp -
INTERVAL 1 MONTH``). Nothing negative; nothing longer than :data:`MAX_DURATION` (100 years):
pylance panics on an ``older_than`` beyond about 262,000 years and Python's ``timedelta``
overflows sooner, so nothing that large ever reaches either. Errors name the parameter
(``what``) and the accepted forms.
"""
from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation

from ..errors import CompactionError

MAX_DURATION = timedelta(days=36500)  # 100 years: the longest duration or age accepted
MAX_TEXT = "'36500 days' (100 years)"
DURATION_FORMS = ("'<n> days|hours|minutes|seconds|weeks' (also '7d', '2h', '10m', '30s', "
                  "'1 day 12 hours') or an INTERVAL (INTERVAL 7 DAYS)")
MOMENT_FORMS = "a TIMESTAMP (TIMESTAMP '2026-11-20 00:00:00') or an ISO timestamp in the past"

_SECONDS = {"us": Decimal("0.000001"), "ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60),
            "h": Decimal(3600), "d": Decimal(86400), "w": Decimal(7 * 86400)}
_ALIASES = {
    "us": "us", "microsecond": "us", "microseconds": "us",
    "ms": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
    "w": "w", "week": "w", "weeks": "w",
    "mo": "mo", "month": "mo", "months": "mo",
    "y": "y", "year": "y", "years": "y",
}
_PART = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)")
_MAX_MONTHS = 1200


def shown(text: object) -> str:
    """``text`` quoted for a message, cut short when long."""
    text = str(text)
    return repr(text if len(text) <= 60 else text[:40] + "...")


def _months_back(now: datetime, months: int) -> datetime:
    """``now`` less ``months`` calendar months (the day clamped to the month's last)."""
    y, m = divmod(now.year * 12 + now.month - 1 - months, 12)
    return now.replace(year=y, month=m + 1, day=min(now.day, calendar.monthrange(y, m + 1)[1]))


def _parts(text: str) -> list[tuple[Decimal, str]] | None:
    """(number, unit) pairs of a duration's text, or None when it is not one."""
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval"):]
    parts, pos = [], 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None or m.group(2) not in _ALIASES:
            return None
        try:
            parts.append((Decimal(m.group(1)), _ALIASES[m.group(2)]))
        except InvalidOperation:
            return None
        pos = m.end()
        while pos < len(s) and s[pos] in " ,":
            pos += 1
    return parts or None


def _too_long(what: str, value: object) -> CompactionError:
    return CompactionError(f"{what} must be at most {MAX_TEXT}, got {shown(value)}")


def _of_parts(parts: list[tuple[Decimal, str]], what: str, value: object, now: datetime) -> timedelta:
    if any(n < 0 for n, _ in parts):
        raise CompactionError(f"{what} must not be negative, got {shown(value)}")
    limit = Decimal(int(MAX_DURATION.total_seconds()))
    months = sum((n * (12 if u == "y" else 1) for n, u in parts if u in ("mo", "y")), Decimal(0))
    # checked on the numbers first: a huge one is neither a timedelta nor a date
    if months > _MAX_MONTHS or sum((n * _SECONDS[u] for n, u in parts if u in _SECONDS), Decimal(0)) > limit:
        raise _too_long(what, value)
    if months != months.to_integral_value():
        raise CompactionError(f"{what} takes whole months and years, got {shown(value)}")
    seconds = sum((n * _SECONDS[u] for n, u in parts if u in _SECONDS), Decimal(0))
    total = (now - _months_back(now, int(months))) + timedelta(seconds=float(seconds))
    if total > MAX_DURATION:
        raise _too_long(what, value)
    return total


def parse_duration(value: object, what: str, *, bare_seconds: bool = False,
                   now: datetime | None = None) -> timedelta | None:
    """A duration (see the module's forms) as a ``timedelta``; None when ``value`` is not one.
    ``bare_seconds``: a plain number is seconds (the service's flags). Negative, fractional
    months or longer than :data:`MAX_DURATION`: a :class:`CompactionError` naming ``what``."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise CompactionError(f"{what} must not be negative, got {shown(value)}")
        if value > MAX_DURATION:
            raise _too_long(what, value)
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if bare_seconds and re.fullmatch(r"\d+(?:\.\d+)?", text):
        text += "s"
    parts = _parts(text)
    if parts is None:
        return None
    return _of_parts(parts, what, value, now or datetime.now(timezone.utc))


def duration(value: object, what: str, *, bare_seconds: bool = False) -> timedelta:
    """A duration, or a :class:`CompactionError` naming ``what`` and the accepted forms."""
    d = parse_duration(value, what, bare_seconds=bare_seconds)
    if d is None:
        raise CompactionError(f"{what} expects {DURATION_FORMS}, got {shown(value)}")
    return d


def seconds(value: object, what: str) -> float:
    """A duration in seconds; a plain number is seconds (flags such as the service's ``--every``)."""
    return duration(value, what, bare_seconds=True).total_seconds()


def age(value: object, what: str) -> timedelta:
    """How long ago: a duration, or a moment in the past (an ISO timestamp, a ``datetime``;
    without an offset it is UTC) as its age. A moment in the future or more than
    :data:`MAX_DURATION` back is refused."""
    now = datetime.now(timezone.utc)
    d = parse_duration(value, what, now=now)
    if d is not None:
        return d
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise CompactionError(f"{what} expects {DURATION_FORMS}, or {MOMENT_FORMS}; "
                                  f"got {shown(value)}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        ago = now - when
    except OverflowError:
        ago = MAX_DURATION * 2
    if ago < timedelta(0):
        raise CompactionError(f"{what} {shown(value)} is in the future: name a moment that has passed "
                              f"(or a duration, {DURATION_FORMS})")
    if ago > MAX_DURATION:
        raise CompactionError(f"{what} {shown(value)} is more than {MAX_TEXT} ago: the oldest moment "
                              "accepted is 100 years back")
    return ago


def text(d: timedelta) -> str:
    """``d`` as the largest whole unit that states it ('7 days', '90 minutes', '1.5 seconds')."""
    micros = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
        if micros % (size * 1_000_000) == 0:
            return f"{micros // (size * 1_000_000)} {unit}"
    return f"{Decimal(micros) / 1_000_000} seconds"
