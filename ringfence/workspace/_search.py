"""The search tools' parts: glob patterns, a walker that never enters links, regex search, ripgrep.

The walker (:func:`list_tree`) reads directories through descriptors and opens
each subdirectory with ``O_NOFOLLOW``, so it never enters a linked directory,
even one swapped in while it runs. Symlinked *files* are reported as links;
the caller keeps one only when the confined resolver says its target is a
regular file inside a root.

``grep_files`` runs ripgrep, when installed, only as a *prefilter*: ``rg -l``
names the files that might match (run without a config file, without ignore
files, without following links and without preprocessors). Every file is then
read through the confined resolver and searched by :func:`search_text`, the
same code the pure-Python fallback runs on every file. So the two engines
return the same results by construction, and nothing ripgrep read along a
path swapped under it can reach a result: result text only ever comes from a
confined read.
"""

from __future__ import annotations

import os
import re
import re._constants as _sre_constants  # the parsed-pattern opcodes (stable in 3.11+)
import re._parser as _sre_parser  # private, but the only way to see a pattern's syntax tree
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from ..runtime import InvalidArguments
from ._gitguard import MAY_START_DOTGIT, is_dotgit

__all__ = [
    "GREP_MAX_FILE_BYTES",
    "MAX_LINE_CHARS",
    "Entry",
    "GlobPattern",
    "RipgrepRun",
    "compile_glob",
    "compile_name_filter",
    "compile_regex",
    "list_tree",
    "search_text",
]

# Files larger than this are skipped by both engines (ripgrep's --max-filesize).
GREP_MAX_FILE_BYTES = 64 * 1024 * 1024
# A matching line longer than this is cut in the result.
MAX_LINE_CHARS = 1000

_RDDIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

# -- glob patterns ----------------------------------------------------------------------


@dataclass(frozen=True)
class GlobPattern:
    """A compiled ``glob_files`` pattern.

    ``prefix``: leading components without wildcards (the walk starts there);
    ``max_depth``: how deep below the prefix a match can be (None with ``**``).
    """

    text: str
    regex: re.Pattern[str]
    dirs_only: bool
    prefix: tuple[str, ...]
    max_depth: int | None

    def matches(self, rel: str) -> bool:
        return self.regex.fullmatch(rel) is not None


def _component_regex(comp: str) -> str:
    out: list[str] = []
    i, n = 0, len(comp)
    while i < n:
        c = comp[i]
        if c == "*":
            while i + 1 < n and comp[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and comp[j] in "!^":
                j += 1
            if j < n and comp[j] == "]":
                j += 1
            while j < n and comp[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))  # an unclosed "[" is literal
            else:
                body = comp[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = "".join(ch if ch == "-" else re.escape(ch) for ch in body)
                out.append(f"[^/{body}]" if negate else f"(?![/])[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


_WILD = re.compile(r"[*?\[]")


def compile_glob(pattern: str, field: str = "pattern") -> GlobPattern:
    """Compile a relative glob: ``*``, ``?``, ``[...]`` within a name, ``**`` across names.

    Refuses absolute patterns and ``..`` components (choose the directory with
    ``path`` instead). A pattern ending in ``/`` matches directories only.
    """
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArguments(f"{field} is empty", field=field)
    if "\x00" in pattern:
        raise InvalidArguments(f"{field} contains a NUL byte", field=field)
    if pattern.startswith("/"):
        raise InvalidArguments(
            f"{field} {pattern!r} is absolute; patterns are relative to 'path' "
            "(choose the directory to search with 'path')",
            field=field,
        )
    dirs_only = pattern.endswith("/")
    comps = [c for c in pattern.split("/") if c not in ("", ".")]
    if any(c == ".." for c in comps):
        raise InvalidArguments(
            f"{field} {pattern!r} contains '..'; choose the directory to search with 'path'",
            field=field,
        )
    if not comps:
        raise InvalidArguments(f"{field} {pattern!r} matches nothing", field=field)
    pieces: list[str] = []
    for i, comp in enumerate(comps):
        last = i == len(comps) - 1
        if comp == "**":
            pieces.append(".*" if last else "(?:[^/]*/)*")
        else:
            pieces.append(_component_regex(comp) + ("" if last else "/"))
    prefix: list[str] = []
    for comp in comps[:-1]:
        if comp == "**" or _WILD.search(comp):
            break
        prefix.append(comp)
    depth = None if "**" in comps else len(comps) - len(prefix)
    return GlobPattern(
        pattern, re.compile("".join(pieces), re.DOTALL), dirs_only, tuple(prefix), depth
    )


def compile_name_filter(glob: str, field: str = "glob") -> Callable[[str], bool]:
    """grep's ``glob`` filter, as ripgrep's ``-g``: no ``/`` means "match the file name"."""
    compiled = compile_glob(glob, field)
    if "/" in glob.rstrip("/"):
        return compiled.matches
    return lambda rel: compiled.regex.fullmatch(rel.rpartition("/")[2]) is not None


# -- the walker -------------------------------------------------------------------------


# An entry is (path relative to the walk's start, "/"-joined; kind), kind being
# "file", "dir", "link" or "other". Plain tuples and strings: a 20k-file walk
# builds 20k of them, and openat2 and ripgrep both speak "/"-joined paths.
Entry = tuple[str, str]


def _scan(fd: int, prefix: str, out: list[Entry], subdirs: list[str]) -> None:
    append = out.append
    with os.scandir(fd) as it:
        for e in it:
            name = e.name
            if (name[0] in MAY_START_DOTGIT or "\\" in name) and is_dotgit(name):
                continue  # git metadata: read it with read_file/list_directory, not by search
            # d_type answers these without a syscall; files are the common case.
            if e.is_file(follow_symlinks=False):
                append((prefix + name, "file"))
            elif e.is_dir(follow_symlinks=False):
                append((prefix + name, "dir"))
                subdirs.append(name)
            elif e.is_symlink():
                append((prefix + name, "link"))
            else:
                append((prefix + name, "other"))


def list_tree(dir_fd: int, *, max_depth: int | None = None) -> list[Entry]:
    """Every entry below ``dir_fd`` as ``(relative path, kind)``; never enters a link;
    skips ``.git`` entries.

    Each subdirectory is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, so a directory swapped for a link is not entered. At most
    one descriptor per level is open. Directories that vanish, turn into links
    or cannot be read are skipped silently (the walk reports what it could see).
    """
    out: list[Entry] = []
    top = os.open(".", _RDDIR, dir_fd=dir_fd)
    # Each frame: (fd, "/"-terminated prefix, depth, subdirectories still to visit).
    stack: list[tuple[int, str, int, list[str]]] = []
    try:
        subdirs: list[str] = []
        try:
            _scan(top, "", out, subdirs)
        except OSError:
            os.close(top)
            return out
        subdirs.reverse()
        stack.append((top, "", 1, subdirs))
        while stack:
            fd, prefix, depth, pending = stack[-1]
            if not pending:
                stack.pop()
                os.close(fd)
                continue
            name = pending.pop()
            if max_depth is not None and depth >= max_depth:
                continue
            try:
                sub = os.open(name, _RDDIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # vanished, or swapped for a link: never entered
            child = f"{prefix}{name}/"
            found: list[str] = []
            try:
                _scan(sub, child, out, found)
            except OSError:
                os.close(sub)
                continue
            found.reverse()
            stack.append((sub, child, depth + 1, found))
    finally:
        while stack:
            os.close(stack.pop()[0])
    return out


# -- regular expressions ----------------------------------------------------------------

_UNSUPPORTED = {
    _sre_constants.ASSERT: "lookahead/lookbehind",
    _sre_constants.ASSERT_NOT: "negative lookahead/lookbehind",
    _sre_constants.GROUPREF: "backreferences",
    _sre_constants.GROUPREF_EXISTS: "conditional groups",
    _sre_constants.ATOMIC_GROUP: "atomic groups",
    _sre_constants.POSSESSIVE_REPEAT: "possessive quantifiers",
}
_OPCODE = _sre_constants._NamedIntConstant  # opcodes are named ints; plain ints are operands
_STRING_ANCHORS = {
    _sre_constants.AT_BEGINNING_STRING: r"\A",
    _sre_constants.AT_END_STRING: r"\Z",
}


def _check_syntax(node: object) -> str | None:
    if isinstance(node, _sre_parser.SubPattern):
        node = node.data
    if isinstance(node, (list, tuple)):
        opcode = node[0] if len(node) == 2 and isinstance(node[0], _OPCODE) else None
        if opcode is not None and opcode in _UNSUPPORTED:
            return _UNSUPPORTED[opcode]
        if opcode == _sre_constants.AT and node[1] in _STRING_ANCHORS:
            return f"the whole-text anchor {_STRING_ANCHORS[node[1]]} (use ^ and $)"
        for item in node:
            if (found := _check_syntax(item)) is not None:
                return found
    return None


def compile_regex(pattern: str, field: str = "pattern") -> re.Pattern[str]:
    """Compile a grep pattern: the syntax ripgrep and Python's ``re`` share.

    Refused, so both engines always mean the same thing: lookaround,
    backreferences, conditionals, atomic groups, possessive quantifiers and
    ``\\A``/``\\Z``. Lines are matched one at a time; ``^`` and ``$`` are
    line anchors.
    """
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArguments(f"{field} is empty", field=field)
    try:
        compiled = re.compile(pattern, re.MULTILINE)
        tree = _sre_parser.parse(pattern, re.MULTILINE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise InvalidArguments(
            f"{field} is not a valid regular expression: {exc}", field=field
        ) from None
    if (found := _check_syntax(tree)) is not None:
        raise InvalidArguments(
            f"{field} uses {found}, which grep_files does not support (it matches line by "
            "line with the syntax ripgrep and Python share)",
            field=field,
        )
    return compiled


def search_text(rx: re.Pattern[str], data: bytes, limit: int) -> list[tuple[int, str]]:
    """Matching lines of ``data`` as ``(line number, text)``, at most ``limit``.

    A file with a NUL byte is binary and has no matching lines. Text is
    decoded as UTF-8 (undecodable bytes become U+FFFD). A line matches when
    the pattern matches within it; the whole text is scanned first so a big
    file costs one regex pass, not one per line: any match inside a line is
    also a match of the whole text at the same place (``^``/``$`` are line
    anchors and the string anchors are refused), so no matching line is skipped.
    """
    if limit <= 0 or b"\x00" in data:
        return []
    text = data.decode("utf-8", "replace")
    n = len(text)
    out: list[tuple[int, str]] = []
    pos = 0
    line_no = 1
    counted_to = 0
    while pos <= n and len(out) < limit:
        m = rx.search(text, pos)
        if m is None:
            break
        start = m.start()
        if start == n and (n == 0 or text[-1] == "\n"):
            break  # an empty match after the final newline is not a line
        k = text.rfind("\n", pos, start)
        line_start = k + 1 if k >= 0 else pos
        line_end = text.find("\n", start)
        if line_end < 0:
            line_end = n
        line_no += text.count("\n", counted_to, line_start)
        counted_to = line_start
        line = text[line_start:line_end]
        if rx.search(line) is not None:
            shown = line[:-1] if line.endswith("\r") else line
            if len(shown) > MAX_LINE_CHARS:
                shown = (
                    shown[:MAX_LINE_CHARS] + f" [… {len(shown) - MAX_LINE_CHARS} more characters]"
                )
            out.append((line_no, shown))
        pos = line_end + 1
    return out


# -- ripgrep as a prefilter -------------------------------------------------------------


def ripgrep_env() -> dict[str, str]:
    """The environment ripgrep runs with: ours, without a configuration file."""
    env = dict(os.environ)
    env.pop("RIPGREP_CONFIG_PATH", None)
    return env


class RipgrepRun:
    """``rg -l`` over one directory, started now and read by :meth:`finish`.

    The directory is handed over as ``/proc/<pid>/fd/<fd>`` for the child's
    working directory, so ripgrep starts in exactly the directory the resolver
    opened. Output goes to an unlinked temp file, so ripgrep never stalls on
    a full pipe while the walker runs.
    """

    def __init__(self, rg: str, dir_fd: int, pattern: str) -> None:
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish() or kill()
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish() or kill()
        cmd = [
            rg,
            "--no-config",
            "--files-with-matches",
            "--null",
            "--hidden",
            "--no-ignore",
            "--no-follow",
            "--no-pre",
            "--no-search-zip",
            "--no-messages",
            "--color",
            "never",
            "--max-filesize",
            f"{GREP_MAX_FILE_BYTES // (1024 * 1024)}M",
            "--glob",
            "!.git",
            "--regexp",
            pattern,
            "--",
            ".",
        ]
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd,
                cwd=f"/proc/{os.getpid()}/fd/{dir_fd}",
                env=ripgrep_env(),
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
            )
        except OSError:
            self._proc = None
            self._out.close()
            self._err.close()

    def finish(self) -> set[str] | None:
        """Paths (relative components) ripgrep says may match; None if it could not run."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait()
            self._out.seek(0)
            data = self._out.read()
            self._err.seek(0)
            err = self._err.read()
        finally:
            self._out.close()
            self._err.close()
        if code not in (0, 1) and (not data or b"regex" in err.lower()):
            return None  # ripgrep refused the pattern or failed outright
        found: set[str] = set()
        for raw in data.split(b"\x00"):
            if raw:
                name = os.fsdecode(raw)
                found.add(name[2:] if name.startswith("./") else name)
        return found

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if not self._out.closed:
            self._out.close()
            self._err.close()
