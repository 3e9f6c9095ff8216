"""Docs that hold (issue 45): every `module.name` a doc cites in code spans (docs/*.md, README.md) names something in
the code. A span whose first word is a playground module (`runner.Session.compare`, `kernels.ops.why_not()`,
`playground.ui.sessions`) must resolve, attribute by attribute; spans about other things (`torch.cat`, file names
such as `app.py`) are not checked. A renamed or removed function then fails here instead of drifting.

The code's own prose too (issue 56): in the comments and docstrings of playground/, tests/, scripts/ and app.py, every
code span and every `playground.`-prefixed name resolves, and every path into the project (playground/..., tests/...,
or one of playground's packages such as decoding/...; a bare file name such as records.py) names a file or folder that
exists. A module moved or renamed then fails here, in the comment that still points at its old place."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
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


# ---------------------------------------------------------------- the code's comments and docstrings (issue 56)

CODE_FILES = sorted(
    [*(ROOT / "playground").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
) + [ROOT / "app.py"]
PATH = re.compile(r"(?<![\w/.:-])((?:[A-Za-z_][\w.-]*/)+[\w.*-]*[\w*])")  # a/b/c.py, tests/golden/*.json
BARE = re.compile(r"(?<![\w/.-])([A-Za-z_]\w*\.py)\b")  # records.py
DOTTED = re.compile(r"(?<![\w.])(playground(?:\.[A-Za-z_]\w*)+)")  # playground.run.recorded
OTHERS = ("vllm/v1/",)  # vLLM's own source tree, which the comments cite (our vllm/ has no v1/)


def prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of a module's source: (line, text)."""
    found = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return sorted(found)


def path_exists(path: str, root: Path = ROOT) -> bool:
    """A path as prose writes it: from the repository's root or from playground/ ("decoding/tree.py"), a glob, or a
    module's name after its file's ("kernels/ops.VARIANTS": kernels/ops.py)."""
    stem, dot, rest = path.rpartition("/")[2].partition(".")
    tails = [path] + ([f"{path.rpartition('/')[0]}/{stem}.py"] if dot and rest not in FILE_ENDINGS else [])
    return any(
        any(base.glob(tail)) if "*" in tail else (base / tail).exists()
        for base in (root, root / "playground")
        for tail in tails
    )


def stale_in_prose(files: list[Path], root: Path = ROOT) -> list[str]:
    """Every path into the project, bare .py name and code name in the files' comments and docstrings that names
    nothing: "file:line: what"."""
    tops = {"playground", "tests", "docs", "scripts"} | {p.name for p in (root / "playground").iterdir() if p.is_dir()}
    py_names = {p.name for folder in ("playground", "tests", "scripts") for p in (root / folder).rglob("*.py")}
    known = modules()
    stale = []
    for path in files:
        where = path.relative_to(root)
        for line, text in prose(path.read_text(encoding="utf-8")):
            for cited in PATH.findall(text):
                cited = cited.rstrip(".")
                if cited.split("/")[0] in tops and not cited.startswith(OTHERS) and not path_exists(cited, root):
                    stale.append(f"{where}:{line}: {cited}")
            stale += [f"{where}:{line}: {name}" for name in BARE.findall(text) if name not in py_names | {"app.py"}]
            names = [m.group(1) for m in SPAN.finditer(text)] + DOTTED.findall(text)
            for name in names:
                parts = name.split(".")
                parts = parts[1:] if parts[0] == "playground" and len(parts) > 1 else parts
                if parts[-1] in FILE_ENDINGS or parts[0] not in known:
                    continue
                if not any(resolves(module, parts[1:]) for module in known[parts[0]]):
                    stale.append(f"{where}:{line}: {name}")
    return stale


def test_the_code_prose_names_only_what_exists():
    stale = stale_in_prose(CODE_FILES)
    assert not stale, "comments and docstrings name what is not there:\n" + "\n".join(stale)


def test_the_prose_check_sees_stale_paths_and_names(tmp_path):
    (tmp_path / "playground" / "decoding").mkdir(parents=True)
    (tmp_path / "playground" / "decoding" / "tree.py").write_text("")
    (tmp_path / "tests").mkdir()
    module = tmp_path / "tests" / "test_x.py"
    module.write_text(
        '"""Tests of playground/tree.py (moved: decoding/tree.py), suffix_decoding.py and `spec.no_such_name`."""\n'
        "# playground/decoding/tree.py and decoding/tree.py exist; so does playground.run.spec.RunSpec\n"
        "x = 1  # the path of vLLM's vllm/v1/spec_decode/metrics.py is vLLM's; playground.core.config.Nothing is not\n"
    )
    assert stale_in_prose([module], tmp_path) == [
        "tests/test_x.py:1: playground/tree.py",
        "tests/test_x.py:1: suffix_decoding.py",
        "tests/test_x.py:1: spec.no_such_name",
        "tests/test_x.py:3: playground.core.config.Nothing",
    ]
