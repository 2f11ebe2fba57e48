"""How a sandboxed program of this package starts: ``python -I -S -c BOOT <module> <file> …``.

The script runner (``ringfence.bridge._runner``) and the confined shell's
supervisor (``ringfence.backends.confined._supervisor``) each run in an
interpreter of their own, inside their sandbox (the runner also inside a
container, from mounted files). :func:`argv` is how both are started; this is
the one place that decides what such a process can import, and it never
touches ``sys.path``:

- ``-I`` (isolated): no ``PYTHON*`` variable, no user site directory, and
  nothing prepended to ``sys.path`` (it implies ``-P``): not the working
  directory, where a command or a script may have planted ``ctypes.py``. ``-S``:
  no site-packages, no ``.pth`` file runs. ``sys.path`` is the standard
  library's directories alone, and every top-level name resolves there.
- The program is imported by its real name (``ringfence.bridge._runner``). Its
  parent packages are registered first as bare package modules (a module with a
  ``__path__`` is a package) whose ``__path__`` is the one directory below
  ``<file>``'s package root: the file is a path the kernel resolved from its own
  package (in a container, where it mounted it), and ringfence's names are looked
  up there and nowhere else. The parents' ``__init__`` modules, which import the
  kernel, trio and the SDKs, do not run; :mod:`ringfence._confine`'s (standard
  library only) does.
- So a program and the modules it imports (:mod:`ringfence._confine`, its
  siblings) use the same relative imports in the kernel's process and in the
  sandbox: no ``sys.path`` entry, no fallback import, and the bytecode cache
  beside each file is used (not a script compiled at every start).
- The program's ``main(argv)`` runs with ``argv = [<file>, …]``, as if the file
  had been run; the process then leaves with ``os._exit`` and its code (nothing to
  flush: a sandboxed program writes with ``os.write`` or unbuffered, and the
  interpreter's teardown would race its threads). An exception prints its
  traceback and exits 1.

Standard library only, like the rest of the package: the kernel imports this
module to build the argv; the boot itself is the string :data:`BOOT`.
"""

from __future__ import annotations

import os

__all__ = ["BOOT", "argv"]

BOOT = """\
import os, sys
name, file = sys.argv[1], sys.argv[2]
parts = name.split(".")
tail = "/" + "/".join(parts[1:]) + ".py"
if len(parts) < 2 or not file.startswith("/") or not file.endswith(tail):
    sys.exit("ringfence: " + file + " is not where the module " + name + " lives")
root = file[: -len(tail)]
for i in range(1, len(parts)):
    package = type(sys)(".".join(parts[:i]))
    package.__path__ = ["/".join([root, *parts[1:i]])]
    sys.modules[package.__name__] = package
del sys.argv[:2]
try:
    __import__(name)
    code = sys.modules[name].main(sys.argv)
except BaseException:
    sys.excepthook(*sys.exc_info())
    code = 1
sys.stderr.flush()
os._exit(code)
"""


def argv(module: str, file: str | os.PathLike[str]) -> list[str]:
    """The interpreter's arguments (after its path) that run ``module``'s ``main``.

    ``file`` is the module's source where the sandbox sees it: an absolute path
    ending in the module's dotted name below its top package
    (``…/bridge/_runner.py`` for ``ringfence.bridge._runner``). The program's
    own arguments follow.
    """
    return ["-I", "-S", "-c", BOOT, module, os.fspath(file)]
