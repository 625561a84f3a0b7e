"""The import graph of pipeline/ and scripts/, read from the source with ast: no cycles (imports
inside functions count too: they only hide a cycle from import time), stages are called by the
CLI alone, never by the libraries they orchestrate, and the package never reaches into scripts/
(an installed wheel has no scripts package)."""

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("pipeline", "scripts")
STAGES = "pipeline.stages"
STAGE_CALLERS = ("pipeline.cli",)  # runs pipeline.stages.<name> by its name


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def known(name: str) -> str | None:
    """The module of ours that `import name` loads last (a name inside a module: that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            continue  # never runs
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _imports(child)


def imported(module: str) -> set[str]:
    """Our modules that `module` imports, anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        out.update(filter(None, map(known, names)))
    out.discard(module)
    return out


GRAPH = {module: imported(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read_from_both_packages():
    # the reader resolves absolute, relative and from-imports of ours: a graph without these
    # edges would pass every check below by seeing nothing
    assert "pipeline.request.sampling_params" in GRAPH["pipeline.engine"]
    assert "pipeline.engine.core.llm_engine" in GRAPH["pipeline.engine.core.async_engine"]
    assert "scripts.engine_run" in GRAPH["scripts.bench_engine"]
    assert "pipeline.bench.metrics" in GRAPH["scripts.engine_run"]
    assert "pipeline.synthetic.shapes" in GRAPH["scripts.bench_ab"]


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles_in_pipeline_or_scripts():
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("package", ["pipeline.bench", "pipeline"])
def test_no_library_module_imports_a_stage(package):
    callers = {
        module: sorted(m for m in targets if m == STAGES or m.startswith(STAGES + "."))
        for module, targets in GRAPH.items()
        if module.startswith(package)
        and not module.startswith(STAGES)
        and module not in STAGE_CALLERS
    }
    assert {module: stages for module, stages in callers.items() if stages} == {}


def test_the_package_imports_nothing_from_scripts():
    reaching = {
        module: sorted(m for m in targets if m.split(".")[0] == "scripts")
        for module, targets in GRAPH.items()
        if module.split(".")[0] == "pipeline"
    }
    assert {module: names for module, names in reaching.items() if names} == {}


# "scripts.x" or "scripts.x:function": a module imported by its name at run time (a weights
# loader hook, importlib.import_module), which the graph above cannot see
SCRIPTS_MODULE_NAME = re.compile(r"scripts(\.\w+)+(:\w+)?")


def test_the_package_names_no_scripts_module_to_import():
    named = {
        module: sorted(
            node.value
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SCRIPTS_MODULE_NAME.fullmatch(node.value)
        )
        for module, path in MODULES.items()
        if module.split(".")[0] == "pipeline"
    }
    assert {module: names for module, names in named.items() if names} == {}


def engine_room(module: str) -> str | None:
    """pipeline.engine.<room>[...] -> room (a sub-package or a top-level module), None outside
    the engine and for its package face (pipeline.engine itself re-exports the API)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["pipeline", "engine"] and len(parts) > 2 else None


def test_the_engine_rooms_import_only_downward():
    # core -> execution -> models -> layers -> quant -> kernels, with engine_config, parallel and
    # scheduling beside them: a loop between two rooms would mean a room reaches back up
    rooms: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        room = engine_room(module)
        if room is not None:
            rooms.setdefault(room, set()).update(
                t for t in map(engine_room, targets) if t is not None and t != room
            )
    assert {"core", "execution", "scheduling", "layers", "kernels"} <= rooms.keys()
    assert cycles(rooms) == []
    assert "core" not in set().union(*rooms.values())  # the loop is the top: nothing imports it
