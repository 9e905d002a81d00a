"""The documentation cannot drift or break: docs/reference.md is what parameters.json generates,
every name in the spec is in it, it lists exactly what the running jar serves (procedures,
parameters in order and type, system tables' columns), a spec section the generator does not
place stops it, the README's
links lead to files that exist, and the MkDocs site builds in strict mode (a broken link, a
missing page or a page left out of the nav fails it)."""
from __future__ import annotations

import copy
import json
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import gen_reference  # noqa: E402


@pytest.fixture(scope="module")
def spec() -> dict:
    return json.loads(gen_reference.SPEC.read_text())


def test_checked_in_reference_is_what_the_spec_generates(spec):
    assert (ROOT / "docs" / "reference.md").read_text() == gen_reference.render(spec), (
        "docs/reference.md is out of date: run python docs/gen_reference.py")


def test_reference_names_every_entry_of_the_spec(spec):
    text = gen_reference.render(spec)
    for section, entries in gen_reference.list_sections(spec).items():
        for entry in entries:
            assert f"`{entry['name']}`" in text, f"{section}.{entry['name']} is missing from the reference"


def test_a_section_the_generator_does_not_place_stops_it(spec):
    """A new section of the spec must be placed on purpose (a procedure, a system table, the table
    properties or an options table): it is never rendered as a procedure that does not exist."""
    grown = copy.deepcopy(spec)
    grown["vacuum_parameters"] = [{"name": "depth", "type": "long", "doc": "How deep."}]
    with pytest.raises(gen_reference.UnmappedSection, match="vacuum_parameters"):
        gen_reference.render(grown)


def test_option_tables_render_their_cells_safely(spec):
    grown = copy.deepcopy(spec)
    grown["settings"] = grown["settings"] + [{"name": "knob_a", "type": "string", "strategies": ["default"],
                                              "doc": "A knob | with a pipe."}]
    text = gen_reference.render(grown)
    assert "A knob \\| with a pipe." in text      # a pipe does not break the table


def _reference_sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


def _reference_parameters(section: str) -> list[tuple[str, str]]:
    """(name, type) of a procedure's parameter table in the reference, in order."""
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| ([^|]+) \|", section, flags=re.M)
    return [(name, kind.strip()) for _, name, kind in rows]


_SQL_TYPES = {"string": "STRING", "bigint": "BIGINT", "boolean": "BOOLEAN", "double": "DOUBLE",
              "map&lt;string,string&gt;": "MAP<STRING, STRING>",
              # declared STRING; an INTERVAL or TIMESTAMP argument is bound with its own type
              "string or interval": "STRING", "string, interval or timestamp": "STRING",
              "string of bigints (comma-separated)": "STRING"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """What the running jar serves: SHOW PROCEDURES, each DESCRIBE PROCEDURE's parameters, and
    the system tables' schemas."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import lance_session

    wh = tmp_path_factory.mktemp("docs_wh")
    spark = lance_session("local[1]", "docs-reference", str(wh))
    try:
        names = sorted(r.procedure_name for r in spark.sql("SHOW PROCEDURES IN lance").collect())
        signatures = {}
        for name in names:
            text = "\n".join(r[0] for r in spark.sql(f"DESCRIBE PROCEDURE lance.{name}").collect())
            listed = text.split("Parameters:", 1)[1]
            signatures[name] = re.findall(r"(\w+) (MAP<[^>]*>|\w+)", listed)
        tables = {t: [f.name for f in spark.table(f"lance.system.{t}").schema.fields]
                  for t in gen_reference.SYSTEM_TABLES}
        import lance
        import pyarrow as pa
        (wh / "db").mkdir()
        lance.write_dataset(pa.table({"id": [1, 2]}), str(wh / "db" / "t.lance"))
        metadata = {t: [(f.name, f.dataType.simpleString()) for f in spark.table(f"lance.db.t.{t}").schema.fields]
                    for t in gen_reference.METADATA_TABLES}
    finally:
        spark.stop()
    return {"procedures": names, "signatures": signatures, "system_tables": tables, "metadata_tables": metadata}


def test_reference_lists_exactly_the_procedures_the_jar_serves(served):
    text = (ROOT / "docs" / "reference.md").read_text()
    listed = re.findall(r"^\| \[`lance\.(\w+)`\]", text, flags=re.M)
    assert sorted(listed) == served["procedures"]


def test_reference_parameters_are_the_jars_in_order_and_type(served):
    sections = _reference_sections((ROOT / "docs" / "reference.md").read_text())
    for name, signature in served["signatures"].items():
        documented = [(n, _SQL_TYPES.get(t, t.upper())) for n, t in _reference_parameters(sections[name])]
        assert documented == signature, f"{name}: the reference says {documented}, the jar serves {signature}"


def test_reference_system_tables_are_the_jars(served):
    sections = _reference_sections((ROOT / "docs" / "reference.md").read_text())
    system = sections["System tables"]
    for table, columns in served["system_tables"].items():
        part = system[system.index(f"### lance.system.{table}"):]
        part = part[: part.index("\n### ", 1)] if "\n### " in part[1:] else part
        documented = re.findall(r"^\| `(\w+)` \|", part, flags=re.M)
        assert documented == columns, f"system.{table}: the reference says {documented}, the jar serves {columns}"


def test_readme_links_lead_to_existing_files():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to no docs page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
    assert len(readme.splitlines()) <= 260, "the README is a landing page: move detail to docs/"


def test_docs_build_strict(tmp_path):
    """mkdocs build --strict: broken links and anchors, missing pages and pages outside the nav
    are errors."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "index.html").exists()


def _settings_in_code() -> set[str]:
    """Names of settings and environment variables the product's code reads: spark.lance.compact.*
    keys, the catalog's option keys, LANCE_* environment variables."""
    found: set[str] = set()
    sources = [p for d in ("python/lance_compact", "spark-ext/src/main", "bin")
               for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in ("", ".py", ".scala", ".sh")]
    for path in sources:
        text = path.read_text(errors="replace")
        found |= set(re.findall(r"spark\.lance\.compact\.[A-Za-z][A-Za-z0-9_.]*[A-Za-z0-9]", text))
        for line in text.splitlines():  # environment variables: a LANCE_* name on a line that reads one
            if re.search(r"environ|getenv|sys\.env|env\.get|\$\{?LANCE_", line):
                found |= set(re.findall(r"\b(LANCE_[A-Z][A-Z0-9_]*)\b", line))
        # catalog keys matched by pattern (driver_conf.py: spark\.sql\.catalog\.([^.]+)\.strategies\.)
        found |= {f"spark.sql.catalog.<catalog>.{k}.<" for k in re.findall(r"catalog\\\.\(\[\^\.\]\+\)\\\.([a-z_]+)\\\.", text)}
        if path.name == "LanceCatalog.scala":
            found |= {f"spark.sql.catalog.<catalog>.{k}" for k in re.findall(r'options\.get\("([a-z_]+)"\)', text)}
            found |= {f"spark.sql.catalog.<catalog>.{k}.<" for k in re.findall(r'startsWith\("([a-z_]+)\."\)', text)}
    return found


def test_configuration_page_lists_every_setting_the_code_reads():
    page = (ROOT / "docs" / "configuration.md").read_text()
    found = _settings_in_code()
    assert {"spark.lance.compact.picture.dir", "spark.sql.catalog.<catalog>.warehouse",
            "LANCE_COMPACT_JAR"} <= found, f"the scan finds too little: {sorted(found)}"
    missing = sorted(name for name in found if f"`{name}" not in page)
    assert not missing, f"docs/configuration.md does not list: {missing}"


def test_architecture_names_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "python" / "lance_compact"
    modules = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))
    scala = sorted(p.name for p in (ROOT / "spark-ext" / "src" / "main").rglob("*.scala"))
    missing = [m for m in modules if f"`{m.rsplit('/', 1)[-1]}`" not in page] + \
              [s for s in scala if s not in page]
    assert not missing, f"docs/architecture.md does not describe: {missing}"


def _former_names(spec: dict) -> set[str]:
    """Every former name (``aliases``) of the spec's entries."""
    return {a for entries in gen_reference.list_sections(spec).values() for e in entries for a in e.get("aliases", ())}


def test_procedures_page_signatures_are_the_jars(served, spec):
    """docs/procedures.md's `lance.x(a, [b], ...)` signatures name the jar's parameters in order
    (the guide leaves out the former names the jar still takes; the reference lists them)."""
    page = (ROOT / "docs" / "procedures.md").read_text()
    shown = re.findall(r"`lance\.(\w+)\(([^)`]*)\)`", page)
    former = _former_names(spec)
    checked = 0
    for name, args in shown:
        if "..." in args or not args.strip():
            continue
        names = [a.strip(" []") for a in args.split(",")]
        served_names = [n for n, _ in served["signatures"][name]]
        assert names == [n for n in served_names if n not in former], f"procedures.md: lance.{name}({args})"
        checked += 1
    assert checked >= 5


def test_former_names_are_served_last_and_listed_in_the_reference(served, spec):
    """A renamed parameter's former name is still a parameter of the jar's procedure (after all
    the others, so positional calls are unchanged), and the reference's Former names table lists
    every former name with its new name."""
    sections = _reference_sections((ROOT / "docs" / "reference.md").read_text())
    listed = set(re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|", sections["Former names"], flags=re.M))
    former = _former_names(spec)
    assert {"max_bytes", "max_rows", "max_fragments"} <= former
    for entries in gen_reference.list_sections(spec).values():
        for e in entries:
            for a in e.get("aliases", ()):
                assert (a, e["name"]) in listed, f"the reference does not list {a} as the former name of {e['name']}"
    for procedure, signature in served["signatures"].items():
        names = [n for n, _ in signature]
        tail = [n for n in names if n in former]
        assert names[len(names) - len(tail):] == tail, f"{procedure}: former names not last in {names}"
    assert [n for n, _ in served["signatures"]["maintain"]][-1] == "max_bytes"
    assert "max_bytes" in [n for n, _ in served["signatures"]["maintain_warehouse"]]
    assert ("spark.lance.compact.engineRewrite.maxBytes", "spark.lance.compact.engineRewrite.maxBatchBytes") in listed


def test_reference_metadata_tables_are_the_jars(served):
    """The fragments, versions and indices tables under a table: the reference's columns, in
    order and type, are what the jar serves."""
    sections = _reference_sections((ROOT / "docs" / "reference.md").read_text())
    part_of = sections["Metadata tables"]
    for table, columns in served["metadata_tables"].items():
        part = part_of[part_of.index(f"### {table}"):]
        part = part[: part.index("\n### ", 1)] if "\n### " in part[1:] else part
        documented = [(n, html.unescape(t.strip())) for n, t in re.findall(r"^\| `(\w+)` \| ([^|]+) \|", part, flags=re.M)]
        assert documented == columns, f"{table}: the reference says {documented}, the jar serves {columns}"
