"""The import structure stays as pyproject.toml's contract draws it: lower layers never import
higher ones, and no modules import each other (directly or round a longer cycle)."""

import re
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).parent.parent


def test_the_layer_contract_is_kept(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0


def test_no_import_cycles():
    graph = grimp.build_graph("modformer", exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("modformer")} for m in modules}
    # A package's __init__ gathers its modules: an edge into a package from inside it is not a cycle.
    for m in modules:
        edges[m] = {i for i in edges[m] if not m.startswith(i + ".")}
    cycles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for i in sorted(edges.get(m, ())):
            if state.get(i) == "open":
                cycles.append(path[path.index(i):] + [i])
            elif i not in state:
                visit(i, path + [i])
        state[m] = "done"

    for m in modules:
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_library_names_no_papers_budget():
    """The library knows no paper: budgets against a paper's scripts, its construction's names
    and its report sections live in modformer/papers/<paper> (which the layer contract keeps
    every other module from importing). A module outside it that states such a budget fails."""
    import re

    budget_words = re.compile(r"REFERENCE_BUDGETS|REFERENCE_WIDTH|PAPER_BUDGETS|paper_budget|of the paper's"
                              r"|depth\.py's|max_steps x train_size")
    package = ROOT / "modformer"
    naming = [str(path.relative_to(ROOT)) for path in package.rglob("*.py")
              if "papers" not in path.relative_to(package).parts and budget_words.search(path.read_text())]
    assert naming == []


def test_nothing_in_the_library_imports_the_papers_folder():
    """The in-tree papers are plugins: loaded through the entry-point group modformer.papers
    (pyproject.toml), never imported or scanned by the library itself."""
    import tomllib

    graph = grimp.build_graph("modformer")
    outside = [m for m in graph.modules if not m.startswith("modformer.papers")]
    importers = sorted((m, i) for m in outside for i in graph.find_modules_directly_imported_by(m)
                       if i.startswith("modformer.papers"))
    assert importers == []
    # the folder's own __init__ gathers nothing: each paper is loaded by its entry point alone
    assert not re.search(r"^\s*(import|from)\s", (ROOT / "modformer" / "papers" / "__init__.py").read_text(), re.M)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["modformer.papers"]
    assert declared == {name: f"modformer.papers.{name}:register"
                        for name in ("random_attention", "llm_modules", "knowledge")}
