"""What git reads through a link in its metadata: places that are git metadata by another name.

A repository whose ``.git/hooks`` links to ``../githooks`` (or whose
``hooks/pre-commit`` links to ``../../scripts/pre-commit``, or whose ``config`` is a
link) runs and reads what lies there: that place is git metadata however the tree
spells it. :func:`linked_metadata` finds each such place inside the roots on a
:class:`~._view.TreeView` (now, or after a change set), for the writers' checks
(:mod:`._resulting`), the scan around shell commands (:mod:`..git._scan`) and the
sandboxes' read-only mounts.

A repository's configuration names such places too: the files it includes
(``include.path``, ``includeIf.<condition>.path``, relative to the including file) and
the directory ``core.hooksPath`` names (relative to the worktree git runs hooks in, or
the person's own configuration's relative value in every repository). git reads and
runs what lies there as it does ``.git/config`` and ``.git/hooks``, so those places
are git metadata the same way (:func:`config_named`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from ..git._config import (
    Settings,
    expand_config_path,
    git_config_files,
    git_config_names,
    person_settings,
    read_config_text,
    repository_settings,
)
from ..git._rules import (
    GITFILE_MAX_BYTES,
    at_beneath,
    is_dotgit,
    is_git_directory,
    parse_gitfile,
    read_commondir,
)
from ..git._snapshot import IMAGE_MAX_BYTES, GitSnapshot, MetaEntry, in_objects
from ._view import TreeView, realpath

__all__ = ["ConfigNamed", "config_named", "linked_metadata", "names_places"]

# The configuration files of a git directory (its own, a linked worktree's).
_CONFIG_NAMES = frozenset({"config", "config.worktree"})
# git follows includes this deep (its MAX_INCLUDE_DEPTH); a configuration is read this far.
_MAX_INCLUDE_DEPTH = 10
_READ_MAX_BYTES = 1 << 20


class ConfigNamed(str):
    """The path of the configuration file that names a place, and the setting naming it."""

    setting: str

    @classmethod
    def of(cls, config: str, setting: str) -> ConfigNamed:
        named = cls(config)
        named.setting = setting
        return named


def _is_config(rel: str, entry: MetaEntry) -> bool:
    """Is this metadata entry a git directory's configuration file (not a hook's, not an
    object's)?"""
    leaf = rel.rpartition("/")[2]
    if leaf not in _CONFIG_NAMES or entry.kind not in ("file", "symlink"):
        return False
    inner = rel[len(entry.top) + 1 :] if entry.top and rel != entry.top else rel
    return "hooks" not in inner.split("/") and not in_objects(rel, entry.top)


def _person(env: Mapping[str, str]) -> Settings:
    """The person's own settings that name places in every repository: hooks directories and
    the words of their commands that are paths (a bare name is looked up on ``PATH``)."""
    found = person_settings(env)
    return Settings([], found.hooks, [], [w for w in found.programs if "/" in w])


def _names_anything(settings: Settings, roots: Sequence[str], env: Mapping[str, str]) -> bool:
    """Might these settings name a place inside ``roots``: an include or hooks directory, a
    command's word that is relative (found from a worktree) or an absolute path whose real
    path lies in a root (``/usr/lib/git-core/git-credential-store`` names none)."""
    if settings.includes or settings.hooks:
        return True
    for word in settings.programs:
        path = expand_config_path(word, env)
        if path is None:
            continue
        if not path.startswith("/"):
            return True
        if "\0" in path:
            continue
        real = os.path.realpath(path)
        if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            return True
    return False


def names_places(
    snapshot: GitSnapshot, env: Mapping[str, str] | None = None, now: TreeView | None = None
) -> bool:
    """Might git metadata in ``snapshot`` lead git to read or run files elsewhere: a link in
    it, a configuration that includes files, names a hooks directory or has git run a
    command (its image says so, or is not known), or the person's own configuration doing
    so in every repository. Cheap: asked before every write of the file tools.

    With ``now``, each configuration file is read as it is on that view, not as the scan
    saw it: the person changes ``.git/config`` while a session runs (``git config
    include.path ../local.gitconfig``), and a scan from before that names nothing."""
    env = os.environ if env is None else env
    roots = [os.path.realpath(p) for p in snapshot.roots]
    configs = False
    for (index, rel), entry in snapshot.entries.items():
        if entry.kind == "symlink":
            return True
        hooks = entry.kind == "dir" and rel.rpartition("/")[2] == "hooks"
        if now is not None and hooks and _changed(now, index, rel, entry):
            return True  # a link the person put in a hooks directory since (or it is one)
        if _is_config(rel, entry):
            configs = True
            image = entry.image if now is None else _image_now(now, index, rel)
            if image is None or _names_anything(
                repository_settings(image.decode("utf-8", "surrogateescape")), roots, env
            ):
                return True
    for repository in enclosing(snapshot, [str(p) for p in snapshot.roots]):
        if repository.links or any(
            _names_anything(repository_settings(read_config_text(c)), roots, env)
            for c in repository.configs
        ):
            return True
        configs = True
    if any(_inside(os.path.realpath(place), roots) for place, _ in _person_places(env)):
        return True
    return configs and _names_anything(_person(env), roots, env)


def _inside(real: str, roots: Sequence[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def _person_places(env: Mapping[str, str]) -> list[tuple[str, ConfigNamed]]:
    """The person's own configuration files (global, system), the files they include and
    their absolute ``core.hooksPath`` directories: git reads and runs what lies there in
    every repository. A session whose roots hold one is refused when it starts
    (:func:`..git._config.refuse_git_config_inside_roots`); one the person names while it
    runs (``git config --global include.path ~/proj/team.gitconfig``) is git metadata from
    then on, by every writer."""
    out: list[tuple[str, ConfigNamed]] = []
    for base in git_config_files(env):
        files, hooks = git_config_names(base, env)
        out.append((str(base), ConfigNamed.of(str(base), "person's configuration")))
        out += [(str(f), ConfigNamed.of(str(base), "include.path")) for f in files]
        out += [(str(h), ConfigNamed.of(str(base), "core.hooksPath")) for h in hooks]
        # A command's word that is an absolute path (``core.fsmonitor = ~/proj/fsmon.sh``)
        # runs there in every repository, whether or not one lies in the roots.
        for file in (base, *files):
            for word in repository_settings(read_config_text(file)).programs:
                path = expand_config_path(word, env)
                if path is not None and path.startswith("/"):
                    out.append((path, ConfigNamed.of(str(file), "command setting")))
    return [(p, named) for p, named in out if "\0" not in p]


def _changed(view: TreeView, index: int, rel: str, entry: MetaEntry) -> bool:
    """Is the directory ``rel`` of root ``index`` no longer as the scan saw it (another
    kind, entries added or removed: its times)?"""
    if index >= len(view.roots):
        return True
    try:
        with at_beneath(view.roots[index].fd, rel) as (fd, name):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return True
    return not stat.S_ISDIR(st.st_mode) or (st.st_mtime_ns, st.st_ctime_ns) != (
        entry.mtime_ns,
        entry.ctime_ns,
    )


def _image_now(view: TreeView, index: int, rel: str) -> bytes | None:
    """The bytes of the configuration file ``rel`` of root ``index`` as it is on ``view`` (b""
    when gone); None when it is no longer a small regular file (judged as naming places)."""
    if index >= len(view.roots):
        return None
    node = view.lstat(_join(view.roots[index].path, rel))
    if node is None:
        return b""
    if node.kind != "file":
        return None
    data = view.read(_join(view.roots[index].path, rel), node, IMAGE_MAX_BYTES + 1)
    return None if data is None or len(data) > IMAGE_MAX_BYTES else data


def _read_text(view: TreeView, real: str) -> str:
    """The text of the file at ``real`` (resolved) on the view, up to a MiB; "" if none."""
    node = view.lstat(real)
    if node is None:
        return ""
    data = view.read(real, node, _READ_MAX_BYTES)
    return "" if data is None else data.decode("utf-8", "surrogateescape")


def config_named(
    snapshot: GitSnapshot, view: TreeView, env: Mapping[str, str] | None = None
) -> list[tuple[str, ConfigNamed]]:
    """``(place, the configuration naming it)`` for each file a git directory's configuration
    in ``snapshot`` (or the repository git finds above a root: :func:`enclosing`) includes
    (``include.path``, ``includeIf.*.path``, includes of includes to git's depth; relative to
    the including file's directory, ``~/`` the home), each ``core.hooksPath`` directory
    (absolute, ``~/``, or relative to each worktree the git directory serves: its
    ``core.worktree``, the directory holding a ``.git``, a linked worktree's; a bare one's own
    directory), the person's own relative value included, and each word of a command it has
    git run that is a path or names a file at a worktree's top. Places as spelled
    (``.git/../shared.gitconfig``): the caller resolves them on its view."""
    env = os.environ if env is None else env
    paths = [p for p, _ in view.roots]

    def absolute(root: int, path: str) -> str:
        return posixpath.join(paths[root], path) if path else paths[root]

    person = _person(env)
    out: list[tuple[str, ConfigNamed]] = []
    for key, entry in snapshot.entries.items():
        if not _is_config(key[1], entry):
            continue
        config = absolute(*key)
        gitdir = posixpath.dirname(config)

        def tops(
            worktrees: list[str], key: tuple[int, str] = key, gitdir: str = gitdir
        ) -> list[str]:
            return _worktrees(snapshot, view, key, gitdir, worktrees, env)

        out += _config_places(config, view, env, person, tops)
    for repository in enclosing(snapshot, paths):
        for config in repository.configs:

            def above(worktrees: list[str], repository: Enclosing = repository) -> list[str]:
                found = [repository.top]
                for value in worktrees:
                    path = expand_config_path(value, env)
                    if path is not None:
                        found.append(posixpath.join(repository.gitdir, path))
                return found

            out += _config_places(config, view, env, person, above)
    for place, named in _person_places(env):
        if named.setting == "command setting":
            # A directory runs nothing: ``!cd ~/proj && make`` holds no ``~/proj``.
            node = view.lstat(realpath(view, place)[0])
            if node is not None and node.kind == "dir":
                continue
        out.append((place, named))
    return out


def _config_places(
    config: str,
    view: TreeView,
    env: Mapping[str, str],
    person: Settings,
    tops_of: Callable[[list[str]], list[str]],
) -> list[tuple[str, ConfigNamed]]:
    """What the configuration file ``config`` names (see :func:`config_named`), its includes
    followed; ``tops_of`` gives the worktrees its git directory serves from the
    ``core.worktree`` values read."""
    out: list[tuple[str, ConfigNamed]] = []
    found = Settings([], list(person.hooks), [], list(person.programs))
    includes: list[tuple[str, str]] = []
    pending = [(config, 0)]
    seen: set[str] = set()
    while pending:
        current, depth = pending.pop()
        real = realpath(view, current)[0]
        # One file is read once, however spelled (``./a.cfg``, ``../x/a.cfg``): a chain of
        # spellings cannot multiply the reads past the number of files.
        if real in seen or depth > _MAX_INCLUDE_DEPTH:
            continue
        seen.add(real)
        settings = repository_settings(_read_text(view, real))
        found.hooks.extend(settings.hooks)
        found.worktrees.extend(settings.worktrees)
        found.programs.extend(settings.programs)
        for value in settings.includes:
            path = expand_config_path(value, env)
            if path is None:
                continue
            place = (
                path if path.startswith("/") else posixpath.join(posixpath.dirname(current), path)
            )
            includes.append((place, current))
            pending.append((place, depth + 1))
    out += [(place, ConfigNamed.of(current, "include.path")) for place, current in includes]
    named: list[tuple[str, str, bool]] = []  # (value, setting, only when it is there)
    named += [(value, "core.hooksPath", False) for value in found.hooks]
    named += [(w, "command setting", "/" not in w) for w in found.programs]
    tops: list[str] | None = None
    for value, setting, if_there in named:
        path = expand_config_path(value, env)
        if path is None:
            continue
        if path.startswith("/"):
            out.append((path, ConfigNamed.of(config, setting)))
            continue
        if tops is None:
            tops = tops_of(found.worktrees)
        for top in tops:
            place = posixpath.join(top, path)
            node = view.lstat(realpath(view, place)[0]) if setting != "core.hooksPath" else None
            if node is not None and node.kind == "dir":
                continue  # a command's word naming a directory (`!cd src/app && …`) runs nothing
            if not if_there or node is not None:
                out.append((place, ConfigNamed.of(config, setting)))
    return out


class Enclosing(NamedTuple):
    """A repository git finds above a workspace root (outside every root): the directory
    holding its ``.git`` (the worktree's top), its git directory, its configuration files
    (its own, a linked worktree's, its common directory's) and the links in its metadata
    that git follows to hooks and configuration (``hooks``, ``hooks/*``, ``config``)."""

    top: str
    gitdir: str
    configs: list[str]
    links: list[str]


def enclosing(snapshot: GitSnapshot, roots: Sequence[str]) -> list[Enclosing]:
    """The repositories whose git directory may lie outside the roots yet serve a worktree in
    them: the one git's discovery finds from each root (the first ``.git`` directory or
    gitfile at the root or above it, on the host), and the one each gitfile in ``snapshot``
    names (a linked worktree's ``.git``: ``gitdir: /repo/.git/worktrees/wt``; a submodule's).
    Their metadata is outside the roots, so no scan sees it; what their configuration and
    links name inside the roots is git metadata all the same (a monorepo's
    ``core.hooksPath = frontend/.husky/_`` with the workspace at ``frontend``; husky's
    ``.husky/_`` in a worktree of a repository outside the roots)."""
    found: dict[str, Enclosing] = {}
    for root in roots:
        here = root.rstrip("/") or "/"
        while True:
            repository = _repository_at(here)
            if repository is not None:
                found.setdefault(repository.gitdir, repository)
                break
            if here == "/":
                break
            here = posixpath.dirname(here)
    for (index, rel), entry in snapshot.entries.items():
        if entry.kind != "file" or not entry.image or index >= len(roots):
            continue
        if not is_dotgit(rel.rpartition("/")[2]) or parse_gitfile(entry.image) is None:
            continue
        repository = _repository_at(posixpath.join(roots[index], rel.rpartition("/")[0]))
        if repository is not None:
            found.setdefault(repository.gitdir, repository)
    return list(found.values())


def _repository_at(directory: str) -> Enclosing | None:
    """The repository whose ``.git`` (a directory or a gitfile) lies in ``directory``."""
    dotgit = posixpath.join(directory, ".git")
    try:
        st = os.lstat(dotgit)
    except (OSError, ValueError):
        return None
    gitdir = dotgit
    if stat.S_ISREG(st.st_mode):
        with contextlib.suppress(OSError, ValueError):
            with open(dotgit, "rb") as handle:
                named = parse_gitfile(handle.read(GITFILE_MAX_BYTES + 1))
            if named is not None:
                gitdir = posixpath.join(directory, named)
    try:
        fd = os.open(gitdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not is_git_directory(fd):
            return None
        common = read_commondir(fd)
    finally:
        os.close(fd)
    configs = [posixpath.join(gitdir, "config"), posixpath.join(gitdir, "config.worktree")]
    if common is not None:
        configs.append(posixpath.join(posixpath.join(gitdir, common), "config"))
    links: list[str] = []
    for base in {gitdir, posixpath.join(gitdir, common) if common is not None else gitdir}:
        for name in ("config", "hooks"):
            if posixpath.islink(posixpath.join(base, name)):
                links.append(posixpath.join(base, name))
        with (
            contextlib.suppress(OSError, ValueError),
            os.scandir(posixpath.join(base, "hooks")) as hooks,
        ):
            links += [e.path for e in hooks if e.is_symlink()]
    return Enclosing(directory, gitdir, configs, links)


def _worktrees(
    snapshot: GitSnapshot,
    view: TreeView,
    key: tuple[int, str],
    gitdir: str,
    worktrees: list[str],
    env: Mapping[str, str],
) -> list[str]:
    """The directories git runs the hooks of the git directory ``gitdir`` (holding the
    configuration ``key``) in: its ``core.worktree``, the directory holding it when it is a
    ``.git``, each linked worktree its ``worktrees/*/gitdir`` names, each directory whose
    gitfile names it, a bare one itself."""
    tops: list[str] = []
    for value in worktrees:
        path = expand_config_path(value, env)
        if path is not None:
            tops.append(path if path.startswith("/") else posixpath.join(gitdir, path))
    if is_dotgit(posixpath.basename(gitdir)):
        tops.append(posixpath.dirname(gitdir))
    root, rel = key
    below = rel.rpartition("/")[0]
    prefix = f"{below}/worktrees/" if below else "worktrees/"
    for (other, path), entry in snapshot.entries.items():
        if other != root or not path.startswith(prefix) or not path.endswith("/gitdir"):
            continue
        named = os.fsdecode((entry.image or b"").split(b"\n", 1)[0].rstrip(b"\r"))
        if named:
            holder = posixpath.dirname(posixpath.join(view.roots[root].path, path))
            tops.append(posixpath.dirname(posixpath.join(holder, named)))
    own = snapshot.entries.get((root, f"{below}/gitdir" if below else "gitdir"))
    if own is not None and own.image:
        named = os.fsdecode(own.image.split(b"\n", 1)[0].rstrip(b"\r"))
        if named:
            tops.append(posixpath.dirname(posixpath.join(gitdir, named)))
    # A gitfile (``sub/.git``: ``gitdir: ../.git/modules/sub``) makes its directory a worktree
    # of the git directory it names.
    real = None
    for (other, path), entry in snapshot.entries.items():
        if entry.kind != "file" or not entry.image or not is_dotgit(path.rpartition("/")[2]):
            continue
        named = parse_gitfile(entry.image)
        if named is None:
            continue
        holder = posixpath.dirname(posixpath.join(view.roots[other].path, path))
        real = real or realpath(view, gitdir)[0]
        if realpath(view, posixpath.join(holder, named))[0] == real:
            tops.append(holder)
    if not tops:
        tops.append(gitdir)
    return tops


def _join(base: str, name: str) -> str:
    return base + name if base.endswith("/") else f"{base}/{name}"


def linked_metadata(snapshot: GitSnapshot, view: TreeView) -> dict[str, str]:
    """What git reads through a link in git metadata, inside the roots on ``view``: each
    place such a link leads (``.git/hooks -> ../githooks``, ``.git/hooks/pre-commit ->
    ../../scripts/pre-commit``, ``.git/config -> ../gitconfig``), resolved as the kernel
    would (dangling parts kept: what a write there would make), mapped to the link.

    git follows these links when it runs hooks and reads its config, so what lies there is
    git metadata however it is spelled in the tree; links below such a place are followed
    too (what git reads through them as well)."""
    if not names_places(snapshot):
        return {}
    starts = [k for k, e in snapshot.entries.items() if e.kind == "symlink"]
    paths = [p for p, _ in view.roots]

    def absolute(root: int, path: str) -> str:
        return _join(paths[root], path) if path else paths[root]

    others = [absolute(*k) for k in snapshot.links]
    found: dict[str, str] = {}
    pending: list[tuple[str, str]] = [(absolute(*k), absolute(*k)) for k in starts]
    # The links of a repository above a root (its metadata outside every root).
    pending += [(link, link) for r in enclosing(snapshot, paths) for link in r.links]
    # What a repository's configuration names (include.path, core.hooksPath): read likewise.
    pending += config_named(snapshot, view)
    seen: set[str] = set()
    while pending:
        where, link = pending.pop()
        if where in seen:
            continue
        seen.add(where)
        target, _ = realpath(view, where)
        if not view.inside(target):
            # Another spelling of a root's place (a host link on the way, a bind mount of
            # the root) is the same place for git: mapped into the root by identity.
            mapped = _into_root(view, target)
            if mapped is None:
                continue
            target = realpath(view, mapped)[0]
            if not view.inside(target):
                continue
        if target in found:
            continue
        found[target] = link
        below = target if target.endswith("/") else target + "/"
        pending.extend((p, link) for p in others if p.startswith(below))
    return found


def _into_root(view: TreeView, outside: str) -> str | None:
    """``outside`` (a path the view's walk left the roots at) spelled below a root, when the
    host resolves it (or its deepest existing part) into one: the same directory by device
    and inode, found through a host link or another mount of the root. Else None."""
    if "\0" in outside:
        return None  # no path the kernel resolves (a configuration's value may hold one)
    ids = {}
    for root in view.roots:
        with contextlib.suppress(OSError):
            st = os.fstat(root.fd)
            ids[(st.st_dev, st.st_ino)] = root.path
    here = os.path.realpath(outside)
    rest: list[str] = []
    while True:
        with contextlib.suppress(OSError):
            st = os.stat(here)
            top = ids.get((st.st_dev, st.st_ino))
            if top is not None:
                return "/".join([top.rstrip("/") or "", *reversed(rest)]) or "/"
        if here in ("/", ""):
            return None
        here, leaf = os.path.split(here)
        rest.append(leaf)
