"""Only public dependency APIs, and no process-wide switches in library code (issue 30 item 5).

Checked on the source (:mod:`ast`) and, for subclassing, on the live classes:

* **No private attribute of another library is read or written.** A private name (one
  leading underscore, not a dunder) read or written as an attribute must be one
  ringfence defines (a function, class, module, parameter, or an attribute its own
  objects set on ``self``/``cls``); a name only another library defines is its private
  part. Documented standard-library names spelled with an underscore are listed in
  :data:`PUBLIC_UNDERSCORE`. Annotations are not read (they are never evaluated).
* **No private name is looked up by string** (``getattr``/``hasattr``/``setattr``/
  ``delattr``) except ringfence's own markers, listed in :data:`OWN_MARKERS`.
* **Nothing is imported from another library's private module or by a private name**,
  except in an adapter listed in :data:`PRIVATE_MODULE_ADAPTERS` with its reason, whose
  use is checked against the installed module (a test that fails when it changes).
* **No class of ringfence overrides another library's private members**: no ringfence
  class in the method order of a class derived from another library's defines or uses
  on ``self`` a private name that library's class has (in its namespace, or set on
  ``self`` by its source).
* **No process-wide switch in library code**: the garbage collector is switched only by
  the command line (``cli``, which owns its process) and by the one opt-in pause
  (:data:`GC_SWITCHERS`); no daemon thread is started (:data:`DAEMON_THREADS`: two in
  the library, the script runners' spawner and the writers' turn, each with its reason).

The name rule is a fast filter (it cannot see a private name ringfence happens to
define too); the subclass rule checks the live classes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import ringfence

SRC = Path(ringfence.__file__).parent
FILES = sorted(SRC.rglob("*.py"))
TREES = {path: ast.parse(path.read_text(), str(path)) for path in FILES}
# ringfence's own modules, as the standalone programs (the sandbox supervisor, the script
# runner) import their siblings: by the bare module name.
OWN_MODULES = {path.stem for path in FILES}

# Underscore-spelled names that are public, documented API of the standard library.
PUBLIC_UNDERSCORE = {
    "_exit": "os._exit: https://docs.python.org/3/library/os.html#os._exit",
}
PUBLIC_UNDERSCORE_MODULES = {
    "_thread": "https://docs.python.org/3/library/_thread.html (the low-level threading API)",
}

# (file, module) -> why a private module of another library is imported there. Each is an
# adapter: the names the file reads from it are checked to exist in the installed module
# (test_adapters_still_fit_the_private_modules_they_use).
PRIVATE_MODULE_ADAPTERS: dict[tuple[str, str], str] = {
    ("backends/confined/_supervisor.py", "_signal"): "the confined sandbox's PID 1 imports "
    "almost nothing (its start is every session's): `signal` would load enum; these are the "
    "C functions it wraps",
    ("backends/confined/_supervisor.py", "_socket"): "the same, for `socket`",
}

# (file, name) -> why a private name is looked up by string there: ringfence's own markers.
OWN_MARKERS: dict[tuple[str, str], str] = {
    ("bridge/_allowlist.py", "_guarded_writes"): "the marker ringfence's script policy sets on "
    "a script's own classes (bridge/_restricted.py), read back to tell them apart",
}

# file -> why it may switch the garbage collector (library code otherwise never does).
GC_SWITCHERS: dict[str, str] = {
    "workspace/changes/_collector.py": "the pause a process owner opts into "
    "(create_kernel(pause_collector=True)); off for every other caller",
}
GC_SWITCH_LAYERS = {"cli": "the command owns its one-verb process (cli/_main._short_lived)"}
GC_SWITCHES = {"disable", "enable", "freeze", "unfreeze", "set_threshold", "set_debug"}

# file -> why it starts a daemon thread (library code: only where a thread must outlive every task).
DAEMON_THREADS: dict[str, str] = {
    "bridge/_launch.py": "the script runners' spawner: a runner's PR_SET_PDEATHSIG fires when "
    "the thread that forked it ends, so the thread must live as long as the process (trio's "
    "worker threads retire after idling); it holds nothing that needs a clean stop",
    "workspace/_writelock.py": "writers_turn: the writer lock belongs to a thread, held across "
    "a --no-change-sets command's awaits; held, it is joined when the turn ends; a turn given up "
    "while waiting (cancelled, or past the command's timeout) leaves its thread to take the lock "
    "when another writer lets go and release it at once, which must not hold the process's exit "
    "(the kernel drops flocks with the process)",
    "bench/peers/srt.py": "the benchmark's stand-in listener, joined in its own finally; "
    "the bench runs in the `ringfence bench` process, never in a host's",
}


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# -- private attributes ---------------------------------------------------------------------


def _defined_names() -> set[str]:
    """Every private name ringfence itself defines."""
    names: set[str] = set(OWN_MODULES)
    for tree in TREES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)  # ringfence's own object sets it
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names.add(key.value)  # a namespace ringfence builds (ns["_x"] = ...)
    return {n for n in names if _private(n)}


DEFINED = _defined_names()


def _annotations(tree: ast.AST) -> set[int]:
    """ids of the nodes inside annotations: never evaluated (postponed annotations), so they
    read nothing (``argparse._SubParsersAction`` is how typeshed names ``add_subparsers()``)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def test_no_private_attribute_of_another_library_is_read_or_written() -> None:
    offenders = []
    for path, tree in TREES.items():
        skipped = _annotations(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and id(node) not in skipped
                and node.attr not in DEFINED
                and node.attr not in PUBLIC_UNDERSCORE
            ):
                offenders.append(
                    f"{_rel(path)}:{node.lineno}: .{node.attr} (no module of ringfence defines "
                    "it: another library's private part)"
                )
    assert not offenders, "\n".join(offenders)


def test_no_private_name_is_looked_up_by_string() -> None:
    offenders, used = [], set()
    for path, tree in TREES.items():
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
            ):
                continue
            key = (_rel(path), node.args[1].value)
            if key in OWN_MARKERS:
                used.add(key)
            else:
                offenders.append(f"{key[0]}:{node.lineno}: {node.func.id}(…, {key[1]!r})")
    assert not offenders, "\n".join(offenders)
    assert used == set(OWN_MARKERS), "markers listed but not used: remove them"


# -- private modules ------------------------------------------------------------------------


def _imports() -> Iterator[tuple[str, int, str, list[str]]]:
    """(file, line, module, names) of every absolute import of another library."""
    for path, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules, names = [node.module], [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                modules, names = [a.name for a in node.names], []
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in ("ringfence", "__future__") and top not in OWN_MODULES:
                    yield _rel(path), node.lineno, module, names


def test_nothing_is_imported_from_another_librarys_private_parts() -> None:
    offenders, used = [], set()
    for rel, line, module, names in _imports():
        private = any(_private(part) for part in module.split("."))
        if private and module not in PUBLIC_UNDERSCORE_MODULES:
            if (rel, module) in PRIVATE_MODULE_ADAPTERS:
                used.add((rel, module))
            else:
                offenders.append(f"{rel}:{line}: imports {module}")
        for name in names:
            if _private(name):
                offenders.append(f"{rel}:{line}: imports {name} from {module}")
    assert not offenders, "\n".join(offenders)
    assert used == set(PRIVATE_MODULE_ADAPTERS), "adapters listed but gone: remove them"


def test_adapters_still_fit_the_private_modules_they_use() -> None:
    """Fails when the dependency changes: every name an adapter reads from the private module
    it imports still exists in the installed one."""
    for (rel, module), why in PRIVATE_MODULE_ADAPTERS.items():
        imported = importlib.import_module(module)
        used = {
            node.attr
            for node in ast.walk(TREES[SRC / rel])
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == module
        }
        assert used, f"{rel} reads nothing from {module} ({why}): remove the adapter"
        missing = sorted(name for name in used if not hasattr(imported, name))
        assert not missing, f"{rel}: {module} no longer has {missing} ({why})"


# -- subclasses of other libraries' classes -------------------------------------------------


def _classes_with_bases() -> Iterator[tuple[str, str]]:
    """(module, class name) of every module-level ringfence class that has a base."""
    for path, tree in TREES.items():
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.bases:
                yield ".".join(parts), node.name


def _own(klass: type) -> bool:
    return klass.__module__.split(".")[0] == "ringfence"


def _source(klass: type) -> str:
    try:
        return textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # no Python source (a C type): nothing it sets is visible
        return ""


_ON_SELF = re.compile(r"self\.(_[A-Za-z0-9]\w*)")


def _private_names_of(klass: type) -> set[str]:
    """The private names a ringfence class's source defines in its body or uses on ``self``
    (not what a metaclass adds: enum's and typing's own bookkeeping)."""
    source = _source(klass)
    names = set(_ON_SELF.findall(source))
    for cls in (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if _private(n)}


def _privates_of_theirs(klass: type) -> set[str]:
    """Another library's class's private members: its namespace, and what it sets on self."""
    return {n for n in vars(klass) if _private(n)} | set(_ON_SELF.findall(_source(klass)))


def test_no_class_of_ringfence_overrides_another_librarys_private_members() -> None:
    offenders, checked = [], 0
    for module_name, class_name in _classes_with_bases():
        klass = getattr(importlib.import_module(module_name), class_name)
        theirs = [k for k in klass.__mro__ if not _own(k) and k.__module__ != "builtins"]
        if not theirs:
            continue
        checked += 1
        for own in (k for k in klass.__mro__ if _own(k)):
            mine = _private_names_of(own)
            for other in theirs:
                for name in sorted(mine & _privates_of_theirs(other)):
                    offenders.append(
                        f"{own.__module__}.{own.__qualname__}.{name} is "
                        f"{other.__module__}.{other.__qualname__}'s private {name}"
                    )
    assert checked, "no class derived from another library's was found: the scan is broken"
    assert not offenders, "\n".join(sorted(set(offenders)))


# -- process-wide switches ------------------------------------------------------------------


def test_library_code_switches_no_process_wide_collector() -> None:
    offenders, used = [], set()
    for path, tree in TREES.items():
        rel = _rel(path)
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "gc"
                and node.func.attr in GC_SWITCHES
            ):
                continue
            if rel.split("/")[0] in GC_SWITCH_LAYERS:
                continue
            if rel in GC_SWITCHERS:
                used.add(rel)
            else:
                offenders.append(f"{rel}:{node.lineno}: gc.{node.func.attr}()")
    assert not offenders, "\n".join(offenders)
    assert used == set(GC_SWITCHERS), "listed but switching nothing: remove them"


def test_library_code_starts_no_daemon_thread() -> None:
    offenders, used = [], set()
    for path, tree in TREES.items():
        rel = _rel(path)
        for node in ast.walk(tree):
            daemon = (
                isinstance(node, ast.Call)
                and any(
                    k.arg == "daemon"
                    and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords
                )
            ) or (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Attribute) and t.attr == "daemon" for t in node.targets)
            )
            if not daemon:
                continue
            if rel in DAEMON_THREADS:
                used.add(rel)
            else:
                offenders.append(f"{rel}:{node.lineno}: a daemon thread")
    assert not offenders, "\n".join(offenders)
    assert used == set(DAEMON_THREADS), "listed but starting none: remove them"
