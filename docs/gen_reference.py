"""Writes docs/reference.md from python/lance_compact/parameters.json, the one spec of every
procedure's parameters, option, setting and result column (the engine validates with it and the
jar builds its CALL parameters from it), so the reference cannot drift from the product.

    python docs/gen_reference.py          # rewrite docs/reference.md
    python docs/gen_reference.py --check  # exit 1 if docs/reference.md differs (tests/test_docs.py)

What the jar serves is declared below (PROCEDURES: each procedure's parameters in positional
order and its result columns; SYSTEM_TABLES; the table properties) and checked against the running
jar by tests/test_docs.py. A section of the spec that is not placed here stops the generator with a
message saying so: it is never rendered as a procedure that does not exist.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "python" / "lance_compact" / "parameters.json"
OUT = ROOT / "docs" / "reference.md"

# What the jar serves, in SHOW PROCEDURES' terms: each procedure's parameters in positional
# order (the spec sections CompactionArguments.scala reads, after the leading parameters named
# here) and its result column sections. tests/test_docs.py checks this against the running jar
# (SHOW PROCEDURES, DESCRIBE PROCEDURE), so a procedure or parameter cannot be listed that the
# jar does not serve, nor served and left out.
COMPACTION = ("compaction",)  # table, the sql entries of COMPACTION_SECTIONS, options, strategy
PROCEDURES: dict[str, dict] = {
    "compact": {"head": COMPACTION, "columns": ["result_columns"]},
    "plan_compaction": {"head": COMPACTION, "columns": ["plan_columns"]},
    "describe_layout": {"head": ("table", "target_rows_per_fragment", "materialize_deletions_threshold"),
                        "section": "layout_parameters", "columns": ["layout_columns", "histogram_columns"]},
    "cleanup": {"head": ("table",), "section": "cleanup_parameters", "columns": ["cleanup_columns"]},
    "optimize_indices": {"head": ("table",), "section": "optimize_indices_parameters",
                         "columns": ["optimize_indices_columns"]},
    "create_index": {"head": ("table",), "section": "create_index_parameters", "columns": ["create_index_columns"]},
    "drop_index": {"head": ("table",), "section": "drop_index_parameters", "columns": ["drop_index_columns"]},
    "maintain": {"head": ("table",), "section": "maintain_parameters", "columns": ["maintain_columns"]},
    "maintain_warehouse": {"head": ("namespace",), "section": "maintain_warehouse_parameters",
                           "columns": ["maintain_warehouse_columns"]},
}

# Sections whose entries are compact's and plan_compaction's parameters (CALL parameters where
# marked "sql", all of them keys of the options map).
COMPACTION_SECTIONS = ("options", "settings", "run_settings")

# System tables (SELECT * FROM lance.system.<name>) and the column section each returns.
SYSTEM_TABLES = {
    "table_health": ("health_columns", "One row per table of the warehouse: its health score (100 is "
                     "healthy), the steps that are due and the figures behind them, read from each "
                     "table's metadata only. A table that cannot be read gets a row with its error."),
    "maintenance_history": ("history_columns", "One row per maintenance transaction of every table "
                            "(compactions, index builds and optimizations, configuration changes), "
                            "read from the tables' own transactions."),
}

# Metadata tables (SELECT * FROM lance.db.events.<name>) and the column section each returns.
METADATA_TABLES = {
    "fragments": ("fragments_columns", "One row per fragment of the table's current version, from its "
                  "manifest. Only the columns a query names are read, and `count(*)`, `count`, `sum`, "
                  "`min` and `max` of its numeric columns with no filter or grouping are answered in one "
                  "row."),
    "versions": ("versions_columns", "One row per version the table keeps, oldest first, from each "
                 "version's manifest and transaction (a cleanup removes the old ones)."),
    "indices": ("indices_columns", "One row per user index: its segments, what it covers and how "
                "old its model is."),
}

# Table properties (ALTER TABLE ... SET TBLPROPERTIES): the policy keys, plus maintain's
# thresholds (policy.py), under this prefix.
POLICY_PREFIX = "lance_compact.maintain."
POLICY_SECTIONS = ("policy_keys",)
POLICY_FROM_MAINTAIN_EXCLUDED = ("dry_run", "fail_on_error")

# Where a section's names are given, for the table of former names.
FORMER_WHERE = {
    "settings": "strategy setting of `compact` and `plan_compaction` (options map key; PySpark keyword)",
    "maintain_parameters": "`maintain` parameter; table property lance_compact.maintain.{name}; catalog "
                           "setting spark.sql.catalog.<catalog>.maintain.{name}",
    "maintain_warehouse_parameters": "`maintain_warehouse` parameter (and the maintenance service's `--param`)",
}
# Driver settings renamed (their former names are read too, with a warning in the engine's log).
FORMER_SETTINGS = [("spark.lance.compact.engineRewrite.maxBytes", "spark.lance.compact.engineRewrite.maxBatchBytes",
                    "driver setting ([Configuration](configuration.md)); a batch's size, not a budget")]

# The bounds on what one run may make the cluster do (compaction/bounds.py).
BOUND_SECTIONS = ("bounds",)

# Every other list section is a table of options, with this title and note.
SECTION_TITLES = {
    "options": "Lance compaction options",
    "settings": "Strategy settings",
    "run_settings": "Run settings",
    "index_options": "Index options (create_index's options map)",
    "test_hooks": "Test hooks",
}
SECTION_NOTES = {
    "options": "Passed to Lance's planner and rewrite. Left out (or NULL), an option is not sent "
               "to Lance, so the table's own `lance.compaction.<name>` setting applies, else "
               "Lance's default (the default column). Each is also a table property "
               "`lance.compaction.<name>` (see [Table properties](#table-properties)).",
    "settings": "Settings of the strategies named in the strategies column; giving one with "
                "another strategy is an error.",
    "run_settings": "How a run commits, retries and chooses what to compact.",
    "index_options": "Keys of `create_index`'s `options` map: Lance's parameters by the names "
                     "`LanceDataset.create_index` takes, each for the index types listed (another type "
                     "refuses it; Lance itself would silently ignore an unknown one), and the build's "
                     "own settings (no types listed).",
    "test_hooks": "Fault injection for the project's own tests: these keys exist only in an engine "
                  "whose driver was started with `LANCE_COMPACT_TEST_HOOKS=1`; otherwise they are "
                  "unknown options.",
}

# What each procedure does, and one example CALL each (Iceberg's reference has one per procedure).
SUMMARIES = {
    "compact": "Compacts a table: plans with Lance's planner (through a strategy), rewrites every "
               "task as a Spark task on an executor and commits atomically on the driver. "
               "One row of metrics.",
    "plan_compaction": "A dry run of `compact` with the same parameters: one row per task it "
                       "would run (or leave for later), and why. Writes nothing.",
    "describe_layout": "The table's layout: fragments, small ones, deletions, bytes, indices and "
                       "their unindexed fragments, the last compaction, the health score and the "
                       "steps that are due; optionally the fragment-size histogram as text or as a "
                       "picture.",
    "cleanup": "Lance's cleanup of old versions and of files left by failed or uncommitted "
               "writes. Makes no new version.",
    "optimize_indices": "Lance's index optimization: adds the rows of fragments an index does "
                        "not cover yet to it (or retrains it).",
    "drop_index": "Drops one of the table's indices by name, in one commit (Lance's drop_index; "
                  "the index's files stay until cleanup). The same as `DROP INDEX name ON "
                  "lance.db.t`. One row of what was dropped.",
    "create_index": "Builds an index on the cluster: for a vector index of several fragment groups "
                    "one model trained by a Spark task (Lance samples the table there); a segment "
                    "per fragment group built by a Spark task with that model (a vector index of one "
                    "group: one task that trains its own, as pylance's create_index does); merged with bounded fan-in "
                    "on the driver (on an object store IVF_FLAT, IVF_HNSW_FLAT, IVF_PQ and IVF_RQ segments, at most "
                    "8, are committed as they are unless `merge_fan_in` is given) and committed once against the "
                    "version it read (a concurrent rewrite of indexed fragments makes it build those groups again). "
                    "IVF_SQ and IVF_HNSW_SQ, whose segments cannot be merged, are one Spark task over every fragment. "
                    "A small table in local mode is built by pylance's create_index in the engine (`built_by`). "
                    "`dry_run` returns the plan. One row.",
    "maintain": "Everyday maintenance in one call: compaction, index optimization and cleanup, "
                "each only when the layout says it is due. One row per step.",
    "maintain_warehouse": "Maintains every table of the warehouse (or of a namespace) that its "
                          "health says needs it, worst health first, then priority, within "
                          "max_tables, max_total_rewrite_bytes and max_duration; tables side by side. One row "
                          "per table and step.",
}
EXAMPLES = {
    "compact": "CALL lance.compact(table => 'db.events', target_rows_per_fragment => 1048576,\n"
               "                   partial_progress => true)",
    "plan_compaction": "CALL lance.plan_compaction(table => 'db.events', strategy => 'io_bounded',\n"
                       "                           options => map('max_rewrite_bytes', '10737418240'))",
    "describe_layout": "CALL lance.describe_layout(table => 'db.events', histogram => true)",
    "cleanup": "CALL lance.cleanup(table => 'db.events', older_than => '7 days', dry_run => true)",
    "optimize_indices": "CALL lance.optimize_indices(table => 'db.events')",
    "drop_index": "CALL lance.drop_index(table => 'db.events', name => 'id_idx')",
    "create_index": "CALL lance.create_index(table => 'db.items', column => 'emb', index_type => 'IVF_PQ',\n"
                    "                        options => map('num_partitions', '256', 'num_sub_vectors', '16'))",
    "maintain": "CALL lance.maintain(table => 'db.events', older_than => INTERVAL 8 DAYS)",
    "maintain_warehouse": "CALL lance.maintain_warehouse(namespace => 'db', max_tables => 10,\n"
                          "                              max_duration => '30 minutes')",
}

# Parameters that come before the spec's own, and compaction's own that are not in the spec.
TABLE = {"name": "table", "type": "string", "required": True,
         "doc": "A table of the catalog (`namespace.table`) or the path or URI of a Lance dataset "
                "in its warehouse."}
NAMESPACE = {"name": "namespace", "type": "string",
             "doc": "A namespace of the catalog (`db`, or `a.b` for a nested one): its tables and "
                    "those of the namespaces under it. Left out: every table of the warehouse."}
OPTIONS_MAP = {"name": "options", "type": "map<string,string>",
               "doc": "Any option or setting below by name, values as text; unknown keys are "
                      "refused with the list of valid ones."}
STRATEGY = {"name": "strategy", "type": "string", "default": "default",
            "doc": "Planning strategy: `default`, `io_bounded`, `deletion_only`, `incremental`, or "
                   "a name the operator registered (see [Strategies](strategies.md)); also Iceberg's "
                   "`binpack` (a plain compaction by `default`, even of a clustered table) and `sort` "
                   "(a clustering run: needs `sort_order` or the table's `CLUSTER BY`)."}


class UnmappedSection(ValueError):
    """parameters.json has a section this generator does not place: say where it belongs."""


def sql_type(kind: str) -> str:
    """The spec's type as Spark SQL names it."""
    if kind == "long_list":
        return "string of bigints (comma-separated)"
    if kind == "duration":  # runtime/durations.py: text such as '10 minutes' or '10m', or an INTERVAL
        return "string or interval"
    if kind == "map":  # create_index's options
        return "map<string,string>"
    if kind == "age":  # a duration, or a moment in the past
        return "string, interval or timestamp"
    return re.sub(r"\blong\b", "bigint", kind)


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell (no raw HTML, no column breaks)."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def literal(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def default_text(entry: dict) -> str:
    if entry.get("required"):
        return "required"
    if "default" in entry:
        return literal(entry["default"])
    if "lance_default" in entry:
        value = entry["lance_default"]
        return f"table's, else Lance's {literal(value)}" if value is not None else "table's, else Lance's"
    return "none"


def range_text(entry: dict) -> str:
    if "former_of" in entry:
        return f"as `{entry['former_of']}`"
    parts = []
    if "choices" in entry:
        parts.append(" / ".join(f"`{c}`" for c in entry["choices"]))
    if "min" in entry:
        parts.append(f">= {entry['min']}")
    if "max" in entry:
        parts.append(f"<= {entry['max']}")
    if "types" in entry:  # index options: the index types that take it
        parts.append("for " + ", ".join(f"`{t}`" for t in entry["types"]))
    if "strategies" in entry:
        parts.append("strategy " + ", ".join(f"`{s}`" for s in entry["strategies"]))
    return "; ".join(parts)


def parameters_table(entries: list[dict]) -> list[str]:
    lines = ["| # | parameter | type | default | values | meaning |", "|---|---|---|---|---|---|"]
    for i, e in enumerate(entries, 1):
        lines.append(f"| {i} | `{e['name']}` | {cell(sql_type(e['type']))} | {default_text(e)} | "
                     f"{range_text(e)} | {cell(e.get('doc', ''))} |")
    return lines


def columns_table(entries: list[dict]) -> list[str]:
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for e in entries:
        lines.append(f"| `{e['name']}` | {cell(sql_type(e['type']))} | {cell(e.get('doc', ''))} |")
    return lines


def options_table(entries: list[dict]) -> list[str]:
    lines = ["| option | type | default | values | CALL parameter | meaning |", "|---|---|---|---|---|---|"]
    for e in entries:
        lines.append(f"| `{e['name']}` | {cell(sql_type(e['type']))} | {default_text(e)} | {range_text(e)} | "
                     f"{'yes' if e.get('sql') else 'options map'} | {cell(e.get('doc', ''))} |")
    return lines


def list_sections(spec: dict) -> dict[str, list[dict]]:
    return {k: v for k, v in spec.items() if isinstance(v, list) and all(isinstance(e, dict) for e in v)}


def placed_sections() -> set[str]:
    """Every section this generator renders somewhere."""
    placed = set(COMPACTION_SECTIONS) | set(SECTION_TITLES) | set(POLICY_SECTIONS) | set(BOUND_SECTIONS)
    for p in PROCEDURES.values():
        placed.update(p["columns"])
        if "section" in p:
            placed.add(p["section"])
    placed.update(section for section, _ in SYSTEM_TABLES.values())
    placed.update(section for section, _ in METADATA_TABLES.values())
    return placed


def former_names(entries: list[dict]) -> list[dict]:
    """The former names (``aliases``) of ``entries`` as entries of their own, in order: the jar
    declares them as parameters after the others (CompactionArguments.formerNames)."""
    return [{"name": a, "type": e["type"], "former_of": e["name"],
             "doc": f"Deprecated: the former name of `{e['name']}`, accepted until the next release."}
            for e in entries for a in e.get("aliases", ())]


def parameters(spec: dict, name: str) -> list[dict]:
    """A procedure's parameters in the positional order the jar declares them."""
    sections = list_sections(spec)
    p = PROCEDURES[name]
    if p["head"] == COMPACTION:
        own = [e for s in COMPACTION_SECTIONS for e in sections.get(s, []) if e.get("sql")]
        return [TABLE] + own + [OPTIONS_MAP, STRATEGY] + former_names(own)
    options = {e["name"]: e for e in sections.get("options", [])}
    head = [TABLE if h == "table" else NAMESPACE if h == "namespace" else options[h] for h in p["head"]]
    own = sections.get(p["section"], [])
    return head + own + former_names(own)


def policy_entries(spec: dict) -> list[dict]:
    """The table properties lance_compact.maintain.<key>."""
    sections = list_sections(spec)
    out = [e for s in POLICY_SECTIONS for e in sections.get(s, [])]
    return out + [e for e in sections.get("maintain_parameters", []) if e["name"] not in POLICY_FROM_MAINTAIN_EXCLUDED]


def render(spec: dict) -> str:
    sections = list_sections(spec)
    unplaced = [s for s in sections if s not in placed_sections()]
    if unplaced:
        raise UnmappedSection(
            f"parameters.json sections {', '.join(unplaced)} are not placed in the reference: map each in "
            "docs/gen_reference.py (PROCEDURES, SYSTEM_TABLES, POLICY_SECTIONS or SECTION_TITLES)")
    out = [
        "# Reference",
        "",
        "<!-- Generated by docs/gen_reference.py from python/lance_compact/parameters.json. "
        "Do not edit: run `python docs/gen_reference.py`. -->",
        "",
        "Every procedure, parameter, option, system table, table property and result column, "
        "generated from `python/lance_compact/parameters.json`, the spec the engine validates with "
        "and the jar builds its CALL parameters from; `tests/test_docs.py` checks it against what "
        "the running jar serves (`SHOW PROCEDURES`, `DESCRIBE PROCEDURE`). Settings of the driver "
        "and the catalog are in [Configuration](configuration.md).",
        "",
        "Parameters are named (`name => value`) or positional in the order given. Values of the "
        "wrong type are refused by name (`target_rows_per_fragment => 1.5` is an error, not 1); "
        "bad input leaves the table's version unchanged. Each procedure is also "
        "`lance.system.<name>`.",
        "",
        "## Procedures",
        "",
        "| procedure | what it does |",
        "|---|---|",
    ]
    for name in PROCEDURES:
        out.append(f"| [`lance.{name}`](#{name}) | {cell(SUMMARIES[name])} |")
    for name, p in PROCEDURES.items():
        out += ["", f"## {name}", "", SUMMARIES[name], "", "```sql", EXAMPLES[name], "```", "",
                "Parameters:", ""] + parameters_table(parameters(spec, name)) + [""]
        if p["head"] == COMPACTION:
            out += ["Every entry of [Options and settings](#options-and-settings) is also a key of "
                    "the `options` map, including those that are not CALL parameters.", ""]
        for i, section in enumerate(p["columns"]):
            note = "Result columns:" if i == 0 else f"With `{section.split('_')[0]} => true` the result is instead:"
            out += [note, ""] + columns_table(sections[section]) + [""]
        while out[-1] == "":
            out.pop()
    out += ["", "## System tables", "",
            "Read with `SELECT ... FROM lance.system.<name>` (they are tables, not procedures).", ""]
    for name, (section, what) in SYSTEM_TABLES.items():
        out += [f"### lance.system.{name}", "", what, "", "```sql",
                f"SELECT * FROM lance.system.{name}", "```", ""] + columns_table(sections[section]) + [""]
    out += ["## Metadata tables", "",
            "Under each table, read with `SELECT ... FROM lance.<namespace>.<table>.<name>` (a time-travel "
            "read of the table itself is `VERSION AS OF`).", ""]
    for name, (section, what) in METADATA_TABLES.items():
        out += [f"### {name}", "", what, "", "```sql",
                f"SELECT * FROM lance.db.events.{name}", "```", ""] + columns_table(sections[section]) + [""]
    out += ["## Table properties", "",
            "Kept in the Lance table's own configuration: `ALTER TABLE lance.db.t SET TBLPROPERTIES "
            "('lance_compact.maintain.priority' = '5')`, read with `SHOW TBLPROPERTIES`. A value is "
            "checked before it is written; a refused change leaves the table's version unchanged. "
            "Precedence: an argument of the CALL, then the table property, then the catalog setting "
            "`spark.sql.catalog.<catalog>.maintain.<key>`, then the default.", "",
            "| property | type | default | values | meaning |", "|---|---|---|---|---|"]
    for e in policy_entries(spec):
        out.append(f"| `{POLICY_PREFIX}{e['name']}` | {cell(sql_type(e['type']))} | {default_text(e)} | "
                   f"{range_text(e)} | {cell(e.get('doc', ''))} |")
    out += ["| `lance.compaction.<option>` | as the option | Lance's | as the option | "
            "Each [Lance compaction option](#lance-compaction-options) as the table's default; "
            "Lance itself reads these too. |", ""]
    out += ["## Options and settings", ""]
    for section in sections:
        if section not in SECTION_TITLES:
            continue
        out += [f"### {SECTION_TITLES[section]}", ""]
        if section in SECTION_NOTES:
            out += [SECTION_NOTES[section], ""]
        out += options_table(sections[section]) + [""]
    out += ["## Bounds", "",
            "What one run may make the cluster do, whoever chose the numbers behind it (an argument, "
            "a table property, a catalog setting): checked on the plan before anything runs; a run "
            "over a bound is refused with the bound's name and the value, and the table's version is "
            "unchanged. Each bound grows with the table's live rows from a floor, up to a ceiling.", "",
            "| bound | at most | meaning |", "|---|---|---|"]
    for section in BOUND_SECTIONS:
        for e in sections.get(section, []):
            out.append(f"| `{e['name']}` | max({e['floor']:,}, live rows / {e['rows_per']:,}), at most "
                       f"{e['ceiling']:,} | {cell(e.get('doc', ''))} |")
    out += ["", "## Former names", "",
            "Names changed to say what they are where Delta, Iceberg and lance-spark use the same words "
            "for something else ([Coming from Delta, Iceberg or lance-spark](coming-from.md#names-that-mean-"
            "something-else-here)). A former name is still accepted for one release, wherever the name is: "
            "a CALL parameter, an options map key, a PySpark keyword (with a `FutureWarning`), a table "
            "property `lance_compact.maintain.<key>` (`SET` writes the new key and removes the former "
            "one; `UNSET` of either removes both), a catalog setting `maintain.<key>`. The engine's log "
            "says so once per name. Giving both names at once is refused (of a driver setting, the new name "
            "wins).", "",
            "| former name | name | where |", "|---|---|---|"]
    for section, entries in sections.items():
        for e in entries:
            for a in e.get("aliases", ()):
                where = FORMER_WHERE.get(section, section.replace("_", " ")).format(name=a)
                out.append(f"| `{a}` | `{e['name']}` | {cell(where)} |")
    for old, new, where in FORMER_SETTINGS:
        out.append(f"| `{old}` | `{new}` | {cell(where)} |")
    out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that docs/reference.md is current")
    args = parser.parse_args(argv)
    text = render(json.loads(SPEC.read_text()))
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python docs/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
