"""git's own configuration files for the person: never inside a workspace root.

git runs what its configuration names (``core.fsmonitor`` on ``git status``,
``core.pager``, aliases, filters) in *every* repository, and the global and
system files are read wherever git runs: ``$GIT_CONFIG_GLOBAL``, else
``~/.gitconfig`` and ``$XDG_CONFIG_HOME/git/config`` (``~/.config/git/config``);
``$GIT_CONFIG_SYSTEM``, else ``/etc/gitconfig``. A workspace root that holds one
(the home itself, ``~/.config``, a dotfiles directory a ``~/.gitconfig`` link
points into) would let any writer of the workspace — a file tool, a merge, a
writable MCP server — plant a command the host's next ``git status`` runs.

So such a root is refused outright (like ``$RINGFENCE_HOME`` inside a root): one
check of one fact, instead of a rule every writer must apply. Compared by
identity (device and inode of each directory from the file's real directory up
to ``/``), so symlinks and bind mounts spelling a root otherwise count; a file
that does not exist yet is judged by the directories that would hold it.

A file with more than one name (a hard link: a dotfiles directory kept by
``ln`` rather than ``ln -s``) may have one inside a root whatever directory
holds ``~/.gitconfig``: a command writing the roots directly
(``--no-change-sets``, ``host``, a writable MCP server) appends to the shared
inode. The roots are then searched for that inode (device and inode of each
entry, links not followed): only when git's file has several names.

What those files name is git's configuration too: the files they include
(``include.path``, ``includeIf.<condition>.path``: whatever the condition, at any
depth git follows) are held to the same rule, and so is the directory
``core.hooksPath`` names when it is absolute or under ``~/`` (a relative one is
each repository's own, like ``.githooks``). Programs the configuration names by
path (``core.fsmonitor = ~/proj/fsmon``, an alias's script) are not followed.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ...runtime._errors import InvalidArguments

__all__ = [
    "git_config_files",
    "git_config_names",
    "refuse_git_config_inside_roots",
    "runs_a_command",
]

# git follows includes this deep (its MAX_INCLUDE_DEPTH), and reads a file whole; a person's
# configuration larger than this is read this far (what lies past it is not followed).
_MAX_INCLUDE_DEPTH = 10
_READ_MAX_BYTES = 1 << 20


def git_config_files(env: Mapping[str, str]) -> list[Path]:
    """The configuration files git reads for a person with this environment (whether they
    exist or not): the global and the system ones, as git chooses them."""
    files: list[Path] = []
    home = env.get("HOME")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(env["GIT_CONFIG_GLOBAL"]))
    elif home:
        xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [Path(home) / ".gitconfig", Path(xdg) / "git" / "config"]
    files.append(Path(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    return [f for f in files if f.is_absolute()]


def git_config_names(file: Path, env: Mapping[str, str]) -> tuple[list[Path], list[Path]]:
    """``(files, hook directories)`` that the configuration ``file`` names, as git reads it:
    the files it includes (``include.path``, ``includeIf.*.path``, any condition), theirs in
    turn up to git's depth, and the ``core.hooksPath`` directories (absolute or ``~/``).
    Relative includes are relative to the including file's directory, ``~/`` is ``$HOME``."""
    files: list[Path] = []
    hooks: list[Path] = []
    pending = [(file, 0)]
    seen: set[Path] = set()
    while pending:
        current, depth = pending.pop()
        if current in seen or depth > _MAX_INCLUDE_DEPTH:
            continue
        seen.add(current)
        for section, key, value in _entries(read_config_text(current)):
            path = _expand(value, env)
            if path is None:
                continue
            if key == "path" and section in ("include", "includeif"):
                included = path if path.is_absolute() else current.parent / path
                files.append(included)
                pending.append((included, depth + 1))
            elif section == "core" and key == "hookspath" and path.is_absolute():
                hooks.append(path)
    return files, hooks


def read_config_text(file: str | Path) -> str:
    """The text of a configuration file outside the roots (the person's, or a repository's
    that lies outside them), up to a MiB; "" when it is no regular file or cannot be read
    (a path holding a NUL, which a configuration's value may spell, included)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, _READ_MAX_BYTES).decode("utf-8", "surrogateescape")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _expand(value: str, env: Mapping[str, str]) -> Path | None:
    """git's path expansion: ``~/`` is ``$HOME``, ``~user/`` that user's home; a leading
    ``:(optional)`` (the path is skipped while it does not exist) dropped."""
    value = value.removeprefix(":(optional)")
    if not value:
        return None
    if value == "~" or value.startswith("~/"):
        home = env.get("HOME")
        return Path(home + value[1:]) if home else None
    if value.startswith("~"):
        expanded = os.path.expanduser(value)
        return None if expanded.startswith("~") else Path(expanded)
    return Path(value)


def _entries(text: str) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` of each variable in git's configuration syntax, section
    and key lower-cased (the subsection dropped): ``[section "sub"]``, ``[section.sub]``,
    ``key = value`` (quotes, ``\\`` escapes, ``#``/``;`` comments, a ``\\`` ending a line
    continues it), a variable on a header's line."""
    out: list[tuple[str, str, str]] = []
    section = ""
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        ch = text[i]
        if ch in "#;":
            i = _line_end(text, i)
            continue
        if ch == "[":
            end = text.find("]", i)
            if end < 0:
                break
            header = text[i + 1 : end].strip()
            section = header.split(None, 1)[0].split(".", 1)[0].lower() if header else ""
            i = end + 1
            continue
        start = i
        while i < n and (text[i].isalnum() or text[i] == "-"):
            i += 1
        key = text[start:i].lower()
        if not key:
            i = _line_end(text, i)
            continue
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == "=":
            value, i = _value(text, i + 1)
        else:
            value, i = "", _line_end(text, i)
        out.append((section, key, value))
    return out


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _value(text: str, i: int) -> tuple[str, int]:
    """A value from ``i`` to its line's end, as git parses it; and where the next line starts."""
    out: list[str] = []
    quoted = False
    pending_space = ""
    n = len(text)
    while i < n:
        ch = text[i]
        i += 1
        if ch == "\n":
            break
        if ch == "\\":
            nxt = text[i] if i < n else ""
            i += 1
            if nxt == "\n":
                continue  # a continued line
            if nxt == "\r" and text[i : i + 1] == "\n":
                i += 1
                continue
            out.append(pending_space + {"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            pending_space = ""
            continue
        if ch == '"':
            quoted = not quoted
            continue
        if not quoted and ch in "#;":
            return "".join(out), _line_end(text, i - 1)
        if not quoted and ch in " \t\r":
            if out:
                pending_space += ch
            continue
        out.append(pending_space + ch)
        pending_space = ""
    return "".join(out), i


def _holders(file: Path) -> list[Path]:
    """The directories that hold ``file`` (its own and every one above), as spelled and as
    its link, if it is one, resolves."""
    places = [Path(os.path.realpath(file.parent))]
    if os.path.islink(file):
        places.append(Path(os.path.realpath(file)).parent)
    return [d for place in places for d in (place, *place.parents)]


def refuse_git_config_inside_roots(
    roots: Sequence[Path], env: Mapping[str, str] | None = None
) -> None:
    """Raise ``InvalidArguments`` (field ``roots``) when a root holds a git configuration
    file of :func:`git_config_files` (``env``: the person's, default this process's)."""
    by_identity: dict[tuple[int, int], Path] = {}
    for path in roots:
        st = os.stat(path)
        by_identity[(st.st_dev, st.st_ino)] = path
    env = os.environ if env is None else env
    named: list[tuple[Path, Path]] = []  # (what git reads, the file of the person's it is)
    for base in git_config_files(env):
        named.append((base, base))
        included, hooks = git_config_names(base, env)
        named += [(f, f) for f in included]
        named += [(hook / "pre-commit", hook) for hook in hooks]  # any hook in that directory
    for held, file in named:
        for where in _holders(held):
            try:
                st = os.stat(where)
            except OSError:
                continue  # not made yet: the directories above it decide
            root = by_identity.get((st.st_dev, st.st_ino))
            if root is not None:
                raise _held(root, file, "choose a root that does not hold it (a project directory)")
        if held is not file:
            continue  # a hooks directory: its files are new names, not another name of one
        linked = _other_name(file, roots)
        if linked is not None:
            root, name = linked
            raise _held(
                root,
                file,
                f"{name} is the same file (a hard link); give it a file of its own (cp it to "
                "a new file, then mv that over it) or choose another root",
            )


def _held(root: Path, file: Path, fix: str) -> InvalidArguments:
    return InvalidArguments(
        f"the workspace root {root} holds {file}, git's own configuration: any "
        "tool writing the workspace could set a command (core.fsmonitor, "
        "core.pager, an alias) that the host's next git runs in every repository; " + fix,
        field="roots",
        root=str(root),
        git_config=str(file),
    )


def _other_name(file: Path, roots: Sequence[Path]) -> tuple[Path, Path] | None:
    """``(root, name)``: a name below a root of the regular file ``file`` (its link followed)
    when it has more than one name, else None. A walk of every root that never follows a
    link, matching each entry's device and inode; done only for a file with several names."""
    try:
        st = os.stat(file)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return None
    wanted = (st.st_dev, st.st_ino)
    for root in roots:
        try:
            top = os.open(root, _DIR_FLAGS)
        except OSError:
            continue
        found = _search(top, wanted)
        if found is not None:
            return root, root / found
    return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _search(top: int, wanted: tuple[int, int]) -> str | None:
    """The path below the directory ``top`` (closed here) of a file whose device and inode
    are ``wanted``, or None. By descriptor, links never followed; one ``lstat`` per file
    (not readdir's ``d_ino``, which is not ``st_ino`` on every file system)."""
    pending = [(top, "")]
    try:
        while pending:
            fd, rel = pending.pop()
            try:
                with os.scandir(fd) as entries:
                    listing = list(entries)
                for entry in listing:
                    name = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), name))
                        elif entry.is_file(follow_symlinks=False):
                            found = entry.stat(follow_symlinks=False)
                            if (found.st_dev, found.st_ino) == wanted:
                                return name
                    except OSError:
                        continue
            except OSError:
                continue
            finally:
                os.close(fd)
    finally:
        for fd, _ in pending:
            os.close(fd)
    return None


def expand_config_path(value: str, env: Mapping[str, str]) -> str | None:
    """A path value of git's configuration as git expands it (``~/`` is ``$HOME``), or None."""
    path = _expand(value, env)
    return None if path is None else str(path)


# Settings whose value git runs as a command (a shell line, or a program's path), by section
# and key (any subsection: ``diff.<driver>.textconv``); every key of ``alias`` (``!cmd``) and
# ``pager`` sections. From git-config(1).
_PROGRAM_KEYS = frozenset(
    {
        ("core", "fsmonitor"),
        ("core", "pager"),
        ("core", "editor"),
        ("core", "sshcommand"),
        ("core", "askpass"),
        ("core", "gitproxy"),
        ("sequence", "editor"),
        ("diff", "external"),
        ("diff", "command"),
        ("diff", "textconv"),
        ("difftool", "cmd"),
        ("difftool", "path"),
        ("mergetool", "cmd"),
        ("mergetool", "path"),
        ("merge", "driver"),
        ("filter", "clean"),
        ("filter", "smudge"),
        ("filter", "process"),
        ("credential", "helper"),
        ("gpg", "program"),
        ("interactive", "difffilter"),
        ("remote", "receivepack"),
        ("remote", "uploadpack"),
        ("trailer", "command"),
        ("trailer", "cmd"),
        ("browser", "cmd"),
        ("browser", "path"),
        ("man", "cmd"),
        ("man", "path"),
        ("web", "browser"),
        ("imap", "tunnel"),
        ("sendemail", "sendmailcmd"),
        ("sendemail", "smtpserver"),
        ("submodule", "update"),
        ("instaweb", "httpd"),
        ("instaweb", "browser"),
        ("svn", "authorsprog"),
        # git-lfs runs these from git's configuration: a custom transfer agent's program, an
        # extension's filters.
        ("lfs", "path"),
        ("lfs", "clean"),
        ("lfs", "smudge"),
    }
)
_PROGRAM_SECTIONS = frozenset({"alias", "pager"})
# git names most settings it runs by what they are, and adds such settings with new versions:
# ``hook.<name>.command`` (git 2.54's configured hooks), ``tar.<format>.command`` (``git
# archive``), ``gpg.ssh.defaultKeyCommand``, ``core.alternateRefsCommand``,
# ``sendemail.toCmd``/``ccCmd``/``headerCmd``, ``uploadpack.packObjectsHook``, ``guitool.*.cmd``.
# A key ending so is a command whatever its section (a list of keys missed ``tar.tgz.command``:
# the agent's ``tools/gz.sh`` ran in the person's ``git archive --format=tgz``); ``advice.*``
# are booleans (``advice.ignoredHook``).
_PROGRAM_KEY_ENDINGS = ("command", "cmd", "program", "hook", "helper", "editor")


def runs_a_command(section: str, key: str) -> bool:
    """Does git run the value of ``section.<any>.key`` (lower-cased) as a command or program?"""
    if (section, key) in _PROGRAM_KEYS or section in _PROGRAM_SECTIONS:
        return True
    return section != "advice" and key.endswith(_PROGRAM_KEY_ENDINGS)


class Settings(NamedTuple):
    """What a configuration file names, as written (unexpanded): the files it includes
    (``include.path``, ``includeIf.<condition>.path`` whatever the condition: the safe side),
    its ``core.hooksPath`` and ``core.worktree`` values, and the words of the commands it has
    git run (each word of each value :func:`runs_a_command`, an alias's ``!`` dropped)."""

    includes: list[str]
    hooks: list[str]
    worktrees: list[str]
    programs: list[str]


def repository_settings(text: str) -> Settings:
    """The :class:`Settings` of a configuration file's text, in git's syntax."""
    found = Settings([], [], [], [])
    for section, key, value in _entries(text):
        if not value:
            continue
        if key == "path" and section in ("include", "includeif"):
            found.includes.append(value)
        elif section == "core" and key == "hookspath":
            found.hooks.append(value)
        elif section == "core" and key == "worktree":
            found.worktrees.append(value)
        if runs_a_command(section, key):
            found.programs.extend(_words(value.removeprefix("!")))
    return found


def _words(command: str, depth: int = 0) -> list[str]:
    """The words of a shell line as the shell would split them (quotes removed, ``;``, ``|``,
    ``&``, parentheses and redirections apart), a quoted word holding a line of its own
    (``sh -c 'tools/x; y'``) split again; on whitespace when it does not parse."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = command.split()
    out: list[str] = []
    for at, word in enumerate(words):
        out.append(word)
        out.extend(_attached(word))
        if word.startswith("/") and at and words[at - 1] == ")":
            # ``$(git rev-parse --show-toplevel)/tools/x``: the worktree's top, most likely.
            out.append(word.lstrip("/"))
        if depth < 4 and any(ch in word for ch in " \t\n"):
            out.extend(_words(word, depth + 1))
    return out


def _attached(word: str) -> list[str]:
    """The paths a program may read from one word beyond the word itself: a short option's
    attached value (``ssh -Fconfig/ssh_config``), what follows each ``=``, ``:`` or ``,``
    (``--rcfile=tools/rc``, ``PYTHONPATH=tools:lib``), what follows a variable
    (``$PWD/tools/x``). ``core.sshCommand = ssh
    -Fconfig/ssh_config`` read the agent's ``config/ssh_config``, whose ``ProxyCommand`` the
    person's ``git fetch`` ran, while only the whole word was taken for a path."""
    found: list[str] = []
    if len(word) > 2 and word[0] == "-" and word[1].isalpha():
        found.append(word[2:])
    # A variable or a command's output before the first ``/`` (``$PWD/tools/x``,
    # ``${TOP}/tools/x``, `` `git rev-parse --show-toplevel`/tools/x``) is taken for the
    # worktree's top: what follows is a place there.
    slash = word.find("/")
    if slash > 0 and ("$" in word[:slash] or "`" in word[:slash]):
        found.append(word[slash + 1 :])
    found += [word[i + 1 :] for i, ch in enumerate(word) if ch in "=:," and i + 1 < len(word)]
    return found


def person_settings(env: Mapping[str, str]) -> Settings:
    """The :class:`Settings` of the person's own configuration (the global and system files
    and what they include): its hooks directory and commands apply in every repository."""
    found = Settings([], [], [], [])
    for base in git_config_files(env):
        included, _ = git_config_names(base, env)
        for file in (base, *included):
            settings = repository_settings(read_config_text(file))
            found.hooks.extend(settings.hooks)
            found.programs.extend(settings.programs)
    return found
