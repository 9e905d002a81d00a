"""The documentation cannot drift or break: docs/reference.md is what parameters.json generates,
every name in the spec is in it, the generator renders sections it has never seen, the README's
links lead to files that exist, and the MkDocs site builds in strict mode (a broken link, a
missing page or a page left out of the nav fails it)."""
from __future__ import annotations

import copy
import json
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


def test_unknown_sections_are_rendered_without_code_changes(spec):
    grown = copy.deepcopy(spec)
    grown["vacuum_parameters"] = [{"name": "depth", "type": "long", "min": 2, "sql": True,
                                   "doc": "How deep to vacuum."}]
    grown["vacuum_columns"] = [{"name": "dust_removed", "type": "long", "doc": "Bytes of dust."}]
    grown["secret_knobs"] = [{"name": "knob_a", "type": "string", "doc": "A knob | with a pipe."}]
    text = gen_reference.render(grown)
    vacuum = text[text.index("\n## vacuum\n"):]
    assert "`lance.vacuum`" in text
    assert "| 2 | `depth` | bigint | none | >= 2 | How deep to vacuum. |" in vacuum
    assert "| `dust_removed` | bigint | Bytes of dust. |" in vacuum
    assert "### Secret knobs" in text
    assert "A knob \\| with a pipe." in text      # a pipe does not break the table


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
