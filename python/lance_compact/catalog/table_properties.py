"""``ALTER TABLE ... SET / UNSET TBLPROPERTIES``: the table's maintenance settings, written
into the Lance table's own config (``update_config``) in one commit, so every Lance reader
and writer sees them and nothing else must be kept in sync.

Keys accepted:

* ``lance_compact.maintain.<key>``: the maintenance policy (policy.py), checked with the
  key's type; a key's former name (parameters.json ``aliases``, accepted for one release) is
  written under the key's name, and the former one removed; UNSET of either removes both;
* ``lance.compaction.<option>``: Lance's own compaction defaults (Lance applies them to every
  compaction of the table), limited to the compaction options of parameters.json that Lance
  reads from the config (pylance 14.0.2 reads all but ``num_threads`` and
  ``excluded_fragment_ids``: checked by storing an invalid value and compacting), with their
  types. Lance fails every compaction of a table whose ``lance.compaction.*`` value it cannot
  parse, so checking before writing matters.

* ``lance_compact.cluster_by``: the table's clustering (compaction/clustering/table_clustering.py),
  checked against the schema; ``ALTER TABLE ... CLUSTER BY`` sets it too.

Any other key is refused: the catalog maintains tables and does not set what other Lance
features or writers read from the config (a typo would otherwise be stored and silently
ignored). UNSET also takes any key under the two prefixes, so a key another tool wrote
there can be removed. A refused change writes nothing (the version is unchanged).
"""
from __future__ import annotations

import re
import tempfile
from typing import Any

import lance

from ..errors import CompactionError
from ..options import OptionSpec, convert_value, option_specs
from ..runtime.failures import first_part
from ..runtime import commit_gate
from ..maintenance.policy import (LANCE_COMPACTION_PREFIX, PROPERTY_PREFIX, check_policy_value, policy_key,
                                  policy_specs)
from ..options import former_name
from ..compaction.clustering.table_clustering import CLUSTER_BY_PROPERTY, check_names, split_changes
from ..runtime.envelope import Envelope, Result


# Compaction options Lance does not read from the table's config.
NOT_LANCE_CONFIG = frozenset({"num_threads", "excluded_fragment_ids"})


def lance_config_specs() -> dict[str, OptionSpec]:
    """The ``lance.compaction.<option>`` keys accepted (option -> spec)."""
    return {k: o for k, o in option_specs().items() if k not in NOT_LANCE_CONFIG}


def valid_keys() -> list[str]:
    return ([PROPERTY_PREFIX + k for k in sorted(policy_specs())]
            + [LANCE_COMPACTION_PREFIX + k for k in sorted(lance_config_specs())] + [CLUSTER_BY_PROPERTY])


def _spec(key: str) -> OptionSpec | None:
    k = key.strip().lower()
    if k.startswith(PROPERTY_PREFIX):
        return policy_specs().get(policy_key(k[len(PROPERTY_PREFIX):]))
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
        if name.startswith(PROPERTY_PREFIX):
            v = check_policy_value(table, o.name, value, f"table property {name}")
            own = PROPERTY_PREFIX + o.name
            if own in update:
                raise CompactionError(f"table {table}: table property {own} is set twice, also under its "
                                      f"former name ({', '.join(PROPERTY_PREFIX + a for a in o.aliases)})")
            if name != own:  # a former name: kept under the key's name
                former_name("table property", name, own)
                name = own
            for alias in o.aliases:
                update[PROPERTY_PREFIX + alias] = None  # the former name goes (if it is there)
        else:
            try:
                v = convert_value(o, value, table)
            except CompactionError as e:
                raise CompactionError(e.message.replace(f"option {o.name}", f"table property {name}", 1)) from None
        update[name] = str(v).lower() if isinstance(v, bool) else str(v)
    for key in unset:
        name = key.strip().lower()
        if not name.startswith((PROPERTY_PREFIX, LANCE_COMPACTION_PREFIX)):
            raise _refuse(table, f"cannot unset table property {key!r}")
        o = _spec(name) if name.startswith(PROPERTY_PREFIX) else None
        # a policy key goes under its name and every former name
        names = [name] if o is None else [PROPERTY_PREFIX + n for n in (o.name, *o.aliases)]
        for n in names:
            if update.get(n, None) is not None:
                raise CompactionError(f"table {table}: table property {n} is both set and unset")
            update[n] = None
    return update


_CONFIG_ERROR = re.compile(r"invalid value for (lance\.compaction\.[\w.]+)", re.I)


def check_with_lance(table: str, ds: lance.LanceDataset, update: dict[str, str | None]) -> None:
    """Ask Lance whether it can use each ``lance.compaction.*`` value of ``update``: it plans a
    compaction of the table with the value as an option (planning writes nothing). Where the
    table's config already holds a value Lance cannot parse (Lance reads it on every plan), the
    value is asked of a scratch table of the same storage version instead, if that key is being
    changed now; otherwise the change is refused, saying which property to remove first."""
    from lance.optimize import Compaction

    changed = set(update)
    for name, text in update.items():
        if text is None or not name.startswith(LANCE_COMPACTION_PREFIX):
            continue
        option = name[len(LANCE_COMPACTION_PREFIX):]
        value = convert_value(lance_config_specs()[option], text, table)
        try:
            Compaction.plan(ds, {option: value})
            continue
        except Exception as e:  # Lance says ValueError or OSError
            error = e
        stored = _CONFIG_ERROR.search(str(error))
        if stored and stored.group(1).lower() != name:
            if stored.group(1).lower() not in changed:
                raise CompactionError(
                    f"table {table}: its table property {stored.group(1)} already holds a value Lance "
                    f"cannot use ({first_part(str(error), 200)}); remove it first with ALTER TABLE "
                    f"{table} UNSET TBLPROPERTIES ('{stored.group(1)}')") from None
            error = _scratch_plan_error(ds, option, value)
        elif stored:  # the stored value of this very key is bad: ask without the table's config
            error = _scratch_plan_error(ds, option, value)
        if error is not None:
            raise CompactionError(
                f"table {table}: table property {name} = {text!r} is not a value Lance can use: "
                f"{first_part(str(error), 300)}; nothing was changed") from None


def _scratch_plan_error(ds: lance.LanceDataset, option: str, value: Any) -> Exception | None:
    """Lance's error planning a compaction with ``{option: value}`` on a scratch table of
    ``ds``'s storage version (two one-row fragments, no config), or None."""
    import pyarrow as pa
    from lance.optimize import Compaction

    with tempfile.TemporaryDirectory(prefix="lance-compact-check-") as scratch:
        try:
            version = ds.data_storage_version
        except Exception:
            version = None
        kwargs = {"data_storage_version": version} if version else {}
        probe = lance.write_dataset(pa.table({"x": [0, 1]}), scratch, max_rows_per_file=1, **kwargs)
        try:
            Compaction.plan(probe, {option: value})
        except Exception as e:
            return e
    return None


def alter_properties(request: Envelope) -> Result:
    """Serve ``{"table", "uri", "storage_options", "set": {key: text}, "unset": [key]}``: one
    commit of the table's config; answers the table's config after it, a row per key."""
    target = request.require_target()
    table = target.table
    raw = request.extras
    check_names(table, dict(raw.get("set") or {}), raw.get("cluster_by"))  # before the table is opened
    ds = target.open()
    # The clustering's keys and CLUSTER BY (compaction/clustering/table_clustering.py)
    set_, unset, clustering = split_changes(table, ds.schema, dict(raw.get("set") or {}),
                                            list(raw.get("unset") or []), raw.get("cluster_by"))
    update = {**checked_changes(table, set_, unset), **clustering}
    config = ds.config() or {}
    # UNSET of a key that is not there is no change; an empty update makes no version.
    update = {k: v for k, v in update.items() if v is not None or k in config}
    check_with_lance(table, ds, update)
    if update:
        with commit_gate.gate(table, "ALTER TABLE's change of properties") as landed:
            ds.update_config(update)  # Lance's commit moves ds to the version it wrote
            landed(f"version {ds.version}")
    return Result("`key` STRING, `value` STRING", sorted((ds.config() or {}).items()))
