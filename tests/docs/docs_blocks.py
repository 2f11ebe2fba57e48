"""The code blocks of the documentation, found and run: every block runs or says why it cannot.

A page is read as the site and a forge read it: fenced blocks (```` ``` ```` or ``~~~``, at
any indentation). The line just above a fence may hold one HTML comment, invisible in both:

* ``<!-- not-run: REASON -->``: the block is not run; REASON is required (a sample of output,
  a command that needs a browser, a network or minutes).
* ``<!-- run: KEY=VALUE … -->``: how to run it. ``file=PATH`` writes the block to PATH in the
  page's workspace first; ``as=KIND`` says what it is when its language does not
  (``tool-script``, ``policy``, ``manifest``, ``plugin``; ``file``: only written, for a later
  block that uses it); ``exit=N``: a shell block that must
  end with status N (a refusal: 3); ``needs=bwrap|docker``: skipped, naming it, where that is
  missing.

A hidden step, ``<!-- setup: python`` or ``<!-- setup: sh`` up to ``-->``, runs in order with the
blocks and is shown to nobody: files a page's example reads, never the example itself.

Each page runs in a workspace of its own (a copy of ``examples/workspace`` with a git
repository), which is also the current directory, with its own ``RINGFENCE_HOME`` and no managed
policy. By language:

* ``python``: run in this process, the page's blocks sharing one namespace; top-level ``await``
  runs in ``trio.run``. ``as=tool-script``: run by ``ringfence run-script`` in the workspace,
  ``--approve yes``.
* ``sh``/``bash``/``console``/``shell``: ``bash -e -o pipefail`` in the workspace, with this
  checkout's ``ringfence`` first on ``PATH``.
* ``toml``: a policy file passes ``ringfence policy check``; an ``mcp.toml`` (``[[server]]``)
  and a plugin manifest are parsed by ringfence's own loaders.
* ``json``: parsed; an MCP client's configuration whose ``command`` is ``ringfence`` has its
  ``args`` parsed by the command's own parser.

Anything else (``text``, a block without a language) must be marked ``not-run``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringfence.runtime import use_places

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
SHELLS = frozenset({"sh", "bash", "console", "shell"})
TIMEOUT = 180  # seconds for one block


def published() -> tuple[str, ...]:
    """The repository files the site carries (``docs/_hooks/repository.py``)."""
    spec = importlib.util.spec_from_file_location("_docs_hook", DOCS / "_hooks" / "repository.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_docs_hook", module)
    spec.loader.exec_module(module)
    return tuple(module.PUBLISHED)


def pages() -> list[Path]:
    """Every Markdown file whose blocks are the documentation's: README, docs/, published files."""
    found = [REPO / "README.md"]
    found += sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    found += [REPO / p for p in published() if p.endswith(".md")]
    return found


@dataclass(frozen=True)
class Block:
    """One fenced block (or hidden setup step) of a page."""

    page: Path
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    directive: str | None = None  # "not-run: …", "run: …", or None
    hidden: bool = False  # a <!-- setup: … --> step

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def options(self) -> dict[str, str]:
        if not (self.directive or "").startswith("run:"):
            return {}
        words = (self.directive or "").removeprefix("run:").split()
        pairs = (w.split("=", 1) for w in words)
        return {k: v for k, v in ((p[0], p[1] if len(p) > 1 else "") for p in pairs)}

    @property
    def not_run_reason(self) -> str | None:
        if (self.directive or "").startswith("not-run:"):
            return (self.directive or "").removeprefix("not-run:").strip()
        return None


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*((?:run|not-run):.*?)\s*-->\s*$")
_SETUP = re.compile(r"^\s*<!--\s*setup:\s*(\w+)\s*$")


def read_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks and hidden setup steps, in order."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        setup = _SETUP.match(lines[i])
        if setup:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->")
            code = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(page, i + 1, setup.group(1), code, None, hidden=True))
            i = end + 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, mark = fence.group("indent"), fence.group("fence")
        lang = (fence.group("info").split() or [""])[0].strip("{}.")
        closing = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$")
        end = next(j for j in range(i + 1, len(lines)) if closing.match(lines[j]))
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
        above = lines[i - 1] if i > 0 else ""
        directive = _DIRECTIVE.match(above)
        blocks.append(
            Block(page, i + 1, lang, "\n".join(body) + "\n", directive and directive.group(1))
        )
        i = end + 1
    return blocks


def toml_kind(block: Block) -> str:
    """What a TOML block is: a policy file, an ``mcp.toml`` or a plugin manifest."""
    if "as" in block.options:
        return block.options["as"]
    if re.search(r"^\[\[server\]\]|^tool_discovery\s*=", block.code, re.M):
        return "manifest"
    if re.search(r'^version\s*=\s*"', block.code, re.M) and re.search(
        r"^name\s*=", block.code, re.M
    ):
        return "plugin"
    return "policy"


def unclassified(block: Block) -> str | None:
    """Why a block neither runs nor says why not, if so."""
    if block.hidden:
        return None if block.lang in {"python", "sh"} else f"setup: {block.lang!r}"
    if block.directive and block.directive.startswith("not-run:"):
        return None if block.not_run_reason else "not-run without a reason"
    if block.lang in {"python", "toml", "json"} | SHELLS:
        return None
    if block.options.get("as") == "file" and "file" in block.options:
        return None  # any language: written for a later block that uses it
    return f"a {block.lang or 'plain'} block is neither run nor marked not-run: REASON"


# -- running a page ------------------------------------------------------------------------------


@dataclass
class PageRun:
    """One page's workspace, environment and Python namespace."""

    base: Path
    workspace: Path = field(init=False)
    home: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})

    def __post_init__(self) -> None:
        self.workspace = self.base / "project"
        self.home = self.base / "home"
        shutil.copytree(REPO / "examples" / "workspace", self.workspace)
        subprocess.run(["git", "init", "-q", str(self.workspace)], check=True)
        self.home.mkdir()
        managed = self.base / "managed-policy.toml"
        managed.write_text("# no managed rules\n")
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("RINGFENCE_") or k.startswith("RINGFENCE_REQUIRE_")
        }
        env.update(
            RINGFENCE_HOME=str(self.home),
            RINGFENCE_MANAGED_POLICY=str(managed),
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            NO_COLOR="1",
        )
        self.env = env

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This page's current directory and environment, for in-process blocks."""
        old_cwd, old_env = Path.cwd(), dict(os.environ)
        os.chdir(self.workspace)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            with use_places(home=self.home):  # the library's home (the CLI's: RINGFENCE_HOME)
                yield
        finally:
            os.chdir(old_cwd)
            os.environ.clear()
            os.environ.update(old_env)

    def run(self, block: Block) -> None:
        """Run one block; raise AssertionError naming the block and what went wrong."""
        if "file" in block.options:
            target = self.workspace / block.options["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
        if block.options.get("as") == "file":
            assert "file" in block.options, f"{block.where}: as=file needs file="
        elif block.lang == "python" and block.options.get("as") == "tool-script":
            self.tool_script(block)
        elif block.lang == "python":
            self.python(block)
        elif block.lang in SHELLS:
            self.shell(block)
        elif block.lang == "toml":
            self.toml(block)
        elif block.lang == "json":
            self.json(block)
        else:
            raise AssertionError(f"{block.where}: cannot run a {block.lang!r} block")

    def python(self, block: Block) -> None:
        import trio

        code = compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        with self.entered():
            if code.co_flags & inspect.CO_COROUTINE:

                async def top_level() -> None:
                    with trio.fail_after(TIMEOUT):
                        await eval(code, self.namespace)

                trio.run(top_level)
            else:
                exec(code, self.namespace)

    def process(self, argv: list[str], block: Block, stdin: str = "") -> None:
        done = subprocess.run(
            argv,
            cwd=self.workspace,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        want = int(block.options.get("exit", "0"))
        assert done.returncode == want, (
            f"{block.where}: exit {done.returncode}, expected {want}\n"
            f"--- block\n{block.code}--- stdout\n{done.stdout[-4000:]}--- stderr\n{done.stderr[-4000:]}"
        )

    def shell(self, block: Block) -> None:
        self.process(["bash", "-e", "-o", "pipefail", "-s"], block, stdin=block.code)

    def tool_script(self, block: Block) -> None:
        script = self.base / f"script-{block.line}.py"
        script.write_text(block.code)
        argv = [str(BIN / "ringfence"), "run-script", str(script), "--approve", "yes"]
        self.process(argv, block)

    def toml(self, block: Block) -> None:
        kind = toml_kind(block)
        if kind == "manifest":
            from ringfence.mcp_host import parse_manifest

            parse_manifest(block.code, block.where)
        elif kind == "plugin":
            # It names files of its folder: the page writes it (file=) and `plugin add`s the
            # folder, which validates everything; here only its syntax.
            import tomllib

            assert "file" in block.options, f"{block.where}: a plugin manifest needs file="
            tomllib.loads(block.code)
        elif kind == "policy":
            from ringfence.cli._main import main

            path = self.base / f"policy-{block.line}.toml"
            path.write_text(block.code)
            err = io.StringIO()
            with self.entered(), contextlib.redirect_stderr(err):
                code = main(["policy", "check", str(path)])
            assert code == 0, f"{block.where}: policy check: {err.getvalue()}"
        else:
            raise AssertionError(f"{block.where}: unknown toml kind {kind!r}")

    def json(self, block: Block) -> None:
        from ringfence.cli._main import build_parser

        document = json.loads(block.code)
        servers = {**document.get("mcpServers", {}), **document.get("servers", {})}
        for name, server in servers.items():
            if server.get("command") == "ringfence":
                try:
                    build_parser(server["args"]).parse_args(server["args"])
                except Exception as exc:
                    raise AssertionError(f"{block.where}: server {name!r}: {exc}") from exc


def missing_need(block: Block) -> str | None:
    """What a block needs that this machine lacks (``needs=``), if anything."""
    need = block.options.get("needs")
    if need == "bwrap" and not shutil.which("bwrap"):
        return "bubblewrap is not installed"
    if need == "docker":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0:
                return None
        return "no Docker daemon"
    return None
