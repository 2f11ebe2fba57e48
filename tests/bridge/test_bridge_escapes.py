"""Escapes from a script, attacked for real: each is refused and leaves no trace.

Language layer: every attempt runs as a real script through the public path
with the OS sandbox at level ``none`` (the runner stays root, no Landlock, no
seccomp), so RestrictedPython and the runner's own guards are all that stands
between the script and the host. A successful escape would create ``MARKER``
(a directory under the test's tmp_path) or print a module's repr or "pwned".

OS layer: what escaped code could still do inside the sandbox, run as
unrestricted Python (``mode="plain"``) under the ``strict`` sandbox.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

import pytest
from bridge_helpers import run

from ringfence.bridge import ScriptConfig, register_script_tool
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import ApprovalAnswer, Kernel, ScriptedApprover

ESCAPE = "call_tool.__globals__['os'].mkdir(MARKER)"
SINGLEDISPATCH = f"""
import functools
@functools.singledispatch
def g(x):
    return 0
def f(x: "{ESCAPE}"):
    return 1
g.register(f)
"""
SINGLEDISPATCH_VIA_VARIABLE = f"""
import functools
A = "{ESCAPE}"
@functools.singledispatch
def g(x):
    return 0
def f(x: A):
    return 1
g.register(f)
"""
SINGLEDISPATCHMETHOD = f"""
import functools
class C:
    @functools.singledispatchmethod
    def m(self, x):
        return 0
    def n(self, x: "{ESCAPE}"):
        return 1
    m.register(n)
"""
NOT_AVAILABLE = "is not available in a script"
RESERVED = "cannot be changed in a script"

# name: (source, error type, fragment of the error message)
ESCAPES: dict[str, tuple[str, str, str]] = {
    # string annotations evaluated as plain Python by typing.get_type_hints
    "singledispatch.register": (SINGLEDISPATCH, "AttributeError", NOT_AVAILABLE),
    "singledispatch, annotation from a variable": (
        SINGLEDISPATCH_VIA_VARIABLE,
        "AttributeError",
        "evaluates string annotations",
    ),
    "singledispatchmethod.register": (SINGLEDISPATCHMETHOD, "AttributeError", NOT_AVAILABLE),
    "from functools import singledispatch": (
        "from functools import singledispatch",
        "ImportError",
        "functools.singledispatch is not available in a script",
    ),
    "from __future__ import annotations": (
        "from __future__ import annotations\nimport functools",
        "compile_error",
        "from __future__ imports are not available",
    ),
    # format strings that walk attributes
    'str.format "{0.__globals__}"': (
        'print("{0.__globals__[os]}".format(call_tool))',
        "NotImplementedError",
        "not safe",
    ),
    "str.format unbound": (
        'print(str.format("{0.__globals__[os]}", call_tool))',
        "NotImplementedError",
        "not safe",
    ),
    "str.format_map": (
        'print("{f.__globals__[os]}".format_map({"f": call_tool}))',
        "NotImplementedError",
        "not safe",
    ),
    "str subclass format": (
        'class S(str):\n    pass\nprint(S("{0.__globals__[os]}").format(call_tool))',
        "NotImplementedError",
        "not safe",
    ),
    "collections.UserString.format": (
        'import collections\nprint(collections.UserString("{0.__globals__[os]}").format(call_tool))',
        "AttributeError",
        "UserString is not available in a script",
    ),
    "collections.UserString.format_map": (
        "import collections\n"
        'print(collections.UserString("{f.__globals__[os]}").format_map({"f": call_tool}))',
        "AttributeError",
        "UserString is not available in a script",
    ),
    "string.Formatter": (
        'import string\nprint(string.Formatter().format("{0.__globals__[os]}", call_tool))',
        "AttributeError",
        "string.Formatter is not available in a script",
    ),
    "f-string walk": ('print(f"{call_tool.__globals__}")', "compile_error", "__globals__"),
    # attribute names resolved without the guard
    "operator.attrgetter": (
        'import operator\nprint(operator.attrgetter("__globals__")(call_tool))',
        "ImportError",
        "'operator' is not allowed",
    ),
    "getattr builtin": (
        'print(getattr(call_tool, "__globals__"))',
        "AttributeError",
        "__globals__",
    ),
    "functools.partial(getattr)": (
        'import functools\nprint(functools.partial(getattr, call_tool, "__globals__")())',
        "AttributeError",
        "__globals__",
    ),
    "json object_pairs_hook": (
        "import json\n"
        "print(json.loads('{\"__globals__\": 1}', object_pairs_hook=lambda p: getattr(call_tool, p[0][0])))",
        "AttributeError",
        "__globals__",
    ),
    "generator frame": (
        'def g():\n    yield 1\nprint(getattr(getattr(g(), "gi_frame"), "f_globals"))',
        "AttributeError",
        "gi_frame",
    ),
    "traceback frame": (
        'try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print(getattr(e, "__traceback__"))',
        "AttributeError",
        "__traceback__",
    ),
    "namedtuple field as code": (
        f'import collections\ncollections.namedtuple("T", ["a=({ESCAPE})"])',
        "ValueError",
        "valid identifiers",
    ),
    # writes the guard must refuse
    "setattr dunder on a script class": (
        'class C:\n    pass\nsetattr(C, "__str__", lambda self: "pwned")\nprint(str(C()))',
        "AttributeError",
        RESERVED,
    ),
    "setattr __class__": (
        'class C:\n    pass\nclass D:\n    pass\nc = C()\nsetattr(c, "__class__", D)\nprint("pwned")',
        "AttributeError",
        RESERVED,
    ),
    "setattr with a lying str subclass": (
        "class S(str):\n    def startswith(self, p):\n        return False\n"
        'class C:\n    pass\nsetattr(C, S("__str__"), lambda self: "pwned")\nprint(str(C()))',
        "TypeError",
        "must be a str",
    ),
    "setattr _guarded_writes": (
        'class C:\n    pass\nsetattr(C, "_guarded_writes", 0)\nprint("pwned")',
        "AttributeError",
        RESERVED,
    ),
    "delattr dunder": (
        'class C:\n    def __init__(self):\n        pass\ndelattr(C, "__init__")\nprint("pwned")',
        "AttributeError",
        RESERVED,
    ),
    "class decorator setting a dunder": (
        'def deco(cls):\n    setattr(cls, "__repr__", lambda self: "pwned")\n    return cls\n'
        "@deco\nclass C:\n    pass\nprint(repr(C()))",
        "AttributeError",
        RESERVED,
    ),
    "total_ordering on a library class": (
        "import functools, json\nfunctools.total_ordering(json.JSONEncoder)\nprint('pwned')",
        "TypeError",
        "a class defined in the script",
    ),
    "setattr on a library class": (
        'import json\nsetattr(json.JSONEncoder, "default", print)\nprint("pwned")',
        "TypeError",
        "attribute-less object",
    ),
    "module attribute write": (
        "import json\njson.loads = print\nprint('pwned')",
        "TypeError",
        "attribute-less",
    ),
    "mutate a module's set": (
        'import hashlib\nhashlib.algorithms_available.add("pwned")\nprint("pwned")',
        "AttributeError",
        "add",
    ),
    "time.clock_settime": (
        "import time\ntime.clock_settime(0, 0.0)",
        "AttributeError",
        "has no attribute 'clock_settime' available to scripts",
    ),
    # type() with a dunder namespace, and the other ways to a class with chosen dunders
    "type() with dunder dict": (
        'X = type("X", (), {"__str__": lambda self: "pwned"})\nprint(str(X()))',
        "NameError",
        "type",
    ),
    "metaclass keyword": (
        "class M:\n    pass\nclass X(metaclass=M):\n    pass",
        "compile_error",
        "metaclass",
    ),
    "dunder in a class body": (
        'class X:\n    __str__ = lambda self: "pwned"\nprint(str(X()))',
        "compile_error",
        "__str__",
    ),
    # evaluation entry points
    "exec": ("exec('import os')", "compile_error", "Exec calls are not allowed"),
    "eval": ("eval('1')", "compile_error", "Eval calls are not allowed"),
    "compile": ("compile('1', 'x', 'eval')", "NameError", "compile"),
    "__import__": ("__import__('os')", "compile_error", "__import__"),
    "import os": ("import os\nos.mkdir(MARKER)", "ImportError", "'os' is not allowed"),
    "vars": ("print(vars(call_tool))", "NameError", "vars"),
    # the code-mode objects: tools (a namespace), a typed tool, parallel, a pending call
    "getattr on tools": ('print(getattr(tools, "_entries"))', "AttributeError", "_entries"),
    "tools.__class__": ("print(tools.__class__)", "compile_error", "__class__"),
    'str.format "{0.__class__}" on tools': (
        'print("{0.__init__.__globals__}".format(tools))',
        "NotImplementedError",
        "not safe",
    ),
    "vars(tools)": ("print(vars(tools))", "NameError", "vars"),
    "getattr on parallel": (
        'print(getattr(parallel, "__globals__"))',
        "AttributeError",
        "__globals__",
    ),
    "a pending call's insides": (
        'parallel(print(getattr(call_tool("x"), "_arguments")) for i in [1])',
        "AttributeError",
        "_arguments",
    ),
    "replace a tool in the namespace": (
        'setattr(tools, "read_file", print)\nprint("pwned")',
        "TypeError",
        "attribute-less",
    ),
    "assign into the namespace": (
        "tools.read_file = print\nprint('pwned')",
        "TypeError",
        "attribute-less",
    ),
    # a compile error Python raises after parsing (it ended the runner before)
    "return outside a function": ("return 1", "compile_error", "'return' outside function"),
}

LEAKS = ("<module", "pwned", "__builtins__")


@pytest.mark.parametrize("name", list(ESCAPES))
async def test_language_escapes_are_refused_without_the_os_sandbox(name: str, tmp_path) -> None:
    source, error, fragment = ESCAPES[name]
    marker = tmp_path / "escaped"
    async with Kernel() as kernel:
        result = await run(kernel, f"MARKER = {str(marker)!r}\n{source}", sandbox="none")
    assert result.sandbox["level"] == "none"  # only the language layer stood in the way
    if error == "compile_error":
        assert result.status == "compile_error", result
        assert any(fragment in e for e in result.error["errors"]), result.error
    else:
        assert result.status == "error", result
        assert result.error["type"] == error, result.error
        assert fragment in result.error["message"], result.error
    assert not marker.exists()
    assert not any(leak in result.output for leak in LEAKS), result.output


async def test_a_refused_write_changes_nothing_and_the_script_goes_on() -> None:
    script = """
class C:
    def __init__(self):
        self.n = 1
before = repr(C())[:20]
refused = []
for name in ["__str__", "__repr__", "__class__", "__init__", "_guarded_writes"]:
    try:
        setattr(C, name, lambda self: "pwned")
    except AttributeError:
        refused.append(name)
try:
    delattr(C, "__init__")
except AttributeError:
    refused.append("del __init__")
c = C()
c.m = 2
setattr(c, "k", 3)
result = [refused, repr(c)[:20] == before, str(c) == repr(c), c.n, c.m, c.k]
"""
    async with Kernel() as kernel:
        result = await run(kernel, script, sandbox="none")
    assert result.status == "ok", result.error
    assert result.result == [
        ["__str__", "__repr__", "__class__", "__init__", "_guarded_writes", "del __init__"],
        True,
        True,
        1,
        2,
        3,
    ]


async def test_what_stays_available_still_works() -> None:
    """The allowlist keeps the useful parts of the modules it narrows."""
    script = """
import collections, functools, re, string
@functools.total_ordering
class V:
    def __init__(self, v):
        self.v = v
    def __eq__(self, o):
        return self.v == o.v
    def __lt__(self, o):
        return self.v < o.v
@functools.lru_cache(maxsize=None)
def sq(n):
    return n * n
def f(x: int) -> int:
    return x + 1
Point = collections.namedtuple("Point", "x y")
result = [
    V(2) >= V(1), sq(4), f(1), Point(1, 2).y,
    string.Template("$a-$b").substitute(a=1, b="x"),
    re.sub("(?P<d>[0-9])", "<\\\\g<d>>", "a1"),
    "%(k)s" % {"k": "v"}, f"{sq(3):>3}",
]
"""
    async with Kernel() as kernel:
        result = await run(kernel, script)
    assert result.status == "ok", result.error
    assert result.result == [True, 16, 2, 2, "1-x", "a<1>", "v", "  9"]


# Python functions a script can reach that mention one of these names were reviewed
# and found to pass it nothing the script chose (see ALLOWED_NAMES in _allowlist).
EVALUATING = {
    "eval", "exec", "compile", "get_type_hints", "_getframe", "__import__", "import_module",
    "vformat", "format_map", "attrgetter", "methodcaller", "setattr", "delattr",
}  # fmt: skip
REVIEWED = {
    "collections.namedtuple": {"eval", "_getframe"},  # identifiers it checked; reads __name__
    "functools.total_ordering": {"setattr"},  # our wrapper's callee: the script's own class
    "string.Template.__init_subclass__": {"compile"},  # re.compile of the class's pattern
    "csv.Sniffer._guess_quote_and_delimiter": {"compile"},  # re.compile of escaped text
}


def _reachable_functions() -> dict[str, set[str]]:
    """Python functions reachable from the module copies (names, class members), and
    the EVALUATING names their code mentions."""
    import importlib
    import inspect
    import types

    from ringfence.bridge import _allowlist

    def names(code: types.CodeType) -> set[str]:
        found = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found |= names(const)
        return found

    found: dict[str, set[str]] = {}
    seen: set[int] = set()

    def visit(obj: object, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            hits = names(obj.__code__) & EVALUATING
            if hits:
                found[path] = hits
            for inner in ("__wrapped__",):
                if hasattr(obj, inner):
                    visit(getattr(obj, inner), path, depth + 1)
            return
        if isinstance(obj, (type, types.ModuleType)):
            for key in dir(obj):
                try:
                    member = inspect.getattr_static(obj, key)
                except AttributeError:
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if isinstance(member, property):
                    member = member.fget
                visit(member, f"{path}.{key}", depth + 1)

    for module_name in _allowlist.ALLOWED_MODULES:
        importlib.import_module(module_name)  # the runner imports them before the sandbox
    for module_name, module in _allowlist.module_copies().items():
        visit(module, module_name, 0)
    return found


def test_no_reachable_library_function_evaluates_what_a_script_chose() -> None:
    """A guard for the allowlist: a new name that evaluates code or resolves
    names must be reviewed (and added to REVIEWED) or left out."""
    found = _reachable_functions()
    unreviewed = {
        path: hits - REVIEWED.get(path, set())
        for path, hits in found.items()
        if hits - REVIEWED.get(path, set())
    }
    assert unreviewed == {}


def test_the_class_factory_refuses_dunders_the_compiler_would_have_refused() -> None:
    """Defence in depth: no script source reaches it with such a namespace today."""
    from ringfence.bridge._restricted import restricted_globals

    factory = restricted_globals(call_tool=None, modules={})["__metaclass__"]
    for name in ("__str__", "__getattr__", "__init_subclass__", "__class_getitem__", "_x"):
        with pytest.raises(TypeError, match="cannot be set in a script"):
            factory("X", (), {name: len, "__module__": "__script__"})
    made = factory("X", (), {"__init__": lambda self: None, "__module__": "__script__"})
    assert made._guarded_writes is True


async def test_the_singledispatch_escape_through_run_tool_script(tmp_path) -> None:
    """The reported attack, through the Kernel's run_tool_script at sandbox level none."""
    marker = tmp_path / "escaped"
    approver = ScriptedApprover(lambda r: ApprovalAnswer.once())
    async with Kernel(approver=approver) as kernel:
        register_script_tool(kernel, config=ScriptConfig(sandbox="none"))
        outcome = await kernel.invoke(
            SCRIPT_TOOL, {"script": f"MARKER = {str(marker)!r}\n{SINGLEDISPATCH}"}
        )
    assert outcome.error is not None and outcome.error.code == "tool_error"
    assert "functools.singledispatch is not available in a script" in outcome.error.message
    assert not marker.exists()


# -- the OS layers, attacked by code that escaped the language layer ----------------------

LIBC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
"""
AT_FDCWD = "ctypes.c_int(-100)"
# name: plain Python run under the strict sandbox; D is a directory outside any
# workspace, F a file in it owned by the script's uid (65534), L a symlink.
OS_ESCAPES: dict[str, str] = {
    "chmod": "os.chmod(F, 0o777)",
    "fchmodat (dir_fd)": 'os.chmod("f", 0o777, dir_fd=os.open(D, os.O_PATH))',
    "fchmodat2 (raw)": f"check(libc.syscall(452, {AT_FDCWD}, F.encode(), 0o777, 0))",
    "chown": "os.chown(F, 65534, 65534)",
    "lchown": "os.lchown(F, 65534, 65534)",
    "fchownat on an O_PATH descriptor": (
        "check(libc.fchownat(os.open(F, os.O_PATH), b'', 65534, 65534, 0x1000))"
    ),
    "utimensat": "os.utime(F, (0, 0))",
    "utime (raw)": "check(libc.syscall(132, F.encode(), None))",
    "truncate": "os.truncate(F, 0)",
    "setxattr": 'os.setxattr(F, "user.pwned", b"1")',
    "removexattr": 'os.removexattr(F, "user.keep")',
    "getxattr": 'os.getxattr(F, "user.keep")',
    "listxattr": "os.listxattr(F)",
    "setxattrat (raw)": (
        "v = ctypes.create_string_buffer(b'1')\n"
        "args = (ctypes.c_uint64 * 2)(ctypes.cast(v, ctypes.c_void_p).value, 1)\n"
        f"check(libc.syscall(463, {AT_FDCWD}, F.encode(), 0, b'user.pwned', args, 16))"
    ),
    "readlink": "print(os.readlink(L))",
    "inotify_init1": "check(libc.inotify_init1(0))",
    "inotify_add_watch": "check(libc.inotify_add_watch(-1, D.encode(), 0xFFF))",
    "shmget": "check(libc.shmget(0, 64 << 20, 0o1600))",
    "msgget": "check(libc.msgget(0, 0o1600))",
    "semget": "check(libc.semget(0, 1, 0o1600))",
    "mq_open": "check(libc.mq_open(b'/ringfence-escape', os.O_CREAT | os.O_RDWR, 0o600, None))",
    "renice every process of the uid": "os.setpriority(os.PRIO_USER, 0, 19)",
    "sched_setaffinity": "os.sched_setaffinity(0, {0})",
}


def _sysv_ids() -> dict[str, set[int]]:
    ids = {}
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        ids[kind] = {int(line.split()[1]) for line in lines}
    return ids


def _remove_new_ipc(before: dict[str, set[int]]) -> tuple[bool, bool]:
    """Remove what a run left behind (so a failing run does not leak); report what there was."""
    libc = ctypes.CDLL(None, use_errno=True)
    after = _sysv_ids()
    for kind, remove in (
        ("shm", lambda i: libc.shmctl(i, 0, None)),  # IPC_RMID
        ("msg", lambda i: libc.msgctl(i, 0, None)),
        ("sem", lambda i: libc.semctl(i, 0, 0)),
    ):
        for ipc_id in after[kind] - before[kind]:
            remove(ipc_id)
    queue = libc.mq_unlink(b"/ringfence-escape") == 0
    return after != before, queue


@pytest.fixture
def outside():
    """A directory outside any workspace, reachable by uid 65534, holding its own file."""
    import tempfile

    root = tempfile.mkdtemp(prefix="ringfence-outside-", dir="/tmp")
    os.chmod(root, 0o755)
    target = os.path.join(root, "f")
    with open(target, "w") as f:
        f.write("keep")
    os.chmod(target, 0o644)
    os.setxattr(target, "user.keep", b"1")
    os.chown(target, 65534, 65534)
    os.symlink("/secret/target", os.path.join(root, "l"))
    try:
        yield root
    finally:
        shutil.rmtree(root)


def _snapshot(root: str) -> tuple:
    st = os.stat(os.path.join(root, "f"))
    xattrs = sorted(os.listxattr(os.path.join(root, "f")))
    return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns, xattrs)


@pytest.mark.parametrize("name", list(OS_ESCAPES))
async def test_escaped_code_cannot_change_metadata_probe_or_leave_ipc(name: str, outside) -> None:
    paths = f"D = {outside!r}\nF = D + '/f'\nL = D + '/l'\n"
    before, ipc_before = _snapshot(outside), _sysv_ids()
    try:
        async with Kernel() as kernel:
            result = await run(kernel, LIBC + paths + OS_ESCAPES[name], mode="plain")
    finally:
        left_sysv, left_queue = _remove_new_ipc(ipc_before)
    assert result.status == "error", (name, result)
    assert result.sandbox["missing"] == {}
    assert result.error["type"] == "PermissionError", result.error["traceback"]
    assert result.error["message"].startswith("[Errno 1] "), result.error  # seccomp's EPERM
    assert _snapshot(outside) == before
    assert not left_sysv and not left_queue
    assert "/secret" not in result.output


async def test_what_escaped_code_still_sees_of_host_files(outside) -> None:
    """The documented limit: stat of a host path answers; content and listings do not."""
    source = (
        f"import os\nD = {outside!r}\nst = os.stat(D + '/f')\nprint(st.st_uid, st.st_size)\n"
        "try:\n    os.listdir(D)\nexcept PermissionError:\n    print('no listing')\n"
        "try:\n    open(D + '/f').read()\nexcept PermissionError:\n    print('no content')\n"
    )
    async with Kernel() as kernel:
        result = await run(kernel, source, mode="plain")
    assert result.status == "ok", result.error
    assert result.output == "65534 4\nno listing\nno content\n"
