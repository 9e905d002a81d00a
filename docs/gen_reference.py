"""Writes docs/reference.md from python/lance_compact/parameters.json, the one spec of every
procedure's parameters, option, setting and result column (the engine validates with it and the
jar builds its CALL parameters from it), so the reference cannot drift from the product.

    python docs/gen_reference.py          # rewrite docs/reference.md
    python docs/gen_reference.py --check  # exit 1 if docs/reference.md differs (tests/test_docs.py)

Sections are rendered generically: every `<name>_parameters` section becomes a procedure's
parameters and every `<name>_columns` section its result columns (a new procedure needs no change
here: it is named after its section); every other list section becomes a table of options. The
mappings below only give known sections their procedure, title and summary.
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

# Sections whose entries are compact's and plan_compaction's parameters (CALL parameters where
# marked "sql", all of them keys of the options map).
COMPACTION_SECTIONS = ("options", "settings", "run_settings")

# Section prefixes that are not the procedure's own name.
PREFIX_PROCEDURE = {"result": "compact", "plan": "plan_compaction", "layout": "describe_layout",
                    "histogram": "describe_layout"}

# Result column sections that describe a variant of the procedure's result.
COLUMNS_NOTE = {"histogram_columns": "With `histogram => true` the result is instead:"}

# Procedures in the order the reference lists them, with what each does. Procedures found only
# in the spec follow, in spec order, without a summary.
SUMMARIES = {
    "compact": "Compacts a table: plans with Lance's planner (through a strategy), rewrites every "
               "task as a Spark task on an executor and commits atomically on the driver. "
               "One row of metrics.",
    "plan_compaction": "A dry run of `compact` with the same parameters: one row per task it "
                       "would run (or leave for later), and why. Writes nothing.",
    "describe_layout": "The table's layout: fragments, small ones, deletions, bytes, indices and "
                       "their unindexed fragments, and the last compaction; optionally the "
                       "fragment-size histogram as text or as a picture.",
    "cleanup": "Lance's cleanup of old versions and of files left by failed or uncommitted "
               "writes. Makes no new version.",
    "optimize_indices": "Lance's index optimization: adds the rows of fragments an index does "
                        "not cover yet to it (or retrains it).",
    "maintain": "Everyday maintenance in one call: compaction, index optimization and cleanup, "
                "each only when the layout says it is due. One row per step.",
}

# Parameters every procedure starts with, and compaction's own that are not in the spec.
TABLE = {"name": "table", "type": "string", "required": True,
         "doc": "A table of the catalog (`namespace.table`) or the path or URI of a Lance dataset "
                "in its warehouse."}
OPTIONS_MAP = {"name": "options", "type": "map<string,string>",
               "doc": "Any option or setting below by name, values as text; unknown keys are "
                      "refused with the list of valid ones."}
STRATEGY = {"name": "strategy", "type": "string", "default": "default",
            "doc": "Planning strategy: `default`, `io_bounded`, `deletion_only`, `incremental`, or "
                   "a name the operator registered (see [Strategies](strategies.md))."}
# describe_layout takes these two compaction options before its own parameters.
LAYOUT_OPTIONS = ("target_rows_per_fragment", "materialize_deletions_threshold")

SECTION_TITLES = {
    "options": "Lance compaction options",
    "settings": "Strategy settings",
    "run_settings": "Run settings",
    "test_hooks": "Test hooks",
}
SECTION_NOTES = {
    "options": "Passed to Lance's planner and rewrite. Left out (or NULL), an option is not sent "
               "to Lance, so the table's own `lance.compaction.<name>` setting applies, else "
               "Lance's default (the default column).",
    "settings": "Settings of the strategies named in the strategies column; giving one with "
                "another strategy is an error.",
    "run_settings": "How a run commits, retries and chooses what to compact.",
    "test_hooks": "Fault injection for the project's own tests.",
}


def sql_type(kind: str) -> str:
    """The spec's type as Spark SQL names it."""
    if kind == "long_list":
        return "bigint list (comma-separated)"
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
    parts = []
    if "choices" in entry:
        parts.append(" / ".join(f"`{c}`" for c in entry["choices"]))
    if "min" in entry:
        parts.append(f">= {entry['min']}")
    if "max" in entry:
        parts.append(f"<= {entry['max']}")
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


def procedure_of(section: str, suffix: str) -> str:
    prefix = section[: -len(suffix)]
    return PREFIX_PROCEDURE.get(prefix, prefix)


def list_sections(spec: dict) -> dict[str, list[dict]]:
    return {k: v for k, v in spec.items() if isinstance(v, list) and all(isinstance(e, dict) for e in v)}


def procedures(spec: dict) -> dict[str, dict]:
    """Each procedure's parameters and result column sections, from the sections' names."""
    sections = list_sections(spec)
    procs: dict[str, dict] = {}

    def proc(name: str) -> dict:
        return procs.setdefault(name, {"parameters": None, "columns": []})

    compaction = [TABLE] + [e for s in COMPACTION_SECTIONS for e in sections.get(s, []) if e.get("sql")] \
        + [OPTIONS_MAP, STRATEGY]
    for name in ("compact", "plan_compaction"):
        proc(name)["parameters"] = compaction
    for section, entries in sections.items():
        if section.endswith("_parameters"):
            name = procedure_of(section, "_parameters")
            head = [TABLE]
            if name == "describe_layout":
                head += [e for e in sections.get("options", []) if e["name"] in LAYOUT_OPTIONS]
            proc(name)["parameters"] = head + entries
        elif section.endswith("_columns"):
            proc(procedure_of(section, "_columns"))["columns"].append(section)
    order = [n for n in SUMMARIES if n in procs] + [n for n in procs if n not in SUMMARIES]
    return {n: procs[n] for n in order}


def render(spec: dict) -> str:
    sections = list_sections(spec)
    procs = procedures(spec)
    out = [
        "# Reference",
        "",
        "<!-- Generated by docs/gen_reference.py from python/lance_compact/parameters.json. "
        "Do not edit: run `python docs/gen_reference.py`. -->",
        "",
        "Every procedure, parameter, option and result column, generated from "
        "`python/lance_compact/parameters.json`, the spec the engine validates with and the jar "
        "builds its CALL parameters from.",
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
    for name in procs:
        out.append(f"| [`lance.{name}`](#{name}) | {cell(SUMMARIES.get(name, ''))} |")
    for name, p in procs.items():
        out += ["", f"## {name}", ""]
        if name in SUMMARIES:
            out += [SUMMARIES[name], ""]
        if p["parameters"] is not None:
            out += ["Parameters:", ""] + parameters_table(p["parameters"]) + [""]
        if name in ("compact", "plan_compaction"):
            out += ["Every entry of [Options and settings](#options-and-settings) is also a key of "
                    "the `options` map, including those that are not CALL parameters.", ""]
        for section in p["columns"]:
            out += [COLUMNS_NOTE.get(section, "Result columns:"), ""] + columns_table(sections[section]) + [""]
        while out[-1] == "":
            out.pop()
    out += ["", "## Options and settings", ""]
    for section, entries in sections.items():
        if section.endswith(("_parameters", "_columns")):
            continue
        title = SECTION_TITLES.get(section, section.replace("_", " ").capitalize())
        out += [f"### {title}", ""]
        if section in SECTION_NOTES:
            out += [SECTION_NOTES[section], ""]
        out += options_table(entries) + [""]
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
