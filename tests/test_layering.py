"""The layers, by folder: each package of playground/ imports only the packages below it (MAY_IMPORT, checked for
every module, lazy and TYPE_CHECKING imports included; a package's __main__ is a program above them all), and no
import circle, not even under TYPE_CHECKING. bench and vllm stand side by side: neither imports the other. The pure
layers (core, env, trace, views; the decoding registry too) never load torch, transformers or gradio; the engine's
layers (kernels, engine, models, decoding, run) never load gradio or plotly: each layer's modules are imported in a
fresh interpreter of its own; only playground/ui/ imports gradio. The engine names no strategy, only the spec and the
registry branch on a DrafterKind, and outside decoding/ and config.py a DrafterKind member is named only where a
default is chosen (and in the catalog's pairs): the registry's entry carries the rest. No module grows past 400 lines.
The types of decoding (playground/core/draft.py) sit at the bottom: the acceptance rule and the engine lean on nothing
above them, the model catalog knows no drafter, and the prefix rule is written only in acceptance.py."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playground"
MAX_LINES = 400

# Which package of playground/ may import which, bottom to top: a module imports only its own package and those named
# on its package's line (lazy imports and those under `if TYPE_CHECKING:` counted). Every module is in one of these
# packages, so a module's folder says what it may import; a new package needs its line here.
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),  # the bottom: kinds, config types, records, the theory's math; no environment, no torch
    "env": {"core"},  # the environment (settings) and the network's rules (outbound)
    "trace": {"core"},  # round records -> frames, figures, files; the bench's rows
    "kernels": {"core", "env"},
    "engine": {"core", "env", "kernels"},
    "models": {"core", "env", "kernels", "engine"},
    "decoding": {"core", "env", "kernels", "engine", "models"},
    "run": {"core", "env", "trace", "kernels", "engine", "models", "decoding"},
    "views": {"core", "trace", "decoding", "run"},
    # bench and vllm side by side: neither imports the other (what both need is below: trace.results, trace.counters,
    # models.model_folder); the ui and the program python -m playground.bench (PROGRAM) put them together
    "vllm": {"core", "env", "trace", "models", "decoding", "run", "views"},
    "bench": {"core", "env", "trace", "kernels", "engine", "models", "decoding", "run", "views"},
    "ui": {"core", "env", "trace", "kernels", "engine", "models", "decoding", "run", "views", "vllm", "bench"},
}
# A package's __main__ is a program (`python -m playground.bench`), not a module of its package's layer: it stands
# above every layer and composes them (bench's command line with vLLM's peer, vllm.benchmark), so it may import any
# package, and no module imports it.
PROGRAM = "__main__"
# The third-party packages a layer's modules never load when imported: the pure layers no torch, transformers or
# gradio; the engine's layers no gradio or plotly; the registry (playground.decoding itself) no torch either.
PURE = ("torch", "transformers", "gradio")
NO_UI = ("gradio", "plotly")
FORBIDDEN = {"core": PURE, "env": PURE, "trace": PURE, "views": PURE} | {
    p: NO_UI for p in ("kernels", "engine", "models", "decoding", "run")
}


def is_program(module: str) -> bool:
    return module.rsplit(".", 1)[-1] == PROGRAM


def package_of(module: str) -> str:
    """The package of playground/ a module sits in ("playground.run.spec" -> "run"); "" for playground/__init__.py."""
    return module.split(".")[1] if "." in module else ""


def modules_of(package: str) -> list[str]:
    """The modules of one package of playground/, its __init__ first."""
    files = sorted((PACKAGE / package).rglob("*.py"), key=lambda p: (p.name != "__init__.py", p))
    return [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in files]


def loaded_by(modules: list[str], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """Import `modules` one after another in one fresh interpreter: each module whose import loaded a forbidden
    top-level package -> those it loaded (a later module that imports one too is hidden until the first is fixed)."""
    code = (
        "import importlib, sys, json\n"
        "found = {}\n"
        f"for m in {modules!r}:\n"
        f"    before = {{f for f in {list(forbidden)!r} if f in sys.modules}}\n"
        "    importlib.import_module(m)\n"
        f"    new = sorted(f for f in {list(forbidden)!r} if f in sys.modules and f not in before)\n"
        "    if new: found[m] = new\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"importing {modules} failed:\n{done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_package_is_in_the_table():
    """A module directly in playground/ or a new package has no line in MAY_IMPORT: the layering cannot say what it
    may import."""
    found = {package_of(m) for m in import_graph(ROOT)} - {""}
    assert found == set(MAY_IMPORT)
    assert {p.name for p in PACKAGE.glob("*.py")} == {"__init__.py"}


def test_the_table_has_no_circle():
    assert circles({p: set(below) for p, below in MAY_IMPORT.items()}) == []


def upward_imports(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """Each import the table does not allow ("importer -> imported"), and each module of a package it lacks; a
    program (a package's __main__) may import any package, and no module may import a program."""

    def allowed(m: str, t: str) -> bool:
        return not is_program(t) and (is_program(m) or package_of(t) in table[package_of(m)] | {package_of(m)})

    unknown = [f"{m}: no line in the table" for m in sorted(graph) if package_of(m) not in table]
    return unknown + [
        f"{m} -> {t}" for m in sorted(graph) if package_of(m) in table for t in sorted(graph[m]) if not allowed(m, t)
    ]


def test_each_package_imports_only_the_packages_below_it():
    """playground/__init__.py (package "") imports nothing."""
    assert upward_imports(import_graph(ROOT, typing=True), {"": set()} | MAY_IMPORT) == []


def test_the_layering_check_sees_an_import_upward():
    graph = {
        "playground.core.a": {"playground.core.b"},  # inside its own package: allowed
        "playground.core.b": {"playground.run.c"},  # the bottom imports the run: refused
        "playground.run.c": {"playground.core.a"},
        "playground.new.d": set(),  # a package the table does not know
        "playground.core.__main__": {"playground.run.c"},  # a program: above every layer
        "playground.run.e": {"playground.core.__main__"},  # a module importing a program: refused
    }
    assert upward_imports(graph, {"core": set(), "run": {"core"}}) == [
        "playground.new.d: no line in the table",
        "playground.core.b -> playground.run.c",
        "playground.run.e -> playground.core.__main__",
    ]


@pytest.mark.parametrize("package, other", [("bench", "vllm"), ("vllm", "bench")])
def test_bench_and_vllm_load_nothing_of_each_other(package, other):
    """Issue 56: bench and vllm import nothing of each other (MAY_IMPORT), checked as their modules run too:
    importing every module of one (its program aside) loads no module of the other."""
    modules = [m for m in modules_of(package) if not is_program(m)]
    assert loaded_by(modules, (f"playground.{other}",)) == {}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_each_layer_loads_only_what_it_may(package):
    assert loaded_by(modules_of(package), FORBIDDEN[package]) == {}


def test_the_registry_loads_no_torch():
    assert loaded_by(["playground.decoding"], PURE) == {}


def test_the_check_sees_a_layer_that_loads_a_forbidden_package():
    assert loaded_by(["playground.core.config", "playground.trace"], ("pandas", "gradio")) == {
        "playground.trace": ["pandas"]
    }


GRADIO_IMPORT = re.compile(r"^\s*(?:from\s+gradio\b|import\s+(?:[\w.]+\s*,\s*)*gradio\b)", re.MULTILINE)


def test_only_the_ui_package_imports_gradio():
    ui = PACKAGE / "ui"
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted(PACKAGE.rglob("*.py"))
        if ui not in p.parents and GRADIO_IMPORT.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_gradio_import_check_recognises_imports():
    assert GRADIO_IMPORT.search("import gradio as gr")
    assert GRADIO_IMPORT.search("    from gradio import Blocks")
    assert GRADIO_IMPORT.search("import os, gradio")
    assert not GRADIO_IMPORT.search("import gradio_client_free_module")
    assert not GRADIO_IMPORT.search("# no gradio here: import nothing")


def code_lines(source: str) -> int:
    """The lines of code in a module's source: lines with a token other than a comment, those of docstrings (a
    module's, a class's or a function's first statement, a string) not counted, nor blank lines."""
    tree = ast.parse(source)
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                prose |= set(range(first.lineno, first.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            code |= set(range(token.start[0], token.end[0] + 1))
    return len(code - prose)


def test_no_module_is_over_400_lines_of_code():
    """The cap measures code: a docstring or a comment that says why costs nothing against it."""
    lengths = {
        str(p.relative_to(ROOT)): code_lines(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))
    }
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}


def test_the_cap_counts_code_only():
    source = (
        '"""A module.\n\nIts docstring, three lines."""\n'
        "\n"
        "# a comment\n"
        "x = 1  # a comment after code counts as code\n"
        "def f():\n"
        '    """A function\'s docstring."""\n'
        "    return (\n"
        "        x\n"
        "    )\n"
        'y = """a string that is code,\nnot a docstring"""\n'
    )
    assert code_lines(source) == 7


def loop_methods(root: Path) -> list[str]:
    """Every class under root that defines the loop's round itself (a `step` method, or reads the engine's clock,
    clock(device)): "path:Class"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                clocked = any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "clock" and n.args
                    for n in ast.walk(node)
                )
                if "step" in names or clocked:
                    found.append(f"{path.relative_to(root)}:{node.name}")
    return found


def test_the_decoding_loop_is_written_once():
    """One loop for one prompt and for a batch: only engine.Loop runs a round (step) and times it; the decoders
    (SpeculativeDecoder, batch.BatchedDecoder) say what its parts do."""
    assert loop_methods(PACKAGE) == ["engine/__init__.py:Loop"]


def test_the_loop_check_sees_a_second_loop(tmp_path):
    (tmp_path / "other.py").write_text("class Mine:\n    def step(self):\n        t0 = clock(self.device)\n")
    assert loop_methods(tmp_path) == ["other.py:Mine"]


# ---------------------------------------------------------------- strategies stay behind the registry

STRATEGY_MODULES = re.compile(
    r"playground\.decoding\.(?!base\b|cache\b)\w+|from playground\.decoding import (?!.*\bbase\b)"
)
KIND_BRANCH = re.compile(r"(?:\bis(?: not)?|==|!=|\bin)\s*\(?\s*DrafterKind\.|\{\s*DrafterKind\.\w+\s*:")


def test_the_engine_names_no_strategy():
    """engine.py reaches drafters through playground.core.draft's protocol only: no strategy module, no strategy name."""
    source = (PACKAGE / "engine" / "__init__.py").read_text(encoding="utf-8")
    assert not STRATEGY_MODULES.search(source)
    assert not re.search(
        r"DrafterKind|\b(?:Model|EarlyExit|PromptLookup|No|CrossTokenizer|Staged|Tree)Drafter\b|\.tree\b", source
    )


def test_only_the_spec_and_the_registry_branch_on_a_drafter_kind():
    """The export and the bench have no table keyed by kind: a strategy's peers are its entry's (Strategy.hf, .vllm)."""
    allowed = {PACKAGE / "run" / "spec.py", PACKAGE / "decoding" / "__init__.py"}
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p not in allowed
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if KIND_BRANCH.search(line)
    ]
    assert offenders == []


def test_the_branch_check_recognises_branches():
    for line in (
        "if kind is DrafterKind.STAGED:",
        "kind is not DrafterKind.DRAFT_MODEL",
        "x == DrafterKind.EARLY_EXIT",
        "if kind in (DrafterKind.DRAFT_MODEL, DrafterKind.STAGED):",
        "{DrafterKind.DRAFT_MODEL: 1}",
    ):
        assert KIND_BRANCH.search(line), line
    for line in (
        "DrafterSpec(DrafterKind.TARGET_ALONE)",
        "name = DrafterKind.STAGED.value",
        "default=DrafterKind.DRAFT_MODEL",
    ):
        assert not KIND_BRANCH.search(line), line


# ---------------------------------------------------------------- no string dispatch on a strategy's name

# Outside decoding/ no module branches on a strategy's name or a peer's adapter name (issue 56): a strategy's HF and
# vLLM peers are data on its Strategy record, read by the registry's builders (hf_generate, speculative_config).


def strategy_names() -> set[str]:
    """Every name a strategy goes by: its kind's value, its short name, its HF and vLLM adapters' names."""
    from playground import decoding

    names = {n for k, s in decoding.REGISTRY.items() for n in (k.value, s.short, s.hf.adapter, s.vllm.adapter)}
    return names - {"", decoding.NONE}


def name_dispatch(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Where `source` branches on one of `names` as a string: a comparison (==, !=, in) with it, a dict literal keyed
    by it, a match case on it: (line, name)."""

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        return [x for e in node.elts for x in strings(e)] if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            sides = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.MatchValue):
            sides = [node.value]
        else:
            continue
        found += [(node.lineno, x) for side in sides for x in strings(side) if x in names]
    return sorted(found)


def test_no_string_dispatch_on_a_strategy_outside_decoding():
    names = strategy_names()
    dispatching = {
        str(p.relative_to(ROOT)): found
        for p in PACKAGE.rglob("*.py")
        if PACKAGE / "decoding" not in p.parents and (found := name_dispatch(p.read_text(encoding="utf-8"), names))
    }
    assert dispatching == {}  # a strategy's peers are data on its Strategy record (issue 56)


def test_the_dispatch_check_sees_a_branch_on_a_name():
    source = (
        'if adapter == "ngram": pass\n'
        'TEMPLATES = {"assisted": 1, "other": 2}\n'
        'ok = method in ("suffix", "x")\n'
        'label = "ngram"  # a name, not a branch\n'
        'match kind:\n    case "staged": pass\n'
    )
    assert name_dispatch(source, {"ngram", "assisted", "suffix", "staged"}) == [
        (1, "ngram"),
        (2, "assisted"),
        (3, "suffix"),
        (6, "staged"),
    ]


# ---------------------------------------------------------------- a strategy lives in its registry entry

# Outside decoding/ and config.py, the files that may name a DrafterKind member other than as a default: the
# catalog's pairs name the drafter their tokenizers need (models.Pair.drafter). At most two.
NAMING_KINDS = {"playground/models/catalog.py"}


def kind_members(source: str) -> list[tuple[int, bool]]:
    """Each DrafterKind member named in `source`: (its line, whether it is a default there: a parameter's default, a
    class field's default, a call's `default=` or `value=` (a CLI option's, a widget's first value), or the fallback
    of `.get(key, fallback)`)."""
    tree = ast.parse(source)
    defaults: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            roots = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        elif isinstance(node, ast.ClassDef):
            roots = [s.value for s in node.body if isinstance(s, ast.AnnAssign) and s.value is not None]
        elif isinstance(node, ast.keyword) and node.arg in ("default", "value"):
            roots = [node.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            roots = node.args[1:2]
        else:
            continue
        defaults |= {id(n) for root in roots for n in ast.walk(root)}
    return [
        (n.lineno, id(n) in defaults)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "DrafterKind"
        if n.attr.isupper()
    ]


def kinds_named(root: Path) -> dict[str, list[int]]:
    """The files under root's playground/ (decoding/ and config.py aside) and app.py that name a DrafterKind member
    other than as a default -> those lines."""
    package = root / "playground"
    files = [p for p in sorted(package.rglob("*.py")) if package / "decoding" not in p.parents]
    out = {}
    for path in [p for p in files if p != package / "core" / "config.py"] + [root / "app.py"]:
        lines = sorted(line for line, default in kind_members(path.read_text(encoding="utf-8")) if not default)
        if lines:
            out[str(path.relative_to(root))] = lines
    return out


def test_a_drafter_kind_is_named_only_in_the_registry_and_where_a_default_is_chosen():
    """Export, bench and spec read a strategy's peers, CLI names and options from its registry entry (Strategy):
    naming a kind elsewhere is a strategy living in another file."""
    named = kinds_named(ROOT)
    assert {path: lines for path, lines in named.items() if path not in NAMING_KINDS} == {}
    assert len(NAMING_KINDS) <= 2


def test_the_kind_check_tells_a_default_from_a_use(tmp_path):
    source = (
        "class Pair:\n"
        "    drafter: DrafterKind = DrafterKind.DRAFT_MODEL\n"  # a field's default
        "def of(kind=DrafterKind.DRAFT_MODEL, *, other=DrafterKind.STAGED): ...\n"  # parameters' defaults
        "p.add_argument('--drafters', default=[DrafterKind.DRAFT_MODEL.value])\n"
        "gr.Radio(choices, value=DrafterKind.DRAFT_MODEL.value)\n"
        "item.get('drafter', DrafterKind.DRAFT_MODEL)\n"
        "base = DrafterSpec(DrafterKind.TARGET_ALONE)\n"  # uses: lines 7 to 10
        "HF = {DrafterKind.STAGED: 'assisted'}\n"
        "if kind is DrafterKind.EARLY_EXIT: pass\n"
        "name = DrafterKind.SUFFIX.value\n"
        "kinds = [k.value for k in DrafterKind]\n"  # the enum, no member
    )
    assert sorted(kind_members(source)) == [(2, True), (3, True), (3, True), (4, True), (5, True), (6, True)] + [
        (line, False) for line in (7, 8, 9, 10)
    ]
    (tmp_path / "playground" / "decoding").mkdir(parents=True)
    (tmp_path / "playground" / "core").mkdir()
    (tmp_path / "playground" / "core" / "config.py").write_text("X = DrafterKind.STAGED\n")  # the kinds' own module
    (tmp_path / "playground" / "decoding" / "a.py").write_text("X = DrafterKind.STAGED\n")  # the registry
    (tmp_path / "playground" / "views.py").write_text(source)
    (tmp_path / "app.py").write_text("spec = DrafterSpec.of(DrafterKind.DRAFT_MODEL)\n")
    assert kinds_named(tmp_path) == {"app.py": [1], "playground/views.py": [7, 8, 9, 10]}


# ---------------------------------------------------------------- no import circle


def import_graph(root: Path, package: str = "playground", typing: bool = False) -> dict[str, set[str]]:
    """Each module of `package` under `root` -> the modules of the package it imports, wherever the import statement
    stands (a function's lazy import runs too); those under `if TYPE_CHECKING:` (never run) only when `typing`.
    `from a import b` names the module a.b when there is one, else a."""
    files = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (root / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body
            for n in ast.walk(stmt)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & files.keys()
                targets |= subs | ({node.module} if len(subs) < len(node.names) else set())
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """Not even through a type's import under TYPE_CHECKING: a type from above is a dependency upward too."""
    assert circles(import_graph(ROOT, typing=True)) == []


def test_the_circle_check_finds_a_circle_through_a_lazy_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("thing = 1\n\ndef later():\n    from pkg import a  # a lazy import runs too\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == set()
    assert circles(graph) == [["pkg.a", "pkg.b"]]
    (package / "b.py").write_text("thing = 1\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nfrom pkg.c import x\n")
    assert circles(import_graph(tmp_path, "pkg")) == []
    assert circles(import_graph(tmp_path, "pkg", typing=True)) == [["pkg.a", "pkg.c"]]  # through c's TYPE_CHECKING


# ---------------------------------------------------------------- the types at the bottom


def test_the_types_at_the_bottom_import_nothing_of_the_playground():
    """playground/core/draft.py (Draft, Drafter, Tree, Verdict) is below acceptance.py, the engine and the registry: it
    imports no module of the package when it runs (the names in its types only under TYPE_CHECKING)."""
    graph = import_graph(ROOT)
    assert graph["playground.core.draft"] == set()
    for above in (
        "playground.engine.acceptance",
        "playground.engine",
        "playground.decoding.chain",
        "playground.decoding.tree",
    ):
        assert "playground.core.draft" in graph[above], above


def test_the_rule_and_the_engine_lean_on_nothing_above_them():
    """acceptance.py imports no strategy (decoding/tree.py's Tree is the bottom's); the engine imports nothing of
    playground.decoding, so importing it never runs the registry's __init__; the model catalog knows no drafter
    (neither the registry nor the spec), lazy imports counted."""
    graph = import_graph(ROOT)
    decoding = {m for m in graph if m == "playground.decoding" or m.startswith("playground.decoding.")}
    assert graph["playground.engine.acceptance"] & decoding == set()
    assert graph["playground.engine"] & decoding == set()
    assert graph["playground.models.catalog"] & (decoding | {"playground.run.spec"}) == set()
    code = "import sys, playground.engine; print('playground.decoding' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_the_prefix_rule_is_written_only_in_acceptance():
    """The greedy prefix rule (a cumulative product of the accepted drafts) lives in acceptance.kept_prefix: the
    engine, batch.py and the strategies call it instead of writing their own."""
    offenders = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PACKAGE / "engine" / "acceptance.py"
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "cumprod" in line
    ]
    assert offenders == []
