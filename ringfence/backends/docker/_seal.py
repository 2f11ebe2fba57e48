"""The docker backend's per-command seccomp filter: a tiny static program that installs it and execs.

Under change sets the container's own profile (:mod:`._seccomp`) must let the
supervisor's wrapper make a user and mount namespace and mount overlays. The
*command* must not: before it starts, its process installs a second, stacked
filter (seccomp filters only add up; none can be removed) and only then execs
``/bin/sh``, which becomes the command. That filter is the confined local
backend's command filter (:func:`ringfence.backends.confined._layers.seccomp_program`,
the non-layered one): no ``mount``/``umount2``/``unshare``/``setns``, no ``clone``
with a namespace flag (new user namespaces included), ``clone3`` ENOSYS, no
ptrace, keyctl, bpf, io_uring, no setuid/setgid bit set, foreign-ABI calls kill.

The images have no interpreter that can call ``seccomp(2)`` (busybox has none),
so the installer is a 300-byte static x86-64 ELF built here, byte by byte: its
machine code is listed below with its assembly, the filter and a message are
appended. The container's main process (root in the container, no capabilities)
writes it from base64 into a root-owned ``exec`` tmpfs (:data:`SEAL_DIR`) and makes
it read-only; the container user can run it and cannot change it.

What it does (``seal /bin/sh -c SCRIPT …``): ``prctl(PR_SET_NO_NEW_PRIVS)``,
``seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)``, ``execve(argv[1], argv+1, envp)``;
any failure writes :data:`SEAL_FAILED` to stderr and exits 125: the command never
runs without its filter. Only x86-64 (the filter's own architecture check kills
anything else); on another host :func:`seal_program` raises Unavailable.

Beside it, :func:`mount_program` (``/.rf-bin/mount``, ~120 bytes, listed the same
way): one ``mount(2)`` from its arguments, for the overlay wrapper's two mounts a
command; util-linux's dynamic ``mount(8)`` cost ~3.5 ms more a command on the debian
image here. It adds nothing the wrapper could not do (it runs as the wrapper, in its
namespaces); the command's own filter forbids ``mount`` whatever program asks.
:func:`enter_program` (``/.rf-bin/enter``) does one command's whole start for a
supervisor that holds the user namespace (issue 34): its mount namespace, overlays,
hiding tmpfs and working directory, then what ``userns U`` and the seal do, in one
process image with no shell and no other exec in between (:data:`ENTER_PATH`); it was
assembled with GNU ``as`` and the bytes and assembly listed are ``objdump``'s.
"""

from __future__ import annotations

import base64
import functools
import struct

from ...runtime._errors import Unavailable

__all__ = [
    "ENTER_FAILED",
    "ENTER_PATH",
    "EXEC_FAILED",
    "MOUNT_FAILED",
    "MOUNT_PATH",
    "SEAL_DIR",
    "SEAL_FAILED",
    "SEAL_PATH",
    "USERNS_PATH",
    "enter_program",
    "install_script",
    "mount_program",
    "seal_program",
    "userns_program",
]

SEAL_DIR = "/.rf-bin"
SEAL_PATH = f"{SEAL_DIR}/seal"
SEAL_FAILED = "ringfence: the command's seccomp filter could not be installed; it did not run"
# The overlay wrapper's mount(2), without a dynamic mount(8) per call (~1.7 ms each on the
# debian image here, util-linux's libraries loaded twice a command): ``mount SOURCE TARGET
# FSTYPE DATA [ro]``; a fifth argument adds MS_RDONLY. Exits 0, or 1 with MOUNT_FAILED.
MOUNT_PATH = f"{SEAL_DIR}/mount"
MOUNT_FAILED = "ringfence: mount(2) failed"
# The wrapper's namespaces without util-linux (setsid(1), unshare(1): dynamic, ~2.5 ms an
# exec each on the debian image) and without a second process writing the nested map:
# ``userns S|H|U UID_MAP_LINE GID_MAP_LINE PROGRAM ARGS…``: with ``S`` setsid() and new user
# and mount namespaces, with ``H`` the same without setsid() (the supervisor, a session
# leader already, holding them: ._shell.Supervisor.hold), with ``U`` a new user namespace; then its own one-line maps
# (``setgroups`` denied first) while it still has the namespace's capabilities, then
# execve. Any failure: USERNS_FAILED on stderr, exit 125, PROGRAM never runs.
USERNS_PATH = f"{SEAL_DIR}/userns"
# Begins with _shell.OVERLAY_FAILED's text: the session reports it as the overlay's failure.
USERNS_FAILED = (
    "ringfence: the change-set overlay could not be set up: a user namespace could not be "
    "entered; the command did not run"
)

# One command's whole start, from a supervisor that already holds the user namespace (issue
# 34: no wrapper shell, no mount(8), one exec before the command's own): ``enter CWD HIDDEN N
# (TARGET OPTIONS DIRTY MARK) N times, UID_MAP_LINE GID_MAP_LINE PROGRAM ARGV0 ARGS…`` (N one digit):
# unlink(DIRTY) and rmdir(MARK) for each root (the last command's volatile overlay's mark in
# its work directory, which the next mount refuses; results ignored: a mark left makes the
# mount fail), setsid(), a new mount namespace (copied from the supervisor's, so every mount
# below is gone with the command), an overlay on each TARGET with its OPTIONS, an empty
# read-only tmpfs on HIDDEN, chdir(CWD); then, as ``userns U`` and the seal did, a nested user
# namespace with its one-line maps (``setgroups`` denied first), no_new_privs, the command's
# seccomp filter, and execve(PROGRAM, [ARGV0, ARGS…]): its uid is not 0 there, so the exec
# drops every capability of that namespace. A failure before the exec: ENTER_FAILED,
# USERNS_FAILED or SEAL_FAILED on stderr and exit 125 (PROGRAM never runs); the exec's own:
# EXEC_FAILED, exit 127 (ENOENT) or 126.
ENTER_PATH = f"{SEAL_DIR}/enter"
# Begins with _shell.OVERLAY_FAILED's text: the session reports it as the overlay's failure.
ENTER_FAILED = (
    "ringfence: the change-set overlay could not be set up: a mount namespace, an overlay, "
    "the hiding tmpfs or the working directory failed"
)
EXEC_FAILED = (
    "ringfence: the command could not be executed (execve failed: not found, not executable "
    "or not a program); it did not run"
)

_BASE = 0x400000
_EHDR, _PHDR = 64, 56
# (bytes, assembly); {fprog} and {message} are the absolute addresses patched in below.
_CODE: tuple[tuple[str, str], ...] = (
    ("bf 26 00 00 00", "mov edi, 38            ; PR_SET_NO_NEW_PRIVS"),
    ("be 01 00 00 00", "mov esi, 1"),
    ("31 d2", "xor edx, edx"),
    ("45 31 d2", "xor r10d, r10d"),
    ("45 31 c0", "xor r8d, r8d"),
    ("b8 9d 00 00 00", "mov eax, 157           ; prctl"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax, eax"),
    ("75 36", "jnz fail"),
    ("bf 01 00 00 00", "mov edi, 1             ; SECCOMP_SET_MODE_FILTER"),
    ("31 f6", "xor esi, esi           ; no flags (one thread)"),
    ("48 ba {fprog}", "movabs rdx, fprog"),
    ("b8 3d 01 00 00", "mov eax, 317           ; seccomp"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax, eax"),
    ("75 1a", "jnz fail"),
    ("48 8b 7c 24 10", "mov rdi, [rsp+16]      ; argv[1]"),
    ("48 8d 74 24 10", "lea rsi, [rsp+16]      ; &argv[1]"),
    ("48 8b 04 24", "mov rax, [rsp]         ; argc"),
    ("48 8d 54 c4 10", "lea rdx, [rsp+rax*8+16] ; envp"),
    ("b8 3b 00 00 00", "mov eax, 59            ; execve"),
    ("0f 05", "syscall"),
    ("bf 02 00 00 00", "fail: mov edi, 2       ; stderr"),
    ("48 be {message}", "movabs rsi, message"),
    ("ba {length}", "mov edx, len(message)"),
    ("b8 01 00 00 00", "mov eax, 1             ; write"),
    ("0f 05", "syscall"),
    ("bf 7d 00 00 00", "mov edi, 125"),
    ("b8 e7 00 00 00", "mov eax, 231          ; exit_group"),
    ("0f 05", "syscall"),
)


_MOUNT_CODE: tuple[tuple[str, str], ...] = (
    ("48 8b 7c 24 10", "mov rdi, [rsp+16]      ; argv[1]: source"),
    ("48 8b 74 24 18", "mov rsi, [rsp+24]      ; argv[2]: target"),
    ("48 8b 54 24 20", "mov rdx, [rsp+32]      ; argv[3]: file system type"),
    ("4c 8b 44 24 28", "mov r8, [rsp+40]       ; argv[4]: data (options)"),
    ("45 31 d2", "xor r10d, r10d         ; flags 0"),
    ("48 83 3c 24 06", "cmp qword [rsp], 6     ; argc 6: a fifth argument"),
    ("75 06", "jne 1f"),
    ("41 ba 01 00 00 00", "mov r10d, 1            ; MS_RDONLY"),
    ("b8 a5 00 00 00", "1: mov eax, 165        ; mount"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax, eax"),
    ("75 09", "jnz fail"),
    ("31 ff", "xor edi, edi"),
    ("b8 e7 00 00 00", "mov eax, 231           ; exit_group(0)"),
    ("0f 05", "syscall"),
    ("bf 02 00 00 00", "fail: mov edi, 2       ; stderr"),
    ("48 be {message}", "movabs rsi, message"),
    ("ba {length}", "mov edx, len(message)"),
    ("b8 01 00 00 00", "mov eax, 1             ; write"),
    ("0f 05", "syscall"),
    ("bf 01 00 00 00", "mov edi, 1"),
    ("b8 e7 00 00 00", "mov eax, 231           ; exit_group(1)"),
    ("0f 05", "syscall"),
)


_USERNS_CODE: tuple[tuple[str, str], ...] = (
    ("48 89 e3", "mov rbx,rsp"),
    ("48 8b 43 10", "mov rax,[rbx+0x10]"),
    ("bf 00 00 02 10", "mov edi,0x10020000  ; CLONE_NEWUSER | CLONE_NEWNS"),
    ("80 38 48", "cmp byte [rax],0x48  ; argv[1] starts with H: user and mount namespaces"),
    ("74 18", "je 2"),
    ("80 38 53", "cmp byte [rax],0x53  ; S: setsid, user and mount namespaces"),
    ("75 0e", "jne 1"),
    ("b8 70 00 00 00", "mov eax,0x70  ; setsid"),
    ("0f 05", "syscall"),
    ("48 85 c0", "test rax,rax"),
    ("78 5c", "js fail"),
    ("eb 05", "jmp 2"),
    ("bf 00 00 00 10", "1: mov edi,0x10000000  ; CLONE_NEWUSER"),
    ("b8 10 01 00 00", "2: mov eax,0x110  ; unshare"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("75 4a", "jne fail"),
    ("48 8d 3d a9 00 00 00", "lea rdi,[rip+0xa9]"),
    ("48 8b 73 18", "mov rsi,[rbx+0x18]  ; argv[2]: the uid_map line"),
    ("e8 5e 00 00 00", "call writefile"),
    ("48 8d 3d ac 00 00 00", "lea rdi,[rip+0xac]"),
    ("48 8d 35 cd 00 00 00", "lea rsi,[rip+0xcd]"),
    ("e8 4b 00 00 00", "call writefile"),
    ("48 8d 3d ae 00 00 00", "lea rdi,[rip+0xae]"),
    ("48 8b 73 20", "mov rsi,[rbx+0x20]  ; argv[3]: the gid_map line"),
    ("e8 3b 00 00 00", "call writefile"),
    ("48 8b 7b 28", "mov rdi,[rbx+0x28]"),
    ("48 8d 73 28", "lea rsi,[rbx+0x28]"),
    ("48 8b 03", "mov rax,[rbx]"),
    ("48 8d 54 c3 10", "lea rdx,[rbx+rax*8+0x10]"),
    ("b8 3b 00 00 00", "mov eax,0x3b  ; execve(argv[4], argv+4, envp)"),
    ("0f 05", "syscall"),
    ("bf 02 00 00 00", "fail: mov edi,0x2"),
    ("48 8d 35 9a 00 00 00", "lea rsi,[rip+0x9a]"),
    ("ba 76 00 00 00", "mov edx,0x76"),
    ("b8 01 00 00 00", "mov eax,0x1  ; write"),
    ("0f 05", "syscall"),
    ("bf 7d 00 00 00", "mov edi,0x7d  ; 125"),
    ("b8 e7 00 00 00", "mov eax,0xe7  ; exit_group"),
    ("0f 05", "syscall"),
    ("49 89 f4", "writefile: mov r12,rsi"),
    ("be 01 00 00 00", "mov esi,0x1  ; O_WRONLY"),
    ("31 d2", "xor edx,edx"),
    ("b8 02 00 00 00", "mov eax,0x2  ; open"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("78 c7", "js fail"),
    ("41 89 c5", "mov r13d,eax"),
    ("4c 89 e6", "mov rsi,r12"),
    ("31 d2", "xor edx,edx"),
    ("80 3c 16 00", "3: cmp byte [rsi+rdx*1],0x0"),
    ("74 05", "je 4"),
    ("48 ff c2", "inc rdx"),
    ("eb f5", "jmp 3"),
    ("44 89 ef", "4: mov edi,r13d"),
    ("b8 01 00 00 00", "mov eax,0x1  ; write"),
    ("0f 05", "syscall"),
    ("48 39 d0", "cmp rax,rdx"),
    ("75 a5", "jne fail"),
    ("44 89 ef", "mov edi,r13d"),
    ("b8 03 00 00 00", "mov eax,0x3  ; close"),
    ("0f 05", "syscall"),
    ("c3", "ret"),
)
# Read by the code above at fixed offsets (rip-relative, as assembled): in this order.
_USERNS_DATA = b"/proc/self/uid_map\0/proc/self/setgroups\0/proc/self/gid_map\0deny\0"


_ENTER_CODE: tuple[tuple[str, str], ...] = (
    ("48 89 e3", "mov rbx,rsp"),
    ("48 83 3b 08", "cmp qword [rbx],0x8  ; argc >= 8"),
    ("0f 82 bc 01 00 00", "jb fail_enter"),
    ("48 8b 43 20", "mov rax,[rbx+0x20]  ; argv[3]: N, one digit"),
    ("44 0f b6 20", "movzx r12d,byte [rax]"),
    ("41 83 ec 30", "sub r12d,0x30"),
    ("41 83 fc 09", "cmp r12d,0x9"),
    ("0f 87 a6 01 00 00", "ja fail_enter"),
    ("4a 8d 04 a5 08 00 00 00", "lea rax,[r12*4+0x8]"),
    ("48 39 03", "cmp [rbx],rax  ; argc >= 8 + 4N"),
    ("0f 82 95 01 00 00", "jb fail_enter"),
    ("4c 8d 6b 28", "lea r13,[rbx+0x28]  ; &argv[4]: the first TARGET"),
    ("45 89 e6", "mov r14d,r12d"),
    ("45 85 f6", "1: test r14d,r14d  ; the last command's volatile marks, results ignored"),
    ("74 1f", "je 2"),
    ("49 8b 7d 10", "mov rdi,[r13+0x10]  ; DIRTY"),
    ("b8 57 00 00 00", "mov eax,0x57  ; unlink"),
    ("0f 05", "syscall"),
    ("49 8b 7d 18", "mov rdi,[r13+0x18]  ; MARK"),
    ("b8 54 00 00 00", "mov eax,0x54  ; rmdir"),
    ("0f 05", "syscall"),
    ("49 83 c5 20", "add r13,0x20"),
    ("41 ff ce", "dec r14d"),
    ("eb dc", "jmp 1"),
    ("b8 70 00 00 00", "2: mov eax,0x70  ; setsid"),
    ("0f 05", "syscall"),
    ("48 85 c0", "test rax,rax"),
    ("0f 88 5a 01 00 00", "js fail_enter"),
    ("bf 00 00 02 00", "mov edi,0x20000  ; CLONE_NEWNS"),
    ("b8 10 01 00 00", "mov eax,0x110  ; unshare"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("0f 85 46 01 00 00", "jne fail_enter"),
    ("4c 8d 6b 28", "lea r13,[rbx+0x28]  ; the first TARGET again"),
    ("45 85 e4", "3: test r12d,r12d"),
    ("74 2d", "je 4"),
    ("48 8d 3d 9d 01 00 00", 'lea rdi,[rip+0x19d]  ; "overlay"'),
    ("49 8b 75 00", "mov rsi,[r13]  ; TARGET"),
    ("48 89 fa", 'mov rdx,rdi  ; "overlay"'),
    ("45 31 d2", "xor r10d,r10d  ; flags 0"),
    ("4d 8b 45 08", "mov r8,[r13+0x8]  ; OPTIONS"),
    ("b8 a5 00 00 00", "mov eax,0xa5  ; mount"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("0f 85 19 01 00 00", "jne fail_enter"),
    ("49 83 c5 20", "add r13,0x20"),
    ("41 ff cc", "dec r12d"),
    ("eb ce", "jmp 3"),
    ("48 8d 3d 78 01 00 00", '4: lea rdi,[rip+0x178]  ; "rf"'),
    ("48 8b 73 18", "mov rsi,[rbx+0x18]  ; argv[2]: HIDDEN"),
    ("48 8d 15 70 01 00 00", 'lea rdx,[rip+0x170]  ; "tmpfs"'),
    ("41 ba 01 00 00 00", "mov r10d,0x1  ; MS_RDONLY"),
    ("4c 8d 05 69 01 00 00", 'lea r8,[rip+0x169]  ; "mode=0,size=4k"'),
    ("b8 a5 00 00 00", "mov eax,0xa5  ; mount"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("0f 85 e2 00 00 00", "jne fail_enter"),
    ("48 8b 7b 10", "mov rdi,[rbx+0x10]  ; argv[1]: CWD"),
    ("b8 50 00 00 00", "mov eax,0x50  ; chdir"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("0f 85 cf 00 00 00", "jne fail_enter"),
    ("bf 00 00 00 10", "mov edi,0x10000000  ; CLONE_NEWUSER (r13: &UID_MAP_LINE)"),
    ("b8 10 01 00 00", "mov eax,0x110  ; unshare"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("0f 85 ad 00 00 00", "jne fail_userns"),
    ("48 8d 3d 3b 01 00 00", 'lea rdi,[rip+0x13b]  ; "/proc/self/uid_map"'),
    ("49 8b 75 00", "mov rsi,[r13]  ; UID_MAP_LINE"),
    ("e8 d3 00 00 00", "call writefile"),
    ("48 8d 3d 3e 01 00 00", 'lea rdi,[rip+0x13e]  ; "/proc/self/setgroups"'),
    ("48 8d 35 5f 01 00 00", 'lea rsi,[rip+0x15f]  ; "deny"'),
    ("e8 c0 00 00 00", "call writefile"),
    ("48 8d 3d 40 01 00 00", 'lea rdi,[rip+0x140]  ; "/proc/self/gid_map"'),
    ("49 8b 75 08", "mov rsi,[r13+0x8]  ; GID_MAP_LINE"),
    ("e8 b0 00 00 00", "call writefile"),
    ("bf 26 00 00 00", "mov edi,0x26  ; PR_SET_NO_NEW_PRIVS"),
    ("be 01 00 00 00", "mov esi,0x1"),
    ("31 d2", "xor edx,edx"),
    ("45 31 d2", "xor r10d,r10d"),
    ("45 31 c0", "xor r8d,r8d"),
    ("b8 9d 00 00 00", "mov eax,0x9d  ; prctl"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("75 4f", "jne fail_seal"),
    ("bf 01 00 00 00", "mov edi,0x1  ; SECCOMP_SET_MODE_FILTER"),
    ("31 f6", "xor esi,esi  ; no flags (one thread)"),
    ("48 8d 15 ec 02 00 00", "lea rdx,[rip+0x2ec]  ; fprog"),
    ("b8 3d 01 00 00", "mov eax,0x13d  ; seccomp"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("75 36", "jne fail_seal"),
    ("49 8b 7d 10", "mov rdi,[r13+0x10]  ; PROGRAM"),
    ("49 8d 75 18", "lea rsi,[r13+0x18]  ; &ARGV0"),
    ("48 8b 03", "mov rax,[rbx]"),
    ("48 8d 54 c3 10", "lea rdx,[rbx+rax*8+0x10]  ; envp"),
    ("b8 3b 00 00 00", "mov eax,0x3b  ; execve(PROGRAM, &ARGV0, envp)"),
    ("0f 05", "syscall"),
    ("41 bc 7f 00 00 00", "mov r12d,0x7f  ; execve returned: 127 when the program is not found"),
    ("83 f8 fe", "cmp eax,-0x2  ; ENOENT"),
    ("74 06", "je 7"),
    ("41 bc 7e 00 00 00", "mov r12d,0x7e  ; 126 otherwise"),
    ("48 8d 35 36 02 00 00", "7: lea rsi,[rip+0x236]  ; EXEC_FAILED"),
    ("ba 79 00 00 00", "mov edx,len(EXEC_FAILED)"),
    ("eb 2e", "jmp fail_code"),
    ("48 8d 35 d9 01 00 00", "fail_seal: lea rsi,[rip+0x1d9]  ; SEAL_FAILED"),
    ("ba 4f 00 00 00", "mov edx,0x4f"),
    ("eb 1a", "jmp fail"),
    ("48 8d 35 55 01 00 00", "fail_userns: lea rsi,[rip+0x155]  ; USERNS_FAILED"),
    ("ba 76 00 00 00", "mov edx,0x76"),
    ("eb 0c", "jmp fail"),
    ("48 8d 35 c0 00 00 00", "fail_enter: lea rsi,[rip+0xc0]  ; ENTER_FAILED"),
    ("ba 87 00 00 00", "mov edx,0x87"),
    ("41 bc 7d 00 00 00", "fail: mov r12d,0x7d  ; 125"),
    ("bf 02 00 00 00", "fail_code: mov edi,0x2  ; stderr"),
    ("b8 01 00 00 00", "mov eax,0x1  ; write"),
    ("0f 05", "syscall"),
    ("44 89 e7", "mov edi,r12d  ; the exit code"),
    ("b8 e7 00 00 00", "mov eax,0xe7  ; exit_group"),
    ("0f 05", "syscall"),
    ("49 89 f7", "writefile: mov r15,rsi  ; rdi: path, rsi: text (a failure: fail_userns)"),
    ("be 01 00 00 00", "mov esi,0x1  ; O_WRONLY"),
    ("31 d2", "xor edx,edx"),
    ("b8 02 00 00 00", "mov eax,0x2  ; open"),
    ("0f 05", "syscall"),
    ("85 c0", "test eax,eax"),
    ("78 b5", "js fail_userns"),
    ("89 c5", "mov ebp,eax"),
    ("4c 89 fe", "mov rsi,r15"),
    ("31 d2", "xor edx,edx"),
    ("80 3c 16 00", "5: cmp byte [rsi+rdx*1],0x0"),
    ("74 05", "je 6"),
    ("48 ff c2", "inc rdx"),
    ("eb f5", "jmp 5"),
    ("89 ef", "6: mov edi,ebp"),
    ("b8 01 00 00 00", "mov eax,0x1  ; write"),
    ("0f 05", "syscall"),
    ("48 39 d0", "cmp rax,rdx"),
    ("75 95", "jne fail_userns"),
    ("89 ef", "mov edi,ebp"),
    ("b8 03 00 00 00", "mov eax,0x3  ; close"),
    ("0f 05", "syscall"),
    ("c3", "ret"),
)
# Read by the code above at fixed offsets (rip-relative, as assembled): in this order, then
# ENTER_FAILED, USERNS_FAILED, SEAL_FAILED and EXEC_FAILED (each with its newline), the filter's
# ``sock_fprog`` (8-aligned) and the filter last (its length may differ; nothing follows it).
_ENTER_DATA = (
    b"overlay\0rf\0tmpfs\0mode=0,size=4k\0"
    b"/proc/self/uid_map\0/proc/self/setgroups\0/proc/self/gid_map\0deny\0"
)


def enter_program(filter_program: bytes | None = None) -> bytes:
    """One command's whole start (:data:`ENTER_PATH`) as an ELF file; ``filter_program`` as
    for :func:`seal_program` (default the local backend's command filter)."""
    if filter_program is None:
        filter_program = _command_filter()
    code = bytes.fromhex(" ".join(hexes for hexes, _asm in _ENTER_CODE))
    messages = b"".join(
        (text + "\n").encode() for text in (ENTER_FAILED, USERNS_FAILED, SEAL_FAILED, EXEC_FAILED)
    )
    start = _EHDR + 2 * _PHDR
    head = code + _ENTER_DATA + messages
    fprog_at = _align(start + len(head))
    # The code's rip-relative offsets, as assembled: the sock_fprog right after the messages.
    assert fprog_at - start == 0x458, "the enter program's layout moved; assemble it again"
    filter_at = fprog_at + 16
    fprog = struct.pack("<H6xQ", len(filter_program) // 8, _BASE + filter_at)
    body = head + bytes(fprog_at - start - len(head)) + fprog + filter_program
    return _elf(start, start + len(body), body)


def userns_program() -> bytes:
    """The wrapper's namespace entry (:data:`USERNS_PATH`) as an ELF file."""
    code = bytes.fromhex(" ".join(hexes for hexes, _asm in _USERNS_CODE))
    body = code + _USERNS_DATA + (USERNS_FAILED + "\n").encode()
    start = _EHDR + 2 * _PHDR
    return _elf(start, start + len(body), body)


def mount_program() -> bytes:
    """The overlay wrapper's static mount(2) program (:data:`MOUNT_PATH`) as an ELF file."""
    message = (MOUNT_FAILED + "\n").encode()
    start = _EHDR + 2 * _PHDR

    def code(message_at: int) -> bytes:
        text = " ".join(hexes for hexes, _asm in _MOUNT_CODE).format(
            message=struct.pack("<Q", message_at).hex(" "),
            length=struct.pack("<I", len(message)).hex(" "),
        )
        return bytes.fromhex(text)

    message_at = start + len(code(0))
    size = message_at + len(message)
    return _elf(start, size, code(_BASE + message_at) + message)


def _elf(start: int, size: int, body: bytes) -> bytes:
    """An x86-64 ELF executable: its header, one R+X load of the whole file, a non-exec
    stack, then ``body`` (code first: the entry point is ``start``)."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 0x3E, 1, _BASE + start, _EHDR, 0, 0, _EHDR, _PHDR, 2, 0, 0, 0
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)  # PT_LOAD, R+X
    stack = struct.pack("<IIQQQQQQ", 0x6474E551, 6, 0, 0, 0, 0, 0, 16)  # PT_GNU_STACK, RW
    out = ehdr + load + stack + body
    assert len(out) == size
    return out


def _code(fprog: int, message: int, length: int) -> bytes:
    text = " ".join(hexes for hexes, _asm in _CODE).format(
        fprog=struct.pack("<Q", fprog).hex(" "),
        message=struct.pack("<Q", message).hex(" "),
        length=struct.pack("<I", length).hex(" "),
    )
    return bytes.fromhex(text)


def _align(n: int) -> int:
    return (n + 7) & ~7


def seal_program(filter_program: bytes | None = None) -> bytes:
    """The installer as an ELF file's bytes (``filter_program``: raw ``sock_filter``s;
    default the local backend's command filter). Raises Unavailable off x86-64."""
    if filter_program is None:
        filter_program = _command_filter()
    message = (SEAL_FAILED + "\n").encode()
    start = _EHDR + 2 * _PHDR
    code_len = len(_code(0, 0, 0))
    fprog_at = _align(start + code_len)
    filter_at = fprog_at + 16
    message_at = filter_at + len(filter_program)
    size = message_at + len(message)
    code = _code(_BASE + fprog_at, _BASE + message_at, len(message))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 0x3E, 1, _BASE + start, _EHDR, 0, 0, _EHDR, _PHDR, 2, 0, 0, 0
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)  # PT_LOAD, R+X
    stack = struct.pack("<IIQQQQQQ", 0x6474E551, 6, 0, 0, 0, 0, 0, 16)  # PT_GNU_STACK, RW
    fprog = struct.pack("<H6xQ", len(filter_program) // 8, _BASE + filter_at)
    out = bytearray(ehdr + load + stack + code)
    out += bytes(fprog_at - len(out))
    out += fprog + filter_program + message
    assert len(out) == size
    return bytes(out)


def _command_filter() -> bytes:
    """The local backend's command filter (raw ``sock_filter``s); Unavailable off x86-64."""
    from ..confined._layers import LayerUnavailable, seccomp_program

    try:
        return seccomp_program(layered=False)
    except LayerUnavailable as exc:
        raise Unavailable(
            f"change sets on docker need the per-command seccomp filter, and {exc}"
        ) from None


@functools.cache
def install_script() -> str:
    """Shell for the container's main process (root, no capabilities): write the installer
    into :data:`SEAL_DIR` (a root-owned tmpfs) and make it read-only for everyone."""
    steps = []
    # The seal last: the supervisor waits for it, and then finds the mount program there too.
    programs = (
        (MOUNT_PATH, mount_program()),
        (USERNS_PATH, userns_program()),
        (ENTER_PATH, enter_program()),
        (SEAL_PATH, seal_program()),
    )
    for path, program in programs:
        data = base64.b64encode(program).decode()
        steps.append(
            f"echo {data} | base64 -d > {path}.new && chmod 555 {path}.new && mv {path}.new {path}"
        )
    return "umask 022; " + " && ".join(steps)
