"""The shape of the code, read from the source with `ast` (nothing is imported):

- backend/ and ui/ modules import each other without cycles (a cycle makes import order
  matter and hides which module owns what), but for the ones still named in KNOWN_CYCLES;
- backend/ never imports gradio or ui/: the backend is the app without its page, used by
  the CLI, the trainer's helpers and the tests alike;
- what `python app.py` imports at module level, followed through every RocBoard module,
  reaches none of the heavy ML libraries (the web process stays light; the running check is
  tests/test_light_web_process.py).

Imports inside functions count as edges too (they still tie two modules together), and so
do those under `if TYPE_CHECKING:`: they never run, but a module that needs another's types
to be read is tied to it all the same (a cycle hidden there is still a cycle). The heavy
libraries are looked for only along imports that run when a module is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("backend", "ui")
HEAVY = ("torch", "transformers", "llamafactory", "peft", "trl", "datasets", "accelerate", "deepspeed")


@dataclass(frozen=True)
class Import:
    target: str  # a RocBoard module, or a third-party top-level name
    line: int
    module_level: bool  # runs when the importing module is imported
    types_only: bool = False  # under `if TYPE_CHECKING:`: never runs, names types only


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module under backend/ and ui/."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement, with whether it runs at import time (not inside a function; a
    class body or an `if`/`try` at the top level still does) and whether it is for types only
    (under `if TYPE_CHECKING:`, which never runs: never at import time either)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []

    def visit(node: ast.AST, module_level: bool, types_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for body in child.body:
                    visit_one(body, False, True)
                for orelse in child.orelse:
                    visit_one(orelse, module_level, types_only)
                continue
            visit_one(child, module_level, types_only)

    def visit_one(child: ast.AST, module_level: bool, types_only: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append((child, module_level, types_only))
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            visit(child, False, types_only)
        else:
            visit(child, module_level, types_only)

    visit(tree, True, False)
    return found


def _resolve(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The RocBoard modules (or third-party top-level names) one import statement loads."""
    if isinstance(node, ast.Import):
        return [alias.name if alias.name in known else alias.name.split(".")[0] for alias in node.names]
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] not in PACKAGES:
        return [base.split(".")[0]]
    # `from backend import runs` loads the module backend.runs; `from backend.runs import X`
    # loads backend.runs, whatever X is.
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return submodules or [base]


def import_graph() -> dict[str, list[Import]]:
    modules = module_files()
    known = set(modules)
    graph: dict[str, list[Import]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = []
        for node, module_level, types_only in _import_nodes(tree):
            for target in _resolve(module, path, node, known):
                if target != module:
                    edges.append(Import(target, node.lineno, module_level, types_only))
        graph[module] = edges
    return graph


def tied_groups(graph: dict[str, list[Import]], within: str) -> list[list[str]]:
    """The groups of modules under `within` that import each other round (strongly connected:
    each reaches every other), each sorted (Tarjan's algorithm)."""
    nodes = sorted(m for m in graph if m == within or m.startswith(within + "."))
    inside = set(nodes)
    successors = {m: sorted({e.target for e in graph[m] if e.target in inside}) for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in successors[node]:
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in nodes:
        if node not in index:
            connect(node)
    return sorted(groups)


def cycles(graph: dict[str, list[Import]], within: str) -> list[list[str]]:
    """The import cycles among modules under `within`: one shortest cycle per strongly
    connected group of modules (tied_groups, then a search inside each group)."""
    successors = {m: sorted({e.target for e in edges if e.target in graph}) for m, edges in graph.items()}
    found = []
    for group in tied_groups(graph, within):
        members = set(group)
        start = group[0]
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            next_frontier = []
            for node in frontier:
                for successor in successors[node]:
                    if successor == start:
                        cycle = paths[node] + [start]
                        break
                    if successor in members and successor not in paths:
                        paths[successor] = paths[node] + [successor]
                        next_frontier.append(successor)
                if cycle:
                    break
            frontier = next_frontier
        found.append(cycle or group)
    return found


def describe(cycle: list[str], graph: dict[str, list[Import]]) -> str:
    steps = []
    for source, target in pairwise(cycle):
        edge = next(e for e in graph[source] if e.target == target)
        how = " (for types only)" if edge.types_only else "" if edge.module_level else " (in a function)"
        steps.append(f"{source}:{edge.line}{how} -> {target}")
    return "; ".join(steps)


# The import cycles still allowed in backend/ and ui/, each a group of modules that import each
# other round (counting imports in functions and for types only) with why it is allowed for
# now; one not named here fails the test, and so does a named one that is gone or smaller (its
# entry goes or shrinks). Issue 28 began with two, hidden behind TYPE_CHECKING and imports in
# functions: config <-> other_keys <-> distributed <-> placement (untied by config/run_form.py
# and other_keys' Protocols) and findings <-> i18n (translate_finding moved into findings).
# None is left: keep it so.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _cycle_lines(groups: list[list[str]], graph: dict[str, list[Import]]) -> str:
    shown = []
    for group in groups:
        cycle = cycles({m: [e for e in graph[m] if e.target in group] for m in group}, group[0].split(".")[0])[0]
        shown.append(f"  {sorted(group)}\n    {describe(cycle, graph)}")
    return "\n".join(shown)


def test_backend_modules_import_each_other_without_cycles():
    graph = import_graph()
    found = tied_groups(graph, "backend") + tied_groups(graph, "ui")
    new = [group for group in found if frozenset(group) not in KNOWN_CYCLES]
    assert not new, "import cycles in backend/ or ui/ (imports in functions and for types count):\n" + _cycle_lines(new, graph)
    gone = [sorted(group) for group in KNOWN_CYCLES if sorted(group) not in found]
    assert not gone, f"these allowed cycles are gone or smaller now: take them out of KNOWN_CYCLES (what is left: {[sorted(g) for g in found]}):\n  " + "\n  ".join(map(str, gone))


def test_the_backend_never_imports_gradio_or_the_ui():
    graph = import_graph()
    offending = [
        f"{module}:{edge.line} imports {edge.target}"
        for module, edges in graph.items()
        if module.split(".")[0] == "backend"
        for edge in edges
        if edge.target.split(".")[0] in ("gradio", "ui")
    ]
    assert offending == []


def facade_members() -> tuple[set[str], set[str]]:
    """(RocBoard's own public members: what its class body defines; its DESKS), read from
    backend/service/__init__.py."""
    tree = ast.parse((ROOT / "backend" / "service" / "__init__.py").read_text(encoding="utf-8"))
    board = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "RocBoard")
    members: set[str] = set()
    desks: set[str] = set()
    for node in board.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    members.add(target.id)
                    if target.id == "DESKS":
                        desks = set(ast.literal_eval(node.value))
    return {name for name in members if not name.startswith("_")}, desks


def _is_board(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "board") or (isinstance(node, ast.Attribute) and node.attr == "board")


def reaches_past_the_facade(source: str, members: set[str], desks: set[str]) -> list[str]:
    """Where `source` (a ui/ module) uses `board` other than through the facade: an attribute
    of it that RocBoard's class does not define (one of the parts its __init__ sets) and is no
    desk, or an attribute of an attribute (`board.<part>.<x>`) but through a desk."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if _is_board(node.value) and node.attr not in members | desks:
            found.append(f"{node.lineno}: board.{node.attr} (not the facade's, nor a desk)")
        if isinstance(node.value, ast.Attribute) and _is_board(node.value.value) and node.value.attr not in desks:
            found.append(f"{node.lineno}: board.{node.value.attr}.{node.attr} (through a part that is no desk)")
    return sorted(found)


def test_the_page_reaches_the_backend_through_the_facade_and_its_desks():
    """ui/ wires widgets and holds no decisions: it calls RocBoard's methods and the desks it
    hands out by name (RocBoard.DESKS), never the parts behind them (docs/architecture.md,
    "The facade")."""
    members, desks = facade_members()
    assert {"run_view", "failure_cause", "adapter_download", "live_runs", "runs_dir"} <= members
    assert desks == {"data", "chat", "evaluations", "exports", "validation", "sweeps"}
    offending = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "ui").rglob("*.py")) for line in reaches_past_the_facade(path.read_text(encoding="utf-8"), members, desks)]
    assert offending == []


def test_the_facade_check_sees_a_reach_through_a_part():
    members, desks = {"runs", "live_runs"}, {"chat"}
    source = "board.runs()\nboard.chat.status()\nboard.run_manager.live_runs()\nself.board.store.root\nrm = board.run_manager\n"
    assert reaches_past_the_facade(source, members, desks) == [
        "3: board.run_manager (not the facade's, nor a desk)",
        "3: board.run_manager.live_runs (through a part that is no desk)",
        "4: board.store (not the facade's, nor a desk)",
        "4: board.store.root (through a part that is no desk)",
        "5: board.run_manager (not the facade's, nor a desk)",
    ]


# Names that mean a RocBoard object wherever they stand; `Any` on one hides its real type.
ROCBOARD_NAMES = {
    "board": "RocBoard",
    "store": "RunStore",
    "launcher": "Launcher",
    "sampler": "Sampler",
    "preset": "HardwarePreset",
    "plan": "DistributedPlan",
    "snapshot": "a snapshot type",
    "finding": "Finding",
    "findings": "list[Finding]",
}


def test_no_any_where_a_rocboard_type_is_meant():
    offending = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                annotated = [(a.arg, a.annotation) for a in arguments]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, (ast.Name, ast.Attribute)):
                annotated = [(node.target.id if isinstance(node.target, ast.Name) else node.target.attr, node.annotation)]
            else:
                continue
            for name, annotation in annotated:
                if name in ROCBOARD_NAMES and annotation is not None and ast.unparse(annotation).strip("'\"") in ("Any", "Any | None", "Optional[Any]"):
                    offending.append(f"{module}:{node.lineno} {name}: Any (meant: {ROCBOARD_NAMES[name]})")
    assert offending == []


def test_the_web_process_imports_no_ml_library_at_module_level():
    """Follows the imports of app.py's serve path (ui.serve imports inside serve_main, so all
    of its own count), then module-level imports through RocBoard's modules."""
    graph = import_graph()
    start = "ui.serve"
    seen = {start: [start]}
    frontier = [start]
    heavy = []
    while frontier:
        module = frontier.pop()
        for edge in graph.get(module, []):
            if not edge.module_level and module != start:
                continue
            if edge.target.split(".")[0] in HEAVY:
                heavy.append(" -> ".join(seen[module]) + f" imports {edge.target} (line {edge.line})")
            elif edge.target in graph and edge.target not in seen:
                seen[edge.target] = seen[module] + [edge.target]
                frontier.append(edge.target)
    assert len(seen) > 5, "the walk found almost nothing: has the serve path moved?"
    assert heavy == []


def test_the_graph_reader_sees_function_level_and_relative_imports(tmp_path):
    """The checks above are only as good as the reader: it must see through `from . import`,
    imports inside functions, and imports under TYPE_CHECKING (for types only: never at
    import time)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import runs\n"
        "if TYPE_CHECKING:\n"
        "    from backend.service import RocBoard\n"
        "def later():\n"
        "    from backend.runs.logs import parse_metric\n"
    )
    tree = ast.parse(source)
    known = {"backend.runs", "backend.runs.logs", "backend.service", "backend.demo"}
    targets = [(_resolve("backend.demo", ROOT / "backend" / "demo.py", node, known), level, types) for node, level, types in _import_nodes(tree)]
    assert targets == [(["typing"], True, False), (["backend.runs"], True, False), (["backend.service"], False, True), (["backend.runs.logs"], False, False)]


def test_the_cycle_finder_names_a_cycle():
    graph = {
        "backend.a": [Import("backend.b", 3, True)],
        "backend.b": [Import("backend.c", 5, False)],
        "backend.c": [Import("backend.a", 7, True), Import("backend.d", 8, True)],
        "backend.d": [],
    }
    assert cycles(graph, "backend") == [["backend.a", "backend.b", "backend.c", "backend.a"]]
    assert describe(["backend.a", "backend.b", "backend.c", "backend.a"], graph) == (
        "backend.a:3 -> backend.b; backend.b:5 (in a function) -> backend.c; backend.c:7 -> backend.a"
    )


def test_a_cycle_closed_only_for_types_is_a_cycle():
    """An import under TYPE_CHECKING ties two modules as much as one that runs: the graph
    holds it, and a cycle through it is found and named."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.a import A\n")
    (node, module_level, types_only), *_ = [found for found in _import_nodes(tree) if found[0].lineno == 3]
    graph = {
        "backend.a": [Import("backend.b", 4, False)],
        "backend.b": [Import("backend.a", node.lineno, module_level, types_only)],
    }
    assert tied_groups(graph, "backend") == [["backend.a", "backend.b"]]
    assert describe(cycles(graph, "backend")[0], graph) == "backend.a:4 (in a function) -> backend.b; backend.b:3 (for types only) -> backend.a"
