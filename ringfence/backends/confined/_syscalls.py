"""The system calls the confined backend's supervisor makes on itself and its commands.

Landlock rulesets, seccomp filters, capabilities, credentials and rlimits,
through ``ctypes`` (the same structures as the script runner's
``bridge/_sandbox``). Imported by :mod:`._supervisor` as a
top-level module (it runs as a file under ``python -I -S``): standard
library only, few imports.
"""

from __future__ import annotations

import ctypes
import os
import resource

__all__ = [
    "LayerUnavailable",
    "apply_landlock",
    "apply_rlimits",
    "apply_seccomp",
    "check_landlock",
    "descendants",
    "describe_landlock",
    "drop_capabilities",
    "drop_privileges",
    "fail",
    "find_program",
    "install_filter",
    "install_seccomp",
    "landlock_execute_ruleset",
    "landlock_ruleset",
    "libc",
    "prctl",
    "read_all",
    "reap_all",
    "restrict_self",
    "seccomp_fprog",
]

_SIGKILL = 9
_PR_SET_PDEATHSIG = 1
_SYS_SECCOMP = 317
_SECCOMP_SET_MODE_FILTER = 1
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_CAPBSET_DROP = 24
_SYS_CAPSET = 126
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAP_LAST = 63  # PR_CAPBSET_DROP answers EINVAL past the kernel's last capability

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
libc = _libc


class LayerUnavailable(Exception):
    def __init__(self, layer: str, message: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.message = message


# The kernel's structures (the same layout as the script runner's ``_sandbox``).
class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _fail(layer: str, what: str) -> LayerUnavailable:
    return LayerUnavailable(layer, f"{what}: {os.strerror(ctypes.get_errno())}")


def apply_landlock(plan: str, writable: list[str]) -> str:
    """``plan`` is ``abi,fs,net,scoped,size,file_rights`` (see ``_layers``)."""
    ruleset = landlock_ruleset(plan, writable)
    try:
        restrict_self(ruleset)
    finally:
        os.close(ruleset)
    return describe_landlock(plan, writable)


def describe_landlock(plan: str, writable: list[str]) -> str:
    abi, _, net, scoped, _, _ = (int(x) for x in plan.split(","))
    covers = [f"ABI {abi}: writes only beneath {', '.join(writable)}"]
    if net:
        covers.append("no TCP bind/connect")
    if scoped:
        covers.append("signals and abstract sockets scoped")
    return "; ".join(covers)


def restrict_self(ruleset: int) -> None:
    if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
        raise _fail("landlock", "landlock_restrict_self")


def landlock_ruleset(plan: str, writable: list[str]) -> int:
    """The ruleset (a descriptor) granting ``plan``'s write rights beneath ``writable``."""
    _, fs, net, scoped, size, file_rights = (int(x) for x in plan.split(","))
    attr = _RulesetAttr(fs, net, scoped)
    ruleset = _libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _fail("landlock", "landlock_create_ruleset")
    try:
        for path in writable:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = _PathBeneathAttr(fs if is_dir else fs & file_rights, fd)
                if _libc.syscall(
                    _SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    raise _fail("landlock", f"landlock_add_rule({path})")
            finally:
                os.close(fd)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


_FS_EXECUTE = 1 << 0


def landlock_execute_ruleset(grants: list[str]) -> int:
    """A ruleset that handles only ``EXECUTE`` and grants it beneath each of ``grants`` (a
    descriptor; each path opened without following a last symbolic link). Raises OSError
    or LayerUnavailable."""
    attr = _RulesetAttr(_FS_EXECUTE, 0, 0)
    ruleset = _libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _fail("landlock", "landlock_create_ruleset(execute)")
    try:
        for path in grants:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(_FS_EXECUTE, fd)
                if _libc.syscall(
                    _SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    raise _fail("landlock", f"landlock_add_rule({path})")
            finally:
                os.close(fd)
    except BaseException:
        os.close(ruleset)
        raise
    return int(ruleset)


def drop_privileges(uid: int, gid: int) -> str:
    """As the namespace's root, become ``uid``/``gid`` for good (every capability goes)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # A change of credentials clears the parent-death signal bubblewrap armed: arm it again.
    _prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid/gid {uid}/{gid}, no capabilities"
    raise LayerUnavailable("uid", "setuid(0) still succeeds after dropping root")


def apply_rlimits(conf: dict[str, str]) -> str:
    cpu = int(conf["cpu_seconds"])
    limits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, int(conf["address_space"]), int(conf["address_space"])),
        (resource.RLIMIT_NOFILE, int(conf["open_files"]), int(conf["open_files"])),
        (resource.RLIMIT_FSIZE, int(conf["file_size"]), int(conf["file_size"])),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, int(conf["nproc"]), int(conf["nproc"])),
    ]
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as exc:
            raise LayerUnavailable("rlimits", f"setrlimit({which}) failed: {exc}") from None
    return (
        f"address space {int(conf['address_space']) >> 20} MiB, {conf['nproc']} processes, "
        f"{conf['open_files']} files, cpu {cpu} s, no core files"
    )


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise _fail("no_new_privs", f"prctl({option})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


def apply_seccomp(fd: int) -> str:
    """Install the kernel-built filter read from ``fd`` (best-effort mode, without bwrap)."""
    return install_seccomp(read_all(fd))


def _install_filter(fprog: ctypes.Structure) -> None:
    if _libc.syscall(
        _SYS_SECCOMP, ctypes.c_uint(_SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0), ctypes.byref(fprog)
    ):
        raise _fail("seccomp", "seccomp(SECCOMP_SET_MODE_FILTER)")


def install_seccomp(program: bytes) -> str:
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.syscall(
        _SYS_SECCOMP, ctypes.c_uint(_SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0), ctypes.byref(fprog)
    ):
        raise _fail("seccomp", "seccomp(SECCOMP_SET_MODE_FILTER)")
    return f"{len(program) // 8} instructions"


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_capabilities(switch: tuple[int, int] | None) -> None:
    """Every capability gone: the bounding set emptied, then the process's own sets.

    As a root kernel's sandbox, become the workspace owner on the way (which
    clears the process's sets by itself). Raises LayerUnavailable.
    """
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the kernel's last capability
                break
            raise _fail("capabilities", f"PR_CAPBSET_DROP({cap})")
    if switch is not None:
        uid, gid = switch
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.syscall(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)):
        raise _fail("capabilities", "capset")


def check_landlock(plan: str, writable: list[str]) -> str:
    """That this kernel takes the ruleset (applied per command in layered mode)."""
    abi, fs, net, scoped, size, _ = (int(x) for x in plan.split(","))
    attr = _RulesetAttr(fs, net, scoped)
    ruleset = _libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _fail("landlock", "landlock_create_ruleset")
    os.close(ruleset)
    return (
        f"ABI {abi}: applied to each command, after its overlays are mounted; writes only "
        f"beneath {', '.join(writable)}"
    )


def seccomp_fprog(program: bytes) -> tuple[ctypes.Structure, object]:
    """A filter ready to install (and the buffer that must outlive it)."""
    buf = ctypes.create_string_buffer(program, len(program))
    return _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf


fail = _fail
prctl = _prctl
install_filter = _install_filter


# -- processes ------------------------------------------------------------------------------


def descendants() -> list[int]:
    """Live (not zombie) descendants of this process, from ``/proc/*/stat``."""
    me = os.getpid()
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        state, ppid = data[data.rindex(b")") + 2 :].split()[:2]
        if state != b"Z":
            parent[int(name)] = int(ppid)
    out = []
    for pid in parent:
        up, hops = parent[pid], 0
        while up not in (me, 0, 1) and up in parent and hops < 4096:
            up, hops = parent[up], hops + 1
        if up == me and pid != me:
            out.append(pid)
    return out


def reap_all() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def find_program(name: str, env: dict[str, str]) -> tuple[str | None, int]:
    """What a shell would execute for ``name``: (path, 0), or (None, 127 not found / 126)."""
    if "/" in name:
        candidates = [name]
    else:
        candidates = [os.path.join(d or ".", name) for d in env.get("PATH", os.defpath).split(":")]
    code = 127
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_mode & 0o170000) == 0o100000 and os.access(path, os.X_OK):
            return path, 0
        code = 126
    return None, code
