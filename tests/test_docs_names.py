"""Docs that hold (issue 45): every `module.name` a doc cites in code spans (docs/*.md, README.md) names something in
the code. A span whose first word is a playground module (`runner.Session.compare`, `kernels.ops.why_not()`,
`playground.ui.sessions`) must resolve, attribute by attribute; spans about other things (`torch.cat`, file names
such as `app.py`) are not checked. A renamed or removed function then fails here instead of drifting."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPAN = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
FILE_ENDINGS = {"py", "md", "json", "txt", "sh", "html", "png", "toml", "ini", "c", "so", "yml", "yaml", "log", "gguf"}


def modules() -> dict[str, list[str]]:
    """Each playground module's last name -> the dotted names of the modules called so."""
    found: dict[str, list[str]] = {}
    for path in (ROOT / "playground").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.setdefault(parts[-1], []).append(".".join(parts))
    return found


def resolves(module: str, names: list[str]) -> bool:
    try:
        obj = importlib.import_module(module)
        for name in names:
            if isinstance(obj, types.ModuleType) and not hasattr(obj, name):
                obj = importlib.import_module(f"{obj.__name__}.{name}")
            else:
                obj = getattr(obj, name)
    except (ImportError, AttributeError):
        return False
    return True


def citations() -> list[tuple[str, str]]:
    known = modules()
    cited = []
    for doc in sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]):
        for match in SPAN.finditer(doc.read_text()):
            parts = match.group(1).split(".")
            if parts[0] == "playground":
                parts = parts[1:]
            if parts[-1] in FILE_ENDINGS or parts[0] not in known:
                continue
            cited.append((doc.name, match.group(1)))
    return cited


def test_the_docs_cite_code_names():
    assert len(citations()) > 40  # the docs cite the code: a pattern that stopped matching would pass vacuously


def test_every_code_name_the_docs_cite_exists():
    known = modules()
    missing = []
    for doc, name in citations():
        parts = name.split(".")
        parts = parts[1:] if parts[0] == "playground" else parts
        if not any(resolves(module, parts[1:]) for module in known[parts[0]]):
            missing.append(f"{doc}: `{name}`")
    assert not missing, "the docs name code that is not there:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", ["candidates.select", "kernels.why_not", "spec.DEFAULT_POLICY"])
def test_the_names_that_drifted_do_not_resolve(name):
    """The three citations issue 45 found stale: the check must fail on them (so it can fail at all)."""
    parts = name.split(".")
    assert not any(resolves(module, parts[1:]) for module in modules()[parts[0]])
