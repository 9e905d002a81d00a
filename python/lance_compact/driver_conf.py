"""What the operator configured for the driver, read once when the engine starts.

These settings come from the SparkContext's own (static) configuration, which whoever starts
the driver sets (``--conf``, a properties file, the session builder) and which no SQL
statement can change (``SET`` writes a session's SQL configuration, not this):

- ``spark.sql.catalog.<catalog>.strategies.<name> = module.Class``: a custom planning
  strategy, chosen in SQL by ``<name>``. Nothing a SQL user names is imported otherwise.
- ``spark.lance.compact.picture.dir = /folder``: where ``describe_layout(picture => ...)``
  may write; without it the picture parameter is refused.
"""
from __future__ import annotations

import re
from typing import Iterable

PICTURE_DIR = "spark.lance.compact.picture.dir"
_STRATEGY_KEY = re.compile(r"spark\.sql\.catalog\.([^.]+)\.strategies\.([^.]+)")

_strategies: dict[str, dict[str, str]] = {}  # catalog -> strategy name -> module.Class
_picture_dir: str | None = None


def load(conf: Iterable[tuple[str, str]]) -> None:
    """Take the settings from the driver's static Spark configuration (engine start)."""
    global _picture_dir
    strategies: dict[str, dict[str, str]] = {}
    picture_dir = None
    for key, value in conf:
        m = _STRATEGY_KEY.fullmatch(key)
        if m and value.strip():
            strategies.setdefault(m.group(1), {})[m.group(2).lower()] = value.strip()
        elif key == PICTURE_DIR and value.strip():
            picture_dir = value.strip()
    _strategies.clear()
    _strategies.update(strategies)
    _picture_dir = picture_dir


def strategies(catalog: str | None) -> dict[str, str]:
    """Registered strategies (name -> ``module.Class``) of ``catalog``; of every catalog when
    the request does not say which (all of them were registered by the operator)."""
    if catalog is not None:
        return dict(_strategies.get(catalog, {}))
    merged: dict[str, str] = {}
    for registered in _strategies.values():
        merged.update(registered)
    return merged


def picture_dir() -> str | None:
    """The folder describe_layout may draw pictures into, or None (pictures off)."""
    return _picture_dir
