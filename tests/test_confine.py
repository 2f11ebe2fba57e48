"""``ringfence._confine``: the boot that starts a sandboxed program of the package.

The boot (``python -I -S -c BOOT <module> <file> …``) is how the script runner and
the confined shell's supervisor start. These tests run it on a package of their
own, with a working directory full of planted modules, and check what the program
can import: the standard library from ``sys.path`` (unchanged), its own package's
modules from the package's directories, and nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ringfence._confine.boot import argv as boot_argv

PLANTED = "import os\nos.write(1, b'PLANTED')\n"


def _package(site: Path) -> Path:
    """``site/pkg``: an ``__init__`` that must not run, primitives, and a program."""
    pkg = site / "pkg"
    (pkg / "prims").mkdir(parents=True)
    (pkg / "sub").mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('the top package init ran')\n")
    (pkg / "sub" / "__init__.py").write_text("raise SystemExit('the sub package init ran')\n")
    (pkg / "prims" / "__init__.py").write_text("READY = 'prims'\n")
    (pkg / "prims" / "thing.py").write_text("WHERE = __file__\n")
    (pkg / "sub" / "sibling.py").write_text("WHERE = __file__\n")
    (pkg / "sub" / "prog.py").write_text(
        "import json, os, sys\n"
        "from .. import prims\n"
        "from ..prims import thing\n"
        "from . import sibling\n"
        "def main(argv):\n"
        "    os.write(1, json.dumps({'path': sys.path, 'argv': argv, 'prims': prims.READY,\n"
        "        'thing': thing.WHERE, 'sibling': sibling.WHERE,\n"
        "        'name': __name__}).encode())\n"
        "    return int(argv[1]) if argv[1:] and argv[1].isdigit() else 0\n"
    )
    return pkg


def _isolated_path() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys, json; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def _planted_cwd(tmp_path: Path) -> Path:
    cwd = tmp_path / "cwd"
    (cwd / "pkg" / "sub").mkdir(parents=True)
    for name in ("pkg.py", "prims.py", "thing.py", "sibling.py", "prog.py", "json.py"):
        (cwd / name).write_text(PLANTED)
    for name in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/prog.py"):
        (cwd / name).write_text(PLANTED)
    return cwd


def test_the_boot_imports_the_program_s_package_and_the_stdlib_alone(tmp_path: Path) -> None:
    """The program and its relative imports come from the package's own directories; the
    top packages' ``__init__`` never runs; ``sys.path`` is the isolated interpreter's,
    untouched; a working directory of planted modules (``json.py`` among them) is never
    searched; ``main`` gets ``[file, …]`` and its return is the exit code."""
    pkg = _package(tmp_path / "site")
    prog = pkg / "sub" / "prog.py"
    out = subprocess.run(
        [sys.executable, *boot_argv("pkg.sub.prog", prog), "7", "x"],
        cwd=_planted_cwd(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "PLANTED" not in out.stdout + out.stderr
    assert out.returncode == 7, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {
        "path": _isolated_path(),
        "argv": [str(prog), "7", "x"],
        "prims": "prims",
        "thing": str(pkg / "prims" / "thing.py"),
        "sibling": str(pkg / "sub" / "sibling.py"),
        "name": "pkg.sub.prog",
    }


def test_the_boot_refuses_a_file_that_is_not_the_module(tmp_path: Path) -> None:
    """A file whose path does not end in the module's name (or a relative one) is refused
    before anything is imported: the package root is derived from the file, so it must be
    the module's own."""
    pkg = _package(tmp_path / "site")
    evil = tmp_path / "evil.py"
    evil.write_text(PLANTED + "def main(argv):\n    return 0\n")
    cwd = _planted_cwd(tmp_path)
    for module, file in (
        ("pkg.sub.prog", str(evil)),
        ("evil", str(evil)),
        ("pkg.sub.prog", "pkg/sub/prog.py"),
        ("pkg.sub.prog", str(pkg / "sub" / "sibling.py")),
    ):
        out = subprocess.run(
            [sys.executable, *boot_argv(module, file)],
            cwd=cwd if not file.startswith("/") else tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "PLANTED" not in out.stdout + out.stderr, (module, file)
        assert out.returncode == 1, (module, file, out.stderr)
        assert "is not where the module" in out.stderr, (module, file)


def test_an_exception_in_main_exits_1_with_its_traceback(tmp_path: Path) -> None:
    pkg = _package(tmp_path / "site")
    (pkg / "sub" / "broken.py").write_text("def main(argv):\n    raise ValueError('boom')\n")
    out = subprocess.run(
        [sys.executable, *boot_argv("pkg.sub.broken", pkg / "sub" / "broken.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "ValueError: boom" in out.stderr
    assert str(pkg / "sub" / "broken.py") in out.stderr


def test_rename_noreplace_never_replaces_and_syncfs_commits(tmp_path: Path) -> None:
    """The change-set writer's calls: a tree renamed whole, a second rename onto it refused
    with ``EEXIST`` and nothing changed; ``syncfs`` on the directory answers."""
    import errno
    import os

    import pytest

    from ringfence._confine import fscalls

    if not fscalls.can_rename_noreplace():
        pytest.skip("this C library has no renameat2")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "f").write_text("new")
    (tmp_path / "other").mkdir()
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fscalls.rename_noreplace(dirfd, "new", dirfd, "tree")
        with pytest.raises(OSError) as refused:
            fscalls.rename_noreplace(dirfd, "other", dirfd, "tree")
        assert refused.value.errno == errno.EEXIST
        assert refused.value.filename == "tree"
        if fscalls.can_syncfs():
            fscalls.syncfs(dirfd)
    finally:
        os.close(dirfd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "tree"]
    assert (tmp_path / "tree" / "f").read_text() == "new"


def test_a_failed_idmapped_mount_names_its_call_and_mounts_nothing(tmp_path: Path) -> None:
    """``idmapped_mount`` with a descriptor that is no user namespace: OSError naming
    ``mount_setattr`` (or ``open_tree`` where the kernel lacks the new mount API), nothing
    mounted, no descriptor left open."""
    import os

    import pytest

    from ringfence._confine.mounts import idmapped_mount

    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    not_a_userns = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as failed:
            idmapped_mount(str(tmp_path / "src"), str(tmp_path / "dst"), not_a_userns)
    finally:
        os.close(not_a_userns)
    assert failed.value.strerror.startswith(("mount_setattr:", "open_tree:"))
    assert not os.path.ismount(tmp_path / "dst")
    assert len(os.listdir("/proc/self/fd")) == before
