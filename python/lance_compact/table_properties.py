"""``ALTER TABLE ... SET / UNSET TBLPROPERTIES``: the table's maintenance settings, written
into the Lance table's own config (``update_config``) in one commit, so every Lance reader
and writer sees them and nothing else must be kept in sync.

Keys accepted:

* ``lance_compact.maintain.<key>``: the maintenance policy (policy.py), checked with the
  key's type;
* ``lance.compaction.<option>``: Lance's own compaction defaults (Lance applies them to every
  compaction of the table), limited to the compaction options of parameters.json that Lance
  reads from the config (pylance 14.0.2 reads all but ``num_threads`` and
  ``excluded_fragment_ids``: checked by storing an invalid value and compacting), with their
  types. Lance fails every compaction of a table whose ``lance.compaction.*`` value it cannot
  parse, so checking before writing matters.

Any other key is refused: the catalog maintains tables and does not set what other Lance
features or writers read from the config (a typo would otherwise be stored and silently
ignored). UNSET also takes any key under the two prefixes, so a key another tool wrote
there can be removed. A refused change writes nothing (the version is unchanged).
"""
from __future__ import annotations

import json
from typing import Any

from .errors import CompactionError
from .options import OptionSpec, convert_value, option_specs
from .policy import LANCE_COMPACTION_PREFIX, PROPERTY_PREFIX, policy_specs
from .tables import open_dataset


# Compaction options Lance does not read from the table's config.
NOT_LANCE_CONFIG = frozenset({"num_threads", "excluded_fragment_ids"})


def lance_config_specs() -> dict[str, OptionSpec]:
    """The ``lance.compaction.<option>`` keys accepted (option -> spec)."""
    return {k: o for k, o in option_specs().items() if k not in NOT_LANCE_CONFIG}


def valid_keys() -> list[str]:
    return ([PROPERTY_PREFIX + k for k in sorted(policy_specs())]
            + [LANCE_COMPACTION_PREFIX + k for k in sorted(lance_config_specs())])


def _spec(key: str) -> OptionSpec | None:
    k = key.strip().lower()
    if k.startswith(PROPERTY_PREFIX):
        return policy_specs().get(k[len(PROPERTY_PREFIX):])
    if k.startswith(LANCE_COMPACTION_PREFIX):
        return lance_config_specs().get(k[len(LANCE_COMPACTION_PREFIX):])
    return None


def _refuse(table: str, what: str) -> CompactionError:
    return CompactionError(f"table {table}: {what}; this catalog stores maintenance settings only, "
                           f"valid keys are: {', '.join(valid_keys())}")


def checked_changes(table: str, set_: dict[str, Any], unset: list[str]) -> dict[str, str | None]:
    """The config update (key -> text, None to remove) for the change, every key and value
    checked first."""
    update: dict[str, str | None] = {}
    for key, value in set_.items():
        o = _spec(key)
        if o is None:
            raise _refuse(table, f"cannot set table property {key!r}")
        name = key.strip().lower()
        try:
            v = convert_value(o, value, table)
        except CompactionError as e:
            raise CompactionError(e.message.replace(f"option {o.name}", f"table property {name}", 1)) from None
        if name == PROPERTY_PREFIX + "older_than":
            from .version_cleanup import parse_older_than
            try:
                parse_older_than(v, table)
            except CompactionError as e:
                raise CompactionError(f"table {table}: table property {name} "
                                      f"{e.message.split('older_than ', 1)[1]}") from None
        update[name] = str(v).lower() if isinstance(v, bool) else str(v)
    for key in unset:
        name = key.strip().lower()
        if not name.startswith((PROPERTY_PREFIX, LANCE_COMPACTION_PREFIX)):
            raise _refuse(table, f"cannot unset table property {key!r}")
        if name in update:
            raise CompactionError(f"table {table}: table property {name} is both set and unset")
        update[name] = None
    return update


def alter_properties(request_json: str) -> tuple[str, list[tuple]]:
    """Serve ``{"table", "uri", "storage_options", "set": {key: text}, "unset": [key]}``: one
    commit of the table's config; answers the table's config after it, a row per key."""
    raw = json.loads(request_json)
    table = raw.get("table") or raw["uri"]
    ds = open_dataset(table, raw["uri"], raw.get("storage_options"))
    update = checked_changes(table, dict(raw.get("set") or {}), list(raw.get("unset") or []))
    config = ds.config() or {}
    # UNSET of a key that is not there is no change; an empty update makes no version.
    update = {k: v for k, v in update.items() if v is not None or k in config}
    if update:
        ds.update_config(update)
        ds = open_dataset(table, raw["uri"], raw.get("storage_options"))
    return "`key` STRING, `value` STRING", sorted((ds.config() or {}).items())
