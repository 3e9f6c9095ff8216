"""The README's code map against the tree: every module it names exists, and every module of playground/ is named
in its package's lines (a new module cannot land without its line in the map)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"\b((?:\w+/)+)|\b(\w+\.py)\b")  # a folder may be nested: "decoding/strategies/"


def code_map(readme: str) -> set[str]:
    """The modules the map names, as paths under playground/: a line of a package ("  decoding/ ...", and the
    more indented lines after it) names that package's modules; "kernels/" inside a line switches to kernels for
    the rest of the line; a line that starts with a module is the top level again."""
    lines = readme.split("\nplayground/\n", 1)[1].splitlines()
    named: set[str] = set()
    package = ""
    for line in lines:
        if not line.startswith(" "):  # the map of playground/ ends at the next top-level line (docs/)
            break
        if not line.startswith("   "):  # a new entry at the package level
            package = ""
        for folder, module in TOKEN.findall(line):
            if folder:
                package = folder
            else:
                named.add(package + module)
    return named


def modules() -> set[str]:
    package = ROOT / "playground"
    return {str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py"}


def test_the_code_map_names_every_module_and_only_modules_that_exist():
    named = code_map((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sorted(n for n in named if not (ROOT / "playground" / n).exists()) == []
    assert sorted(modules() - named) == []


def test_the_map_reader_sees_a_missing_module():
    text = "x\nplayground/\n  a.py   one\n  pkg/   b.py c.py\n         d.py; kernels/ e.py\n  f.py g.py\ndocs/\n"
    assert code_map(text) == {"a.py", "pkg/b.py", "pkg/c.py", "pkg/d.py", "kernels/e.py", "f.py", "g.py"}


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
