"""No generator in backend/ or ui/ holds a lock across a `yield`, read from the source with `ast`.

Gradio runs a generator handler one `next()` at a time, each on whichever worker thread is
free. A lock taken before a `yield` is then released (the `with` block's end) on another
thread: an RLock or Lock owned by thread A raises "cannot release un-acquired lock" on
thread B, and stays held by A for good; every later caller of that lock (Unload, a question,
RunManager.before_launch under the run manager's own lock, the app's shutdown) waits forever.
A generator a tab abandons holds it forever too. So a generator takes a lock only in short
critical sections that end before it yields (issue 26, item 3).

What counts as a lock: a `with` item whose source names a lock (`lock`, `mutex` or
`semaphore` anywhere in it: `self._lock`, `self.queue.locked()`, `_thread_lock(root)`), or
an attribute or variable that the code assigns from `threading.Lock()` (RLock, Condition,
Semaphore, BoundedSemaphore) under any name. An explicit `.acquire()` in a generator is
flagged as well: released after a later yield, it is the same defect.

A function decorated with @contextmanager or @asynccontextmanager is not a handler but the
lock itself: its `yield` is the body of its caller's `with`, run on the caller's thread, and
that caller (if it is a generator) is checked like any other.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("backend", "ui")
LOCK_WORDS = re.compile(r"lock|mutex|semaphore", re.IGNORECASE)
LOCK_FACTORIES = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}
CONTEXT_MANAGER_DECORATORS = {"contextmanager", "asynccontextmanager"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class Violation:
    path: str
    function: str
    line: int
    lock: str
    what: str  # "yield inside `with`" or "acquire()"

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.function}: {self.what} {self.lock}"


def _own_nodes(node: ast.AST):
    """The nodes of `node`'s body that belong to it, not to a function or class nested in it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, SCOPES):
            continue
        yield child
        yield from _own_nodes(child)


def _is_generator(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in _own_nodes(function))


def _decorator_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


def lock_names(trees: list[ast.Module]) -> set[str]:
    """Every name or attribute assigned a threading lock (`self._gate = threading.Lock()`)."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Call):
                continue
            called = node.value.func
            factory = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else ""
            if factory not in LOCK_FACTORIES:
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute):
                    names.add(target.attr)
                elif isinstance(target, ast.Name):
                    names.add(target.id)
    return names


def _names_a_lock(expression: ast.expr, locks: set[str]) -> bool:
    if LOCK_WORDS.search(ast.unparse(expression)):
        return True
    return any(
        (isinstance(node, ast.Attribute) and node.attr in locks) or (isinstance(node, ast.Name) and node.id in locks)
        for node in ast.walk(expression)
    )


def violations_in(source: str, path: str, locks: set[str] | None = None) -> list[Violation]:
    """Each yield lexically inside a `with <lock>` (or `async with`) of the same generator, and
    each `.acquire()` a generator calls."""
    tree = ast.parse(source, path)
    locks = lock_names([tree]) if locks is None else locks
    found = []
    for function in (node for node in ast.walk(tree) if isinstance(node, FUNCTIONS)):
        if not _is_generator(function) or _decorator_names(function) & CONTEXT_MANAGER_DECORATORS:
            continue
        for node in _own_nodes(function):
            if isinstance(node, (ast.With, ast.AsyncWith)):
                held = [item.context_expr for item in node.items if _names_a_lock(item.context_expr, locks)]
                if not held:
                    continue
                for statement in node.body:
                    for inner in _own_nodes(statement):
                        if isinstance(inner, (ast.Yield, ast.YieldFrom)):
                            found.append(Violation(path, function.name, inner.lineno, ast.unparse(held[0]), "yield inside `with`"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "acquire":
                found.append(Violation(path, function.name, node.lineno, ast.unparse(node.func.value), "acquire() of"))
    return found


def source_files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_no_generator_in_backend_or_ui_holds_a_lock_across_a_yield():
    files = source_files()
    assert len(files) > 50  # the walk found the packages
    sources = {path: path.read_text(encoding="utf-8") for path in files}
    locks = lock_names([ast.parse(text, str(path)) for path, text in sources.items()])
    assert {"_lock", "_tick_lock"} <= locks  # the reader sees the app's locks by their assignment
    found = [v for path, text in sources.items() for v in violations_in(text, str(path.relative_to(ROOT)), locks)]
    assert found == [], "a lock held across a yield (Gradio resumes a generator on another thread):\n" + "\n".join(map(str, found))


BAD = '''
import threading
from contextlib import contextmanager

class Desk:
    def __init__(self):
        self._lock = threading.RLock()
        self._gate = threading.Lock()

    def load(self):
        with self._lock:
            yield 1

    def nested(self, items):
        for item in items:
            with self._lock:
                if item:
                    try:
                        yield item
                    finally:
                        pass

    def by_assignment(self):
        with self._gate:
            yield from range(3)

    def several_items(self, path):
        with open(path) as handle, self.queue.locked():
            yield handle

    def manual(self):
        self._gate.acquire()
        yield 1
        self._gate.release()

    async def streamed(self):
        async with self._lock:
            yield 1
'''

GOOD = '''
import threading
from contextlib import contextmanager

class Desk:
    def __init__(self):
        self._lock = threading.RLock()

    def load(self):
        with self._lock:
            state = 1
        yield state

    def reads_a_file(self, path):
        with open(path) as handle:
            yield handle.read()

    def not_a_generator(self):
        with self._lock:
            def later():
                yield 1
            return later

    @contextmanager
    def locked(self):
        with self._lock:
            yield
'''


def test_the_reader_finds_each_shape_of_a_lock_held_across_a_yield():
    found = violations_in(BAD, "bad.py")
    assert sorted((v.function, v.line) for v in found) == [
        ("by_assignment", 25),
        ("load", 12),
        ("manual", 32),
        ("nested", 19),
        ("several_items", 29),
        ("streamed", 38),
    ], found
    assert violations_in(GOOD, "good.py") == []
