"""The version-retention check: no cleanup removes a version younger than the operator's floor.

A reader or writer still on an old version (a long query, a job that planned at that version)
finds its files gone once cleanup removes it. Delta refuses a VACUUM that keeps less than 168
hours unless the operator turns its check off (``retentionDurationCheck.enabled=false``); here
the operator's static driver setting ``spark.lance.compact.cleanup.versionMinAge`` (default
'7 days'; '0s' turns the check off; read once when the engine starts, so a SQL ``SET`` cannot
move it, :mod:`driver_conf`) is the youngest a version may be for ``cleanup``, ``maintain``,
``maintain_warehouse`` (and so the service and the streaming helpers) or a table's policy to
remove it. A request below it is refused before anything runs, naming the setting and its
value: the table is left as it was.

``cleanup`` and ``maintain`` share one default ``older_than`` (parameters.json's maintain
default, '7 days'); a floor the operator set higher raises the default to the floor, so a
call that names no ``older_than`` is never refused.
"""
from __future__ import annotations

from datetime import timedelta
from functools import lru_cache
from typing import Any

from ..errors import CompactionError
from ..options import spec
from ..runtime import driver_conf, durations

DEFAULT_FLOOR = "7 days"


@lru_cache(maxsize=None)
def _spec_default() -> str:
    return next(o["default"] for o in spec()["maintain_parameters"] if o["name"] == "older_than")


def version_floor() -> tuple[timedelta, str]:
    """The operator's floor (driver setting :data:`driver_conf.VERSION_FLOOR`): (the duration,
    its text as set). A setting that is no duration refuses every cleanup until corrected."""
    text = driver_conf.version_floor()
    if text is None:
        return durations.duration(DEFAULT_FLOOR, "default"), DEFAULT_FLOOR
    try:
        return durations.duration(text, f"the driver setting {driver_conf.VERSION_FLOOR}"), text.strip()
    except CompactionError as e:
        raise CompactionError(f"{e.message}: the operator corrects it in the driver's configuration "
                              "(read when the driver starts); no version is removed until then") from None


def default_older_than() -> str:
    """``older_than`` when a cleanup names none: '7 days' (cleanup's and maintain's), or the
    operator's floor when that is longer."""
    default = _spec_default()
    floor, floor_text = version_floor()
    return floor_text if floor > durations.duration(default, "older_than") else default


def check_older_than(value: Any, table: str, name: str = "older_than") -> timedelta:
    """``value`` (a duration or a moment, :func:`durations.age`) as an age, refused when it is
    below the version floor: the error names the table, ``name``, the setting and its value."""
    age = durations.age(value, f"table {table}: {name}")
    floor, floor_text = version_floor()
    if age < floor:
        raise CompactionError(
            f"table {table}: {name} {durations.shown(value)} is below the version retention floor "
            f"{floor_text!r} (the operator's driver setting {driver_conf.VERSION_FLOOR}): a reader or "
            "writer still on a version that young would find its files gone, so no cleanup removes "
            f"one; nothing was removed or changed. Name an older_than of at least {floor_text!r}, or the "
            f"operator sets {driver_conf.VERSION_FLOOR} lower in the driver's configuration ('0s' turns "
            "the check off, as Delta's retentionDurationCheck.enabled=false); a SQL SET cannot")
    return age
