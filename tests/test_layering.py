"""The layers import only what their layer may: views and the pure core never load torch,
transformers or gradio; the engine layer never loads gradio or plotly; only playground/ui/ imports
gradio. Each module is imported in a fresh interpreter, so what another test imported does not
hide a violation. And no module grows past 400 lines."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playground"
MAX_LINES = 400

VIEWS = ["playground.views"] + sorted(f"playground.views.{p.stem}" for p in (PACKAGE / "views").glob("*.py")
                                      if p.stem != "__init__")
PURE = VIEWS + ["playground.trace", "playground.theory", "playground.records", "playground.spec", "playground.treeshape"]
ENGINE = ["playground.engine", "playground.sampling", "playground.drafters", "playground.runner", "playground.tree",
          "playground.staged"]
LAYERS = [(m, ("torch", "transformers", "gradio")) for m in PURE] + [(m, ("gradio", "plotly")) for m in ENGINE]


def loaded_by(module: str, forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden top-level packages that importing `module` loads, in a fresh interpreter."""
    code = (f"import sys, json; import {module}; "
            f"print(json.dumps(sorted(m for m in {list(forbidden)!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"import {module} failed:\n{done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_views_modules_are_found():
    assert {"playground.views.tokens", "playground.views.charts", "playground.views.step", "playground.views.theory",
            "playground.views.grid", "playground.views.export_code"} <= set(VIEWS)


@pytest.mark.parametrize("module, forbidden", LAYERS, ids=[m for m, _ in LAYERS])
def test_each_layer_imports_only_what_it_may(module, forbidden):
    assert loaded_by(module, forbidden) == []


def test_the_check_sees_a_layer_that_loads_a_forbidden_package():
    assert loaded_by("playground.trace", ("pandas", "gradio")) == ["pandas"]


GRADIO_IMPORT = re.compile(r"^\s*(?:from\s+gradio\b|import\s+(?:[\w.]+\s*,\s*)*gradio\b)", re.MULTILINE)


def test_only_the_ui_package_imports_gradio():
    ui = PACKAGE / "ui"
    offenders = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
                 if ui not in p.parents and GRADIO_IMPORT.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_gradio_import_check_recognises_imports():
    assert GRADIO_IMPORT.search("import gradio as gr")
    assert GRADIO_IMPORT.search("    from gradio import Blocks")
    assert GRADIO_IMPORT.search("import os, gradio")
    assert not GRADIO_IMPORT.search("import gradio_client_free_module")
    assert not GRADIO_IMPORT.search("# no gradio here: import nothing")


def test_no_module_is_over_400_lines():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
               for p in sorted(PACKAGE.rglob("*.py"))}
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}
