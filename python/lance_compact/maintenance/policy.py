"""A table's maintenance policy: whether and how it is maintained, from where users keep it.

Keys (parameters.json ``policy_keys`` plus the thresholds of ``maintain_parameters``, not the
call's own :data:`CALL_ONLY`): ``enabled``, ``priority``, ``target_rows_per_fragment``,
``min_small_fragments``, ``min_unindexed_fragments``, ``older_than``, ``retain_versions``,
``max_rewrite_bytes`` (formerly ``max_bytes``: a key's former names, parameters.json's
``aliases``, are still read for one release, in every place below).

Each key is resolved, first found wins:

1. ``call``: an argument of the CALL (``maintain``, ``maintain_warehouse``);
2. ``table``: the table's own config (Lance's ``update_config``, what ``ALTER TABLE ... SET
   TBLPROPERTIES`` writes), key ``lance_compact.maintain.<key>``; for
   ``target_rows_per_fragment`` then Lance's own ``lance.compaction.target_rows_per_fragment``
   (the table's setting is more specific than any catalog-wide one);
3. ``catalog``: the catalog's settings ``spark.sql.catalog.<catalog>.maintain.<key>`` (the
   JVM sends them in the request field ``maintain_settings``);
4. ``default``: parameters.json's default (for ``target_rows_per_fragment`` Lance's 1,048,576).

Every value is checked and converted with the key's type; an error names the table, the key
and where the value came from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from .retention import check_older_than, default_older_than
from ..errors import CompactionError
from ..options import OptionSpec, canonical, convert_value, former_name, make_spec, option_specs, spec
from ..runtime.envelope import DEFAULT_CATALOG

PROPERTY_PREFIX = "lance_compact.maintain."
LANCE_COMPACTION_PREFIX = "lance.compaction."
SOURCES = ("call", "table", "catalog", "default")
# maintain's parameters that belong to one call, never to a table's policy.
CALL_ONLY = ("dry_run", "sort_order", "fail_on_error")


@lru_cache(maxsize=None)
def policy_specs() -> dict[str, OptionSpec]:
    """Every policy key with its type and range (name -> spec)."""
    rows = list(spec()["policy_keys"]) + [o for o in spec()["maintain_parameters"] if o["name"] not in CALL_ONLY]
    return {o["name"]: make_spec(o) for o in rows}


def policy_key(key: str) -> str:
    """The policy key ``key`` names: itself, or the key it is a former name of."""
    return canonical(key, policy_specs())


@lru_cache(maxsize=None)
def policy_defaults() -> dict[str, Any]:
    """Defaults of the keys that have one (the others are unset: Lance's or maintain's own)."""
    rows = list(spec()["policy_keys"]) + list(spec()["maintain_parameters"])
    out = {o["name"]: o["default"] for o in rows if o.get("default") is not None and o["name"] in policy_specs()}
    out["target_rows_per_fragment"] = option_specs()["target_rows_per_fragment"].lance_default
    return out


@dataclass(frozen=True)
class Policy:
    """A table's resolved policy: ``values`` (key -> typed value; unset keys absent) and
    ``sources`` (key -> call | table | catalog | default)."""

    table: str
    values: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)  # key -> e.g. "table property lance_compact.maintain.<key>"

    def get(self, key: str, default: Any = None) -> Any:
        if key not in policy_specs():
            raise KeyError(f"no policy key {key!r}; keys are {', '.join(sorted(policy_specs()))}")
        return self.values.get(key, default)

    def source(self, key: str) -> str | None:
        """Where the key's value came from: call, table, catalog, default (None: unset)."""
        return self.sources.get(key)

    def origin(self, key: str) -> str | None:
        """Where the key's value came from, in words: "parameter <key>", "table property
        <property>", "catalog setting <setting>" (None: unset or the default)."""
        return self.origins.get(key)

    @property
    def enabled(self) -> bool:
        return bool(self.values.get("enabled", True))

    @property
    def priority(self) -> int:
        return int(self.values.get("priority", 0))

    def maintain_args(self) -> dict[str, Any]:
        """The thresholds as ``maintain`` takes them (keys of maintain_parameters that are set)."""
        names = {o["name"] for o in spec()["maintain_parameters"]}
        return {k: v for k, v in self.values.items() if k in names}


def check_policy_value(table: str, key: str, value: Any, where: str) -> Any:
    """``value`` of policy key ``key`` checked and converted (its type, range, and for
    ``older_than`` a duration or moment cleanup accepts, not below the operator's version
    floor, retention.py); an error names the table and ``where`` (e.g.
    "table property lance_compact.maintain.priority")."""
    return _convert(table, key, value, where)


def _convert(table: str, key: str, value: Any, where: str) -> Any:
    o = policy_specs()[key]
    try:
        v = convert_value(o, value, table)
    except CompactionError as e:
        raise CompactionError(e.message.replace(f"option {key}", where, 1)) from None
    if key == "older_than":
        try:
            check_older_than(v, table)
        except CompactionError as e:
            raise CompactionError(f"table {table}: {where} {e.message.split('older_than ', 1)[1]}") from None
    return v


def _ours(mapping: Mapping[str, str] | None, prefix: str, table: str, where: str,
          shown: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """The policy keys of ``mapping`` (keys under ``prefix``, a former name read as its key)
    and, for each, the key as it was written; an unknown key is refused, and so is a key
    written under its name and a former name at once."""
    out: dict[str, str] = {}
    written: dict[str, str] = {}
    for k, v in (mapping or {}).items():
        if not k.lower().startswith(prefix):
            continue
        given = k[len(prefix):].strip().lower()
        key = policy_key(given)
        if key not in policy_specs():
            raise CompactionError(f"table {table}: unknown {where} {shown}{k}; valid keys are: "
                                  + ", ".join(shown + prefix + n for n in sorted(policy_specs())))
        if v is None:
            continue
        if key in out:
            former = shown + prefix + (given if given != key else written[key])
            raise CompactionError(f"table {table}: {where} {shown}{prefix}{key} is set twice, also under its "
                                  f"former name {former}: remove {former}")
        if given != key:
            former_name(where, shown + prefix + given, shown + prefix + key)
        out[key], written[key] = v, given
    return out, written


def resolve_policy(call_args: Mapping[str, Any] | None, table_config: Mapping[str, str] | None,
                   catalog_settings: Mapping[str, str] | None, table: str,
                   catalog: str = DEFAULT_CATALOG) -> Policy:
    """The policy of ``table``: call arguments, then its config keys
    ``lance_compact.maintain.<key>`` (and Lance's ``lance.compaction.target_rows_per_fragment``),
    then the catalog's ``maintain.<key>`` settings (``catalog_settings``: key -> text, the key
    with or without the ``maintain.`` prefix), then defaults. Call arguments that are not
    policy keys (``dry_run``, a procedure's own) are ignored here."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    table_keys, table_names = _ours(table_config, PROPERTY_PREFIX, table, "table property")
    origins: dict[str, str] = {}
    catalog_keys = {}
    for k, v in (catalog_settings or {}).items():
        bare = k[len("maintain."):] if k.lower().startswith("maintain.") else k
        catalog_keys[f"maintain.{bare}"] = v
    catalog_keys, catalog_names = _ours(catalog_keys, "maintain.", table, "catalog setting",
                                        f"spark.sql.catalog.{catalog}.")
    lance_target = (table_config or {}).get(LANCE_COMPACTION_PREFIX + "target_rows_per_fragment")
    defaults = policy_defaults()
    for key in policy_specs():
        given = (call_args or {}).get(key)
        if given is not None:
            origins[key] = f"parameter {key}"
            values[key], sources[key] = _convert(table, key, given, origins[key]), "call"
        elif key in table_keys:
            origins[key] = f"table property {PROPERTY_PREFIX}{table_names[key]}"
            values[key] = _convert(table, key, table_keys[key], origins[key])
            sources[key] = "table"
        elif key == "target_rows_per_fragment" and lance_target is not None:
            origins[key] = f"table property {LANCE_COMPACTION_PREFIX}target_rows_per_fragment"
            values[key] = _convert(table, key, lance_target, origins[key])
            sources[key] = "table"
        elif key in catalog_keys:
            origins[key] = f"catalog setting spark.sql.catalog.{catalog}.maintain.{catalog_names[key]}"
            values[key] = _convert(table, key, catalog_keys[key], origins[key])
            sources[key] = "catalog"
        elif key in defaults:
            # older_than: cleanup's and maintain's one default, or the operator's higher floor
            values[key] = default_older_than() if key == "older_than" else defaults[key]
            sources[key] = "default"
    return Policy(table=table, values=values, sources=sources, origins=origins)
