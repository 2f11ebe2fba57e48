"""Architecture tests: the house rules of ARCHITECTURE.md, checked on the source.

* **Layering**: ``runtime`` imports no client package, and every import between
  packages points the way ARCHITECTURE.md draws (:data:`ALLOWED`).
* **One process supervisor**: only ``ringfence/_proc.py`` spawns processes;
  each other place that still does is listed in :data:`SPAWN_EXCEPTIONS` with
  the reason and the issue item that removes it; the benchmarks
  (:data:`SPAWN_EXEMPT_LAYERS`) spawn their bare baselines themselves.
* **Only the resolver opens workspace paths** (see
  :func:`test_only_the_resolver_opens_workspace_paths` for exactly what is checked).
* **No import cycles between the modules of a package**, counting imports
  inside functions (they run too), not counting ``if TYPE_CHECKING:`` blocks
  (they never run). Known cycles are listed in :data:`KNOWN_CYCLES`.
* **Exports**: every package's ``__all__`` is exactly what it re-exports, and
  every name in it resolves.

All checks read the source with :mod:`ast`: nothing is imported except for
the exports test, and a failure names the file and line.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ringfence

SRC = Path(ringfence.__file__).parent
PACKAGES = (
    "_confine",
    "runtime",
    "workspace",
    "backends",
    "bridge",
    "mcp_host",
    "plugins",
    "serve",
    "review",
    "cli",
    "bench",
)

# Which layers each layer may import (ARCHITECTURE.md, "Which way imports point"). A layer
# is a package below ringfence, or one module of the top package by its dotted name
# (the supervisor and the lazy-export helper sit low, the embedding entry point high).
ALLOWED: dict[str, set[str]] = {
    "ringfence._lazy": set(),
    # the Linux primitives (libc, Landlock, seccomp, rlimits, credentials, mounts, openat2,
    # cgroup v2 files): standard library only, imported inside the sandboxes too
    "_confine": set(),
    "runtime": set(),
    # the process supervisor: _proc spawns; _proctree (a Process and its tree) is its part
    # below it and spawns nothing; both use _confine's cgroup files
    "ringfence._proctree": {"_confine"},
    "ringfence._proc": {"runtime", "_confine", "ringfence._proctree"},
    # ringfence's own git calls (hooks, filters, configured programs off), spawned by _proc
    "ringfence._git": {"runtime", "ringfence._proc"},
    "workspace": {"runtime", "_confine", "ringfence._lazy"},  # _confine: openat2
    # workspace: run_shell's git-metadata check (scan_git_metadata, enforce_git_metadata).
    "backends": {"runtime", "workspace", "_confine", "ringfence._proc", "ringfence._lazy"},
    "bridge": {"runtime", "_confine", "ringfence._proc", "ringfence._lazy"},
    # ringfence._proc: stdio servers are started by the process supervisor
    "mcp_host": {"runtime", "ringfence._proc", "ringfence._lazy"},
    # serve: ringfence's __version__; _confine's libc for malloc_trim
    "serve": {"runtime", "_confine", "ringfence._lazy", "ringfence"},
    # The review page: reads the stores (workspace's change sets, runtime's events and plans),
    # acts through the kernel, and stands behind serve's request guard (serve._http).
    "review": {"runtime", "workspace", "serve", "ringfence._lazy", "ringfence"},
    # plugins: hooks run confined like the local backend's commands (backends.confine_exec,
    # spawned by _proc); a plugin's MCP servers are mcp.toml's [[server]] tables (mcp_host)
    "plugins": {"runtime", "ringfence._proc", "backends", "mcp_host"},
    "ringfence._embed": {"runtime", "workspace", "backends", "bridge", "mcp_host", "plugins"},
    "ringfence.otel": {"runtime"},  # OpenTelemetry export: reads event records only
    # The overhead suite measures the clients and the kernel from outside, like a host would
    # (ringfence: create_kernel); it never imports the CLI, which runs it (`ringfence bench`).
    "bench": {"ringfence", "runtime", "workspace", "backends", "bridge", "mcp_host", "plugins"},
    "cli": {
        "ringfence",
        "runtime",
        "ringfence._lazy",
        "ringfence._proc",
        "ringfence._git",
        "ringfence._embed",
        "ringfence.otel",
        "workspace",
        "backends",
        "bridge",
        "mcp_host",
        "plugins",
        "serve",
        "review",
        "bench",
    },
    "ringfence": {"ringfence._lazy"},  # the top __init__: its names load lazily
    "ringfence.__main__": {"cli"},  # `python -m ringfence` runs the command line
}


# -- reading the source ------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. ringfence.workspace._reader
    path: Path
    tree: ast.Module

    @property
    def package(self) -> str:
        """The package below ringfence ("" for the top package's own modules)."""
        parts = self.name.split(".")
        is_init = self.path.name == "__init__.py"
        inner = parts[1:] if is_init else parts[1:-1]
        return inner[0] if inner else ""

    @property
    def layer(self) -> str:
        """The package below ringfence, or the dotted name of a top-package module."""
        return self.package or self.name

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(SRC.parent))


def _modules() -> list[Module]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(Module(".".join(parts), path, ast.parse(path.read_text(), str(path))))
    return out


MODULES = _modules()
BY_NAME = {m.name: m for m in MODULES}
BY_NAME_REL = {m.rel: m for m in MODULES}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an ``if TYPE_CHECKING:`` block (never executed)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skipped.update(id(n) for n in ast.walk(child))
    return skipped


@dataclass(frozen=True)
class Import:
    target: str  # the dotted module imported (resolved when relative)
    names: tuple[str, ...]  # for "from X import a, b": a, b
    line: int


def _imports(module: Module) -> Iterator[Import]:
    """Every executed import of ``module``, at any depth (functions included)."""
    skipped = _type_checking_nodes(module.tree)
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield Import(target, tuple(a.name for a in node.names), node.lineno)


def _edges(module: Module) -> Iterator[tuple[str, int]]:
    """The ringfence modules ``module`` imports (``from pkg import submodule`` included)."""
    for imp in _imports(module):
        if not imp.target.startswith("ringfence"):
            continue
        found = False
        for name in imp.names:
            sub = f"{imp.target}.{name}"
            if sub in BY_NAME:
                yield sub, imp.line
                found = True
        if not found and imp.target in BY_NAME:
            yield imp.target, imp.line


def _package_of(name: str) -> str:
    module = BY_NAME[name]
    return module.package


# -- layering ----------------------------------------------------------------------------


def test_runtime_imports_no_client_package() -> None:
    offenders = [
        f"{m.rel}:{line} imports {target}"
        for m in MODULES
        if m.package == "runtime"
        for target, line in _edges(m)
        if _package_of(target) != "runtime"
    ]
    assert offenders == []


# (importer, imported) -> why one module may cross the table above. Only shrinks.
MODULE_EDGE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def test_imports_between_layers_point_the_way_architecture_md_draws() -> None:
    offenders = []
    used: set[tuple[str, str]] = set()
    for m in MODULES:
        for target, line in _edges(m):
            to = BY_NAME[target].layer
            if to != m.layer and to not in ALLOWED[m.layer]:
                if (m.name, target) in MODULE_EDGE_EXCEPTIONS:
                    used.add((m.name, target))
                    continue
                offenders.append(f"{m.rel}:{line}: {m.layer} -> {to}")
    assert offenders == []
    assert used == set(MODULE_EDGE_EXCEPTIONS), "exceptions no longer needed: remove them"
    assert {m.layer for m in MODULES} == set(ALLOWED), "a new layer: place it in ALLOWED"


def test_importing_ringfence_is_light() -> None:
    """``import ringfence`` (what the sandboxed script runner pays) loads no SDK."""
    code = (
        "import sys, ringfence; print(sorted(m for m in ('trio', 'docker', 'mcp', "
        "'cryptography') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# What `ringfence call read_file` may not import: SDKs and libraries of other verbs and
# extras (serving, MCP, docker, OpenTelemetry, charts, terminal rendering, HTTP clients),
# and what only other tools need: jsonschema (ringfence's own schemas are checked without
# it, and a valid call passes the flat check), psutil and the process supervisor (only a
# command or a script spawns), TOML (no policy file here). Each costs milliseconds to tens
# of milliseconds a start (issue 20: the verb within 120 ms); the verb needs none of them.
CALL_READ_FILE_FORBIDDEN = (
    "anyio",
    "docker",
    "httpx",
    "hypercorn",
    "jsonschema",
    "matplotlib",
    "mcp",
    "numpy",
    "opentelemetry",
    "psutil",
    "pydantic",
    "referencing",
    "requests",
    "rich",
    "starlette",
    "tomllib",
    "tree_sitter",
)
# Submodules the verb may not import although their package is needed: minting an
# intent's PEM needs no serialization (and its RSA, EC, SSH and cipher code).
CALL_READ_FILE_FORBIDDEN_SUBMODULES = ("cryptography.hazmat.primitives.serialization",)
# ... nor ringfence modules only other verbs or tools use (serving, the MCP client,
# benchmarks; a backend's session, a script's run, the supervisor, git, merging, ...).
CALL_READ_FILE_FORBIDDEN_OWN = (
    "ringfence.serve",
    "ringfence.mcp_host",
    "ringfence.otel",
    "ringfence._proc",
    "ringfence._git",
    "ringfence.backends.confined._session",
    "ringfence.backends.confined._layers",
    "ringfence.backends._host",
    "ringfence.backends.docker._session",
    "ringfence.backends.docker._images",
    "ringfence.bridge._host",
    "ringfence.bridge._launch",
    "ringfence.bridge._channel",
    "ringfence.bridge._docker",
    "ringfence.bridge._session",
    "ringfence.workspace.changes._merge",
    "ringfence.workspace.changes._upper",
    "ringfence.workspace._windows",
    "ringfence.cli._serve",
    "ringfence.cli._mcp",
    "ringfence.cli._bench",
    "ringfence.cli._events",
    "ringfence.cli._images",
    "ringfence.cli._doctor",
    "ringfence.bench",
)


def run_verb_listing_modules(argv: list[str], workspace: Path) -> tuple[str, set[str]]:
    """Run ``ringfence <argv> --workspace <workspace>`` in a fresh ``python -I``: (its output
    before the module list, the modules it had loaded when the verb returned)."""
    code = (
        "import sys\n"
        "from ringfence.cli import main\n"
        "code = main(sys.argv[2:] + ['--workspace', sys.argv[1]])\n"
        "print(sorted(sys.modules))\n"
        "sys.exit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(workspace), *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=workspace,
    )
    text, modules_line = out.stdout.rstrip("\n").rsplit("\n", 1)
    return text, set(ast.literal_eval(modules_line))


def assert_loads_none_of(loaded: set[str], own_allowed: tuple[str, ...] = ()) -> None:
    """No SDK or library a one-shot call need not load, and none of ringfence's other verbs."""
    tops = {m.split(".")[0] for m in loaded}
    assert sorted(tops & set(CALL_READ_FILE_FORBIDDEN)) == []
    assert sorted(loaded & set(CALL_READ_FILE_FORBIDDEN_SUBMODULES)) == []
    forbidden = [f for f in CALL_READ_FILE_FORBIDDEN_OWN if f not in own_allowed]
    own = sorted(m for m in loaded for f in forbidden if m == f or m.startswith(f + "."))
    assert own == []


def test_call_read_file_imports_only_what_the_verb_needs(tmp_path: Path) -> None:
    """``ringfence call read_file`` (the whole verb, run) loads no SDK and no other verb."""
    (tmp_path / "f.txt").write_text("hello\n")
    text, loaded = run_verb_listing_modules(
        ["call", "read_file", "--args", '{"path": "f.txt"}'], tmp_path
    )
    assert text == "hello"
    assert_loads_none_of(loaded)


# `ringfence call run_shell` (issue 19: the one-shot confined command faster than srt) may
# load what `call read_file` may not of its own (the process supervisor, the confined local
# backend), but none of the libraries: a valid run_shell call passes the compiled schema
# check (no jsonschema), and a cgroup-tracked sandbox needs no psutil.
CALL_RUN_SHELL_NEEDS = (
    "ringfence._proc",
    "ringfence.backends.confined._session",
    "ringfence.backends.confined._layers",
    "ringfence.backends._host",
)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_call_run_shell_imports_only_what_the_verb_needs(tmp_path: Path) -> None:
    """``ringfence call run_shell`` (confined, the whole verb, run) loads no SDK, no jsonschema,
    no psutil and no other verb."""
    argv = ["call", "run_shell", "--args", '{"command": "echo confined"}']
    text, loaded = run_verb_listing_modules(
        [*argv, "--backend", "local", "--approve", "yes"], tmp_path
    )
    assert "confined" in text
    assert CALL_RUN_SHELL_NEEDS[1] in loaded  # it did run where this test means
    assert_loads_none_of(loaded, own_allowed=CALL_RUN_SHELL_NEEDS)


# -- the sandboxed programs' imports ------------------------------------------------------


def test_confine_imports_the_standard_library_alone() -> None:
    """``ringfence._confine`` is imported inside the sandboxes (``python -I -S``, where only
    the standard library and the package's own directories are found): each of its modules
    imports the standard library and its own package, nothing else of ringfence or beyond."""
    stdlib = frozenset(sys.stdlib_module_names) | {"__future__"}
    offenders = []
    for m in MODULES:
        if m.package != "_confine":
            continue
        skipped = _type_checking_nodes(m.tree)
        for node in ast.walk(m.tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.ImportFrom):
                if node.level != 1:  # only `from . import x` / `from .x import y`
                    offenders.append(f"{m.rel}:{node.lineno} imports outside _confine")
                continue
            else:
                continue
            offenders += [f"{m.rel}:{node.lineno} imports {r}" for r in roots if r not in stdlib]
    assert offenders == []


# file -> why it changes sys.path. Nothing of ringfence is found through sys.path: the
# sandboxed programs are started by ringfence._confine.boot, which registers their packages.
SYS_PATH_EXCEPTIONS: dict[str, str] = {}


def _own_module_names() -> frozenset[str]:
    return frozenset(m.name.rpartition(".")[2] for m in MODULES if m.path.name != "__init__.py")


def test_ringfence_s_modules_are_imported_one_way() -> None:
    """No module puts a directory of its own on ``sys.path``, and none imports a module of
    ringfence by a second, top-level name when the package import fails (the fallback
    that a file run as a script needs): one spelling, in the kernel and in the sandboxes."""
    own = _own_module_names()
    offenders = []
    changed: set[str] = set()
    for m in MODULES:
        aliases = _aliases(m.tree)
        for node in ast.walk(m.tree):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if _dotted(node.func.value, aliases) == "sys.path":
                    target = node
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    base = t.value if isinstance(t, ast.Subscript) else t
                    if _dotted(base, aliases) == "sys.path":
                        target = node
            if target is not None:
                changed.add(m.rel)
                if m.rel not in SYS_PATH_EXCEPTIONS:
                    offenders.append(f"{m.rel}:{node.lineno} changes sys.path")
            if isinstance(node, ast.ExceptHandler):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import):
                        names = {a.name.split(".")[0] for a in inner.names}
                    elif isinstance(inner, ast.ImportFrom) and inner.level == 0:
                        names = {(inner.module or "").split(".")[0]}
                    else:
                        continue
                    offenders += [
                        f"{m.rel}:{inner.lineno} falls back to importing {n} as a top-level module"
                        for n in names & own
                    ]
    assert offenders == []
    assert changed == set(SYS_PATH_EXCEPTIONS), "exceptions no longer needed: remove them"


_LIBC_LOADERS = frozenset({"ctypes.CDLL", "ctypes.cdll", "ctypes.PyDLL", "ctypes.pydll"})
_C_LAYOUTS = frozenset(
    {f"ctypes.{n}" for n in ("Structure", "Union", "BigEndianStructure", "LittleEndianStructure")}
    | {"ctypes.CFUNCTYPE", "ctypes.PYFUNCTYPE"}
)


def _ctypes_uses(names: frozenset[str], home: str) -> list[str]:
    """``file:line name`` of every use of one of ``names`` (``ctypes.X``, or ``X`` imported
    from ctypes) outside the files whose path starts with ``home``."""
    found = []
    for m in MODULES:
        if m.rel.startswith(home):
            continue
        aliases = _aliases(m.tree)
        for node in ast.walk(m.tree):
            if isinstance(node, (ast.Attribute, ast.Name)):
                name = _dotted(node, aliases)
                if name in names:
                    found.append(f"{m.rel}:{node.lineno} {name}")
    return found


def test_the_c_library_is_loaded_in_one_place() -> None:
    """``ringfence/_confine/libc.py`` loads libc once per process; nothing else calls
    ``ctypes.CDLL`` (each load is a ``dlopen`` and a second set of function prototypes that
    can disagree with the first)."""
    assert _ctypes_uses(_LIBC_LOADERS, "ringfence/_confine/libc.py") == []


def test_kernel_structures_are_defined_in_one_place() -> None:
    """The C structures and prototypes of the system calls Python does not wrap (Landlock's
    rulesets, seccomp's programs and notifications, ``open_how``, ``mount_attr``) are defined
    in :mod:`ringfence._confine` alone: a second definition of one is a twin that can drift
    from the kernel's layout unnoticed."""
    assert _ctypes_uses(_C_LAYOUTS, "ringfence/_confine/") == []


def test_ctypes_is_imported_in_confine_alone() -> None:
    """Every call into C goes through :mod:`ringfence._confine`, so no other module imports
    ``ctypes`` at all (a prototype, an ``argtypes`` or a cast elsewhere is a second home)."""
    offenders = []
    for m in MODULES:
        if m.rel.startswith("ringfence/_confine/"):
            continue
        for node in ast.walk(m.tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            offenders += [
                f"{m.rel}:{node.lineno} imports {n}"
                for n in names
                if n == "ctypes" or n.startswith("ctypes.")
            ]
    assert offenders == []


# -- one process supervisor --------------------------------------------------------------

SPAWNERS = frozenset(
    {
        *(f"subprocess.{n}" for n in ("Popen", "run", "call", "check_call", "check_output")),
        *(f"subprocess.{n}" for n in ("getoutput", "getstatusoutput")),
        *(f"os.{n}" for n in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")),
        *(f"os.{n}" for n in ("popen", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv")),
        *(f"os.{n}" for n in ("spawnve", "spawnvp", "spawnvpe", "execv", "execve", "execl")),
        *(f"os.{n}" for n in ("execle", "execlp", "execlpe", "execvp", "execvpe")),
        "pty.fork",
        "pty.spawn",
        "trio.run_process",
        "trio.lowlevel.open_process",
        "anyio.run_process",
        "anyio.open_process",
        "asyncio.create_subprocess_exec",
        "asyncio.create_subprocess_shell",
        "multiprocessing.Process",
    }
)

# file -> {spawner: why it is not (yet) _proc's}. A listed spawner that is gone fails the
# test too, so this list only shrinks.
SPAWN_EXCEPTIONS: dict[str, dict[str, str]] = {
    "ringfence/backends/docker/_imagebuild.py": {
        "subprocess.Popen": "debootstrap, streamed line by line: a build tool run by the "
        "operator's `ringfence images build`, not a sandboxed child",
        "subprocess.run": "busybox --list and tar: short build steps of `ringfence images`",
    },
    "ringfence/backends/_doctor.py": {
        "subprocess.run": "`rg --version` for `ringfence doctor`: a probe with a timeout",
    },
    "ringfence/cli/_doctor.py": {
        "subprocess.run": "`node --version` for `ringfence doctor`: a probe with a timeout",
    },
    "ringfence/backends/confined/_supervisor.py": {
        "os.posix_spawn": "the confined session's PID 1 inside the sandbox: a standalone "
        "program that imports almost nothing (it is the session's start-up cost); the sandbox "
        "itself is spawned through _proc",
        "os.fork": "change sets: the command's child confines itself (Landlock, capabilities, "
        "seccomp) after the supervisor mounted its overlays, then execs; exec checks: the child "
        "installs the exec filter and hands over its listener before its exec (and the probe "
        "of that at start)",
        "os.execve": "the end of that child",
    },
    "ringfence/bridge/_relay.py": {
        "os.posix_spawn": "the script runner behind its relay in a remote engine's container: "
        "a standalone program there (python -I -S, standard library only); the relay itself "
        "is started by docker exec",
    },
    "ringfence/workspace/_search.py": {
        "subprocess.Popen": "ripgrep as grep_files' prefilter, in a worker thread (trio's "
        "process API cannot run there); killed and waited for by RipgrepRun.kill",
    },
}


# layer -> why none of its modules is held to the rule. Not the runtime's children: the
# benchmarks time ringfence against bare spawns (`subprocess.run`, `python -I -c pass`,
# `git`, `rg`), which must be exactly what a user would run without ringfence.
SPAWN_EXEMPT_LAYERS: dict[str, str] = {
    "bench": "the overhead suite's baselines are bare spawns by design; the runtime never "
    "imports it",
}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name, from the module's imports (at any depth)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes in annotations (``subprocess.Popen[bytes]`` names a type, spawns nothing)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        notes: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(node.returns)
        elif isinstance(node, (ast.arg, ast.AnnAssign)):
            notes.append(node.annotation)
        for note in notes:
            if note is not None:
                out.update(id(n) for n in ast.walk(note))
    return out


def _spawns(module: Module) -> Iterator[tuple[str, int]]:
    """Every use of a spawning function (a call, or passing it on), outside annotations."""
    aliases = _aliases(module.tree)
    notes = _annotation_nodes(module.tree)
    for node in ast.walk(module.tree):
        if id(node) in notes:
            continue
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = _dotted(node, aliases)
            if name in SPAWNERS:
                yield name, node.lineno


def test_only_proc_spawns_processes() -> None:
    found: dict[str, set[str]] = {}
    exempt_used: set[str] = set()
    offenders = []
    for m in MODULES:
        if m.rel == "ringfence/_proc.py":
            continue
        for name, line in _spawns(m):
            if m.layer in SPAWN_EXEMPT_LAYERS:
                exempt_used.add(m.layer)
                continue
            found.setdefault(m.rel, set()).add(name)
            if name not in SPAWN_EXCEPTIONS.get(m.rel, {}):
                offenders.append(f"{m.rel}:{line} uses {name}; spawn through ringfence._proc")
    assert offenders == []
    stale = {
        f"{rel}: {name}"
        for rel, names in SPAWN_EXCEPTIONS.items()
        for name in names
        if name not in found.get(rel, set())
    }
    assert stale == set(), "exceptions no longer needed: remove them"
    assert exempt_used == set(SPAWN_EXEMPT_LAYERS), "exempt layers that spawn nothing: remove them"


def test_proc_is_the_supervisor() -> None:
    assert set(_spawns(BY_NAME["ringfence._proc"])), "ringfence/_proc.py spawns nothing?"


# -- only the resolver opens workspace paths ---------------------------------------------

# Functions that take a path. Each call in a workspace module must act relative to a
# descriptor: a dir_fd keyword, or a descriptor as the first argument.
PATH_FUNCTIONS = frozenset(
    {
        *(
            f"os.{n}"
            for n in [
                "open",
                "access",
                "chmod",
                "chown",
                "lchown",
                "link",
                "listdir",
                "lstat",
                "mkdir",
                "makedirs",
                "mkfifo",
                "mknod",
                "readlink",
                "remove",
                "removedirs",
                "rename",
                "renames",
                "replace",
                "rmdir",
                "scandir",
                "stat",
                "symlink",
                "truncate",
                "unlink",
                "utime",
                "walk",
                "fwalk",
                "getxattr",
                "setxattr",
                "listxattr",
                "removexattr",
            ]
        ),
        *(
            f"os.path.{n}"
            for n in [
                "exists",
                "lexists",
                "isdir",
                "isfile",
                "islink",
                "ismount",
                "realpath",
                "getsize",
            ]
        ),
        "open",
        "io.open",
        *(
            f"shutil.{n}"
            for n in [
                "copy",
                "copy2",
                "copyfile",
                "copytree",
                "move",
                "rmtree",
                "chown",
                "disk_usage",
            ]
        ),
    }
)
DIR_FD_KEYWORDS = frozenset({"dir_fd", "src_dir_fd", "dst_dir_fd"})
RESOLVER_MODULES = frozenset({"ringfence/workspace/_resolver.py"})

# (file, function, callee) -> why it may use a path string.
PATH_EXCEPTIONS: dict[tuple[str, str, str], str] = {
    ("ringfence/workspace/git/_scan.py", "scan_git_metadata", "os.open"): (
        "run_shell's git check scans the roots its backend was given (a shell command is not "
        "confined by the resolver): each root is opened once by its path, everything below "
        "it by descriptor with O_NOFOLLOW; could take the resolver's root descriptors"
    ),
    ("ringfence/workspace/git/_enforce.py", "_open_beneath", "os.open"): (
        "the same root, opened again to restore or quarantine below it by descriptor"
    ),
    ("ringfence/workspace/git/_enforce.py", "_quarantine", "os.open"): (
        "the quarantine directory, outside the workspace"
    ),
    ("ringfence/workspace/git/_enforce.py", "_make_inert", "os.open"): (
        "the quarantine directory, outside the workspace, made inert by descriptor below it"
    ),
    ("ringfence/workspace/git/_enforce.py", "_remove_path", "os.open"): (
        "the quarantine's parent, outside the workspace: a quarantine that could not be made "
        "inert is removed"
    ),
    ("ringfence/workspace/git/_rules.py", "first_git_directory", "os.open"): (
        "a root's ancestors (outside the roots), checked for being a git directory, for "
        "the resolver's open_root and run_shell's git check alike"
    ),
    # git's own configuration files (~/.gitconfig, …), outside the roots unless a root holds
    # them: only their directories' identities are read, to refuse such a root.
    ("ringfence/workspace/git/_config.py", "_holders", "os.path.realpath"): (
        "where git's configuration file lies (its link followed), compared with the roots"
    ),
    ("ringfence/workspace/git/_config.py", "_holders", "os.path.islink"): (
        "whether git's configuration file is a link (a dotfiles directory)"
    ),
    ("ringfence/workspace/git/_config.py", "refuse_git_config_inside_roots", "os.stat"): (
        "each directory holding git's configuration file, matched with the roots by identity"
    ),
    ("ringfence/workspace/git/_config.py", "read_config_text", "os.open"): (
        "git's own configuration file or one it includes (the person's, read to find what it "
        "includes and its hooks directory), or a repository's outside the roots (above a "
        "root, a gitfile's target), read to find what it names; never written"
    ),
    ("ringfence/workspace/git/_config.py", "_other_name", "os.stat"): (
        "git's configuration file itself (outside the roots): how many names it has"
    ),
    ("ringfence/workspace/git/_config.py", "_other_name", "os.open"): (
        "each root, opened once to search it by descriptor for another name of that file"
    ),
    # What a repository's configuration names (includes, hooks directories, programs): the
    # repository git finds at or above a root, and gitfiles' targets, lie outside the roots.
    ("ringfence/workspace/changes/_linked.py", "_names_anything", "os.path.realpath"): (
        "an absolute program path a configuration names, compared with the roots (read only)"
    ),
    ("ringfence/workspace/changes/_linked.py", "names_places", "os.path.realpath"): (
        "the roots' own real paths, to compare such program paths with"
    ),
    ("ringfence/workspace/changes/_linked.py", "_repository_at", "os.lstat"): (
        "a root's ancestor's .git, outside the roots: is there a repository above the root"
    ),
    ("ringfence/workspace/changes/_linked.py", "_repository_at", "open"): (
        "that ancestor's gitfile, read (never written) for the git directory it names"
    ),
    ("ringfence/workspace/changes/_linked.py", "_repository_at", "os.open"): (
        "that git directory, checked for being one (is_git_directory) by descriptor"
    ),
    ("ringfence/workspace/changes/_linked.py", "_repository_at", "os.scandir"): (
        "that git directory's hooks, listed for links into the roots"
    ),
    ("ringfence/workspace/changes/_store.py", "_open_store", "os.makedirs"): (
        "the checkpoint store under $RINGFENCE_HOME, outside every root: made by its path "
        "once, everything below it reached by descriptor"
    ),
    ("ringfence/workspace/changes/_store.py", "_open_store", "os.open"): (
        "the same store directory, opened once by its path"
    ),
    ("ringfence/workspace/changes/_view.py", "_lstat", "os.lstat"): (
        "the resulting-tree check follows links as the kernel does, and a link may lead "
        "outside the roots: there the host is read by path, to judge the link or what git "
        "would find through it; nothing outside is written, and inside the roots every read "
        "goes through the root's descriptor"
    ),
    ("ringfence/workspace/changes/_view.py", "readlink", "os.readlink"): (
        "the same check reading a link's target outside the roots"
    ),
    ("ringfence/workspace/changes/_view.py", "read", "os.open"): (
        "the same check reading a HEAD, commondir or gitfile outside the roots (O_NOFOLLOW, "
        "a regular file only, a few bytes)"
    ),
    ("ringfence/workspace/changes/_linked.py", "_into_root", "os.path.realpath"): (
        "a link in git metadata whose walk left the roots (a host link on the way, another "
        "mount of a root): the host resolves it, only to judge whether it is a root's place"
    ),
    ("ringfence/workspace/changes/_linked.py", "_into_root", "os.stat"): (
        "the same judgment: that place (or its deepest existing part) compared with the "
        "roots by device and inode; nothing is opened, read or written through it"
    ),
    ("ringfence/workspace/_workspace.py", "_add_common_directories", "os.open"): (
        "a git directory found inside a root (mounted read-only), opened to read its commondir"
    ),
    ("ringfence/workspace/_workspace.py", "_add_common_directories", "os.path.realpath"): (
        "where that commondir leads (git's realpath), mounted read-only too if inside a root"
    ),
    ("ringfence/workspace/_workspace.py", "_scan_git", "os.path.realpath"): (
        "git_directories lists read-only mount points for run_shell: a .git link's or "
        "gitfile's target is resolved by name and kept only when it lies inside a root; "
        "nothing is opened, read or written through it"
    ),
}


def _is_descriptor(arg: ast.expr) -> bool:
    """A descriptor by the project's naming (``fd``, ``*fd``, ``x.fd``), or its /proc link."""
    if isinstance(arg, ast.Name):
        return arg.id.endswith("fd")
    if isinstance(arg, ast.Attribute):
        return arg.attr.endswith("fd")
    if isinstance(arg, ast.JoinedStr) and arg.values:
        first = arg.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("/proc/self/fd/")
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value.startswith("/proc/self/")  # the process's own status, not a file of ours
    return False


def _functions(tree: ast.Module) -> dict[int, str]:
    """id(call node) -> the name of the innermost function around it."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            out[id(child)] = name
            visit(child, name)

    visit(tree, "<module>")
    return out


def test_only_the_resolver_opens_workspace_paths() -> None:
    """What is checked, exactly.

    In every module of ``ringfence/workspace`` except ``_resolver.py``, each
    call of a standard-library function that takes a path (:data:`PATH_FUNCTIONS`:
    the ``os``, ``os.path``, ``io``, ``shutil`` and builtin ``open`` ones) must
    act relative to a descriptor: it passes ``dir_fd=`` (or ``src_dir_fd=`` /
    ``dst_dir_fd=``), or its first argument is a descriptor (by the naming
    the code keeps: ``fd``, ``*fd``, ``root.fd``) or a ``/proc/self/fd/N``
    link of one. So no workspace module other than the resolver turns a path
    string into a file; the descriptors come from the resolver (the roots
    are opened by :func:`~ringfence.workspace._resolver.open_root`).

    Not checked: ``pathlib`` methods (no workspace module does I/O through
    them), ``tempfile`` (ripgrep's output spool, outside any root), and the
    other packages (``backends`` mounts the roots for a process it confines).
    """
    offenders = []
    used: set[tuple[str, str, str]] = set()
    for m in MODULES:
        if m.package != "workspace" or m.rel in RESOLVER_MODULES:
            continue
        aliases = {**_aliases(m.tree), "open": "open"}
        where = _functions(m.tree)
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _dotted(node.func, aliases)
            if callee not in PATH_FUNCTIONS:
                continue
            if any(k.arg in DIR_FD_KEYWORDS for k in node.keywords):
                continue
            if node.args and _is_descriptor(node.args[0]):
                continue
            key = (m.rel, where.get(id(node), "<module>"), callee)
            if key in PATH_EXCEPTIONS:
                used.add(key)
                continue
            offenders.append(f"{m.rel}:{node.lineno} {callee}(...) on a path string")
    assert offenders == []
    assert set(PATH_EXCEPTIONS) == used, "exceptions no longer needed: remove them"


# -- no import cycles inside a package ---------------------------------------------------

# Cycles still there, each with what removes it. A listed cycle that is gone fails too.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _cycles() -> list[frozenset[str]]:
    """Strongly connected components (more than one module) of each package's import graph."""
    graph: dict[str, set[str]] = {m.name: set() for m in MODULES}
    for m in MODULES:
        for target, _ in _edges(m):
            if target != m.name and _package_of(target) == m.package:
                graph[m.name].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_cycles_between_the_modules_of_a_package() -> None:
    cycles = set(_cycles())
    unknown = sorted(sorted(c) for c in cycles - set(KNOWN_CYCLES))
    assert unknown == [], "import cycles (function-level imports count)"
    gone = sorted(sorted(c) for c in set(KNOWN_CYCLES) - cycles)
    assert gone == [], "known cycles that are gone: remove them from KNOWN_CYCLES"


# -- the environment ---------------------------------------------------------------------

# Settings are read from the environment in one place: the command line's entry point calls
# Settings.from_env(os.environ) (ringfence/cli/_settings.py) and passes them on as arguments.
# Every other use of os.environ/os.getenv is listed here by module and function, with why it
# is not a setting read; a listed use that is gone fails the test too (the list only shrinks).
ENV_READERS: dict[str, dict[str, str]] = {
    "ringfence/cli/_main.py": {"_main": "the entry point: Settings.from_env(os.environ)"},
    # A child's environment, built from the parent's (not a setting of ringfence's):
    "ringfence/_git.py": {"_environment": "PATH for the git child"},
    "ringfence/workspace/_search.py": {"ripgrep_env": "ripgrep's environment"},
    "ringfence/workspace/_workspace.py": {
        "Workspace.__init__": "PATH, to find ripgrep outside the roots",
    },
    # Not a setting of ringfence's: where the person's git reads its own configuration.
    "ringfence/workspace/git/_config.py": {
        "refuse_git_config_inside_roots": "HOME, XDG_CONFIG_HOME, GIT_CONFIG_GLOBAL/SYSTEM",
    },
    "ringfence/workspace/changes/_linked.py": {
        "names_places": "HOME and git's configuration variables, for what the person's own "
        "configuration and `~/` in a repository's name",
        "config_named": "the same, for the places themselves",
    },
    "ringfence/plugins/_command.py": {
        "CommandRunner._search_path": "PATH for a command hook, its workspace entries left out",
    },
    "ringfence/plugins/_attach.py": {
        "_runnable": "PATH for a plugin's stdio server, its workspace entries left out",
    },
    "ringfence/backends/_host.py": {
        "HostSession.__init__": "the allowlisted variables a host-backend command inherits",
    },
    "ringfence/mcp_host/transport/_stdio.py": {
        "build_stdio_env": "the variables a stdio server's inherit_env names, passed to it",
    },
    "ringfence/backends/confined/_session.py": {
        "ConfinedSession.__init__": "the allowlisted variables a confined command inherits",
        "ConfinedSession._spawn_once": "the supervisor's environment",
    },
    "ringfence/backends/confined/_supervisor.py": {
        "sandboxed_env": "inside the sandbox: the environment its starter sent for the program "
        "(else its own) for its child",
    },
    "ringfence/backends/_run_shell.py": {
        "ShellTool.__init__": "PATH, which local and host commands start with: one naming a "
        "directory commands write makes no name a known program to the Gate",
    },
    "ringfence/backends/confined/_exec.py": {
        "_on_path": "PATH, to find the program an MCP server or hook names, as its exec would",
        "_protected": "HOME, the user's home, which a confined program must not see",
    },
    "ringfence/backends/docker/_session.py": {
        "DockerSession.__init__": "the allowlisted variables a docker command inherits",
        "DockerSession.adopt": "the same, for a container claimed from a warm pool",
    },
    "ringfence/bridge/_launch.py": {"child_env": "the allowlisted variables a runner inherits"},
    # Not ringfence's settings: the Docker client's own variable (as docker-py's from_env reads it)
    # and the user's home, which the sandbox hides.
    "ringfence/backends/docker/_images.py": {"docker_location": "DOCKER_HOST, the Docker client's"},
    # The user's home, which the sandbox hides:
    "ringfence/backends/confined/_plan.py": {
        "_hidden_dirs": "HOME, the user's home, which the sandbox hides",
        "SandboxArgv._argv": "PATH, to find bubblewrap as exec would, its root entries left out",
    },
    # Credentials a manifest names by variable (api_key_env, headers_env, client_secret_env, ...):
    "ringfence/mcp_host/transport/_http.py": {"resolve_headers": "header credentials"},
    "ringfence/mcp_host/oauth/_tokens.py": {"credential_from_env": "OAuth client credentials"},
    # Not a setting: the terminal's capability, read with isatty on the stream written to.
    "ringfence/cli/_output.py": {"is_terminal": "TERM=dumb"},
    # The conformance suite plants a credential in its own environment, then checks that no
    # command a backend runs sees it.
    "ringfence/backends/testing.py": {"check_backend": "plants and removes the credential"},
    # The overhead suite: its baselines' and children's environments, and the scratch
    # RINGFENCE_HOME a run uses (set for the run, restored after).
    "ringfence/bench/_suite.py": {"_scratch_home": "sets and restores RINGFENCE_HOME"},
    "ringfence/bench/gitscan.py": {"_git": "the bare git baseline's environment"},
    "ringfence/bench/latency.py": {
        "run_cli": "the measured command's environment",
        "run_serve": "the measured server's environment",
    },
    "ringfence/bench/serve_start.py": {"run": "the measured server's environment"},
    "ringfence/bench/remote.py": {"run_ship": "the docker CLI baseline's environment"},
    "ringfence/bench/mcp_oauth.py": {"_environ": "the bearer baseline's api_key_env variable"},
    "ringfence/bench/peers/filesystem.py": {"run": "the peer's environment"},
    "ringfence/bench/peers/srt.py": {"run": "the peer's environment"},
}

ENV_EXEMPT: tuple[str, ...] = ()


def _environment_uses(module: Module) -> Iterator[tuple[str, int]]:
    """(function, line) of each use of os.environ/os.getenv (or their bytes forms)."""
    names = {"environ", "getenv", "environb", "getenvb"}

    def visit(node: ast.AST, where: list[str]) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from visit(child, [*where, child.name])
                continue
            if (
                isinstance(child, ast.Attribute)
                and child.attr in names
                and isinstance(child.value, ast.Name)
                and child.value.id == "os"
            ) or (
                isinstance(child, ast.ImportFrom)
                and child.module == "os"
                and any(a.name in names for a in child.names)
            ):
                yield ".".join(where) or "<module>", child.lineno
            yield from visit(child, where)

    yield from visit(module.tree, [])


def test_settings_are_read_from_the_environment_in_one_place() -> None:
    found: dict[str, set[str]] = {}
    bad = []
    for module in MODULES:
        if module.rel.startswith(ENV_EXEMPT):
            continue
        allowed = ENV_READERS.get(module.rel, {})
        for function, line in _environment_uses(module):
            found.setdefault(module.rel, set()).add(function)
            if function not in allowed:
                bad.append(f"{module.rel}:{line} ({function}) reads the environment")
    assert bad == [], "read settings in Settings.from_env (cli/_settings.py) and pass them on"
    gone = sorted(
        f"{rel}: {function}"
        for rel, functions in ENV_READERS.items()
        for function in functions
        if function not in found.get(rel, set())
    )
    assert gone == [], "ENV_READERS lists uses that are gone: remove them"


def test_the_environment_check_can_fail() -> None:
    """A library module that reads a setting is caught, with its function named."""
    tree = ast.parse("import os\n\ndef home():\n    return os.environ.get('RINGFENCE_X')\n")
    module = Module("ringfence.workspace._x", SRC / "workspace" / "_x.py", tree)
    assert list(_environment_uses(module)) == [("home", 4)]


# -- patterns that end at the end -------------------------------------------------------

_PATTERN_CALLS = frozenset({"compile", "match", "search", "fullmatch"})


def _dollar_ended_patterns(module: Module) -> Iterator[tuple[str, int]]:
    """Pattern literals ending in ``$``: Python's ``$`` also matches before a last newline,
    so ``^name$`` with ``match`` admits ``"name\\n"``; such a check must end in ``\\Z``."""
    for node in ast.walk(module.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _PATTERN_CALLS or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            text = first.value
            if text.endswith("$") and not text.endswith("\\$"):
                yield text[-40:], node.lineno


def test_no_pattern_admits_a_trailing_newline() -> None:
    bad = [
        f"{module.rel}:{line} ...{text!r}"
        for module in MODULES
        for text, line in _dollar_ended_patterns(module)
    ]
    assert bad == [], "end these patterns with \\Z (or use fullmatch): $ admits a last newline"


def test_the_trailing_newline_check_can_fail() -> None:
    tree = ast.parse('import re\nNAME = re.compile(r"^[a-z]+$")\n')
    module = Module("ringfence.plugins._x", SRC / "plugins" / "_x.py", tree)
    assert [line for _, line in _dollar_ended_patterns(module)] == [2]


# -- exports -----------------------------------------------------------------------------


def _reexported(module: Module) -> set[str]:
    """Names a package's __init__ binds for its users.

    ``from .x import a as a`` (the re-export idiom, also inside ``if
    TYPE_CHECKING``), the keys of its lazy map (``_LAZY``), and public names
    it defines itself.
    """
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            names.update(a.name for a in node.names if a.asname == a.name)
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not node.name.startswith("_"):
                names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and (
                    not target.id.startswith("_") or target.id == "__version__"
                ):
                    names.add(target.id)
    package = importlib.import_module(module.name)
    names.update(getattr(package, "_LAZY", {}))
    return names


@pytest.mark.parametrize("name", ["ringfence", *(f"ringfence.{p}" for p in PACKAGES)])
def test_all_is_exactly_what_the_package_reexports(name: str) -> None:
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert set(exported) == _reexported(BY_NAME[name])
    assert {n for n in exported if not n.startswith("__")} <= set(dir(package))
    for attr in exported:
        value = getattr(package, attr)  # lazy names load here
        assert value is not None, f"{name}.{attr}"
        origin = getattr(value, "__module__", None)
        if inspect.isclass(value) or inspect.isfunction(value):
            # Re-exported from inside ringfence (the top package re-exports runtime).
            assert origin is not None and origin.startswith("ringfence"), (
                f"{name}.{attr} comes from {origin}"
            )


# The deliberate surface: what a host developer uses, package by package. A name added to
# a package's __all__ is a promise to hosts; add it here too, on purpose. Everything else
# stays importable from its private module.
SURFACE: dict[str, set[str]] = {
    "ringfence.runtime": {
        # the kernel and defining a tool
        *("Kernel", "ToolSpec", "Consequence", "CallContext", "Outcome"),
        *("ProviderTools", "ToolFormat"),
        # posture and policy
        *("Posture", "Verdict", "Effect", "Rules", "Policy", "load_policy", "load_layers"),
        # the one error tree and its codes
        *("RingfenceError", "ERROR_CODES", "Denied", "InvalidArguments", "NotFound"),
        *("OutsideWorkspace", "GitMetadata", "Unwritable", "ToolTimeout", "Unavailable"),
        "ToolError",
        # approvals and hooks
        *("Approver", "ApprovalRequest", "ApprovalAnswer", "Choice", "Hook"),
        *("HeadlessDenyApprover", "ScriptedApprover", "TerminalApprover"),
        # the event stream and its verification
        *("EventSink", "FileSink", "MemorySink", "verify_file"),
        # where ringfence keeps its state and finds bubblewrap (the CLI: RINGFENCE_HOME, ...)
        *("Places", "use_places"),
    },
    "ringfence.workspace": {
        *("Workspace", "register_file_tools"),
        *("CheckpointStore", "Retention", "ChangeSet", "Change", "undo", "register_undo_tool"),
    },
    "ringfence.mcp_host": {
        *("connect_servers", "attach_connectors", "Connectors", "Connector", "inspect_server"),
        *("load_manifest", "load_manifests", "parse_manifest", "Manifest", "ServerConfig"),
        *("Transport", "Trust", "Sandbox", "Policy", "ListLimits"),
        *("SamplingProvider", "SamplingRequest", "SamplingResponse"),
        *("Elicitor", "ElicitationPrompt", "ElicitationAnswer"),
    },
    "ringfence.backends": {
        # choosing and adding a backend, and what a session is
        *("DEFAULT_BACKEND", "backend_names", "register_backend", "select_backend"),
        *("start_session", "SessionSpec", "BackendSession", "ShellResult", "OutputCallback"),
        "register_shell_tool",
        # the built-in backends' options, and the docker warm pool
        *("ConfinedOptions", "DockerOptions", "WarmPool", "PoolStats"),
    },
    "ringfence.bridge": {
        # run_tool_script's configuration and result, and the stubs a model's prompt gets
        *("ScriptConfig", "ScriptLimits", "ScriptResult", "SANDBOX_LEVELS", "ALLOWED_MODULES"),
        *("register_script_tool", "describe_tools"),
    },
    "ringfence.serve": {
        "serve_stdio",
        "serve_http",
        "HttpOptions",
        "build_server",
        "ClientApprover",
    },
    "ringfence.plugins": {
        *("attach_plugins", "load_entries", "PluginEntry", "inspect_plugin", "PluginState"),
        *("read_bundle", "Bundle"),
    },
}

# Names a package still re-exports only because a module being moved by another branch
# (backends/confined, backends/docker, bridge) imports them through the package; each
# goes once that module imports it from its private home.
SURFACE_PENDING: dict[str, set[str]] = {}


@pytest.mark.parametrize("name", sorted(SURFACE))
def test_the_surface_is_the_deliberate_list(name: str) -> None:
    exported = set(importlib.import_module(name).__all__)
    expected = SURFACE[name] | SURFACE_PENDING.get(name, set())
    assert sorted(exported - expected) == [], f"{name} exports names not in SURFACE"
    assert sorted(expected - exported) == [], f"{name} no longer exports names in SURFACE"


def test_ringfence_imports_its_own_names_from_private_modules() -> None:
    """Inside ringfence, code imports from the private module, not a package's surface.

    The surface is for hosts; an internal import through it would make a name public by
    need rather than by choice. The top package's ``__init__`` (a surface over surfaces)
    and the folders other branches are moving are exempt.
    """
    surfaces = set(SURFACE)
    bad = []
    for module in MODULES:
        if module.name == "ringfence" or module.rel.startswith(_FACADE_IMPORT_EXEMPT):
            continue
        for imp in _imports(module):
            names = [n for n in imp.names if f"{imp.target}.{n}" not in BY_NAME]  # not submodules
            if imp.target in surfaces and names:
                bad.append(f"{module.rel}:{imp.line} imports {', '.join(names)}")
    assert bad == []


_FACADE_IMPORT_EXEMPT: tuple[str, ...] = ()


@pytest.mark.parametrize("module", [m for m in MODULES], ids=lambda m: m.name)
def test_every_module_all_names_exist(module: Module) -> None:
    """A private module's ``__all__`` names things it has (checked without importing it)."""
    declared: list[str] | None = None
    for node in module.tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List)
        ):
            declared = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    if declared is None or module.path.name == "__init__.py":
        return
    bound: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    bound.add(t.id)
    assert sorted(set(declared) - bound) == []
