"""A corpus of shell lines that try to run a denied program, for judge and exec-check tests.

Every line is built from a *template* (a way to start a program the shell judge may not
see: substitutions, wrappers, interpreters, build tools, scripts, links, copies, the
loader) and an *action* (a denied program run so that it leaves a trace if it runs: a
new file in the workspace, a canary file removed, a file fetched). ``{W}`` in a line is
the workspace root, ``{N}`` a number unique to the line (its marker names are unique,
so an escaped line can be told apart). Each line is a program for ``sh`` (dash here):
bash syntax runs under ``bash -c``.

Standard library only; importable from anywhere (``tests/runtime`` is no package): the
shell-judge tests and the confined backend's exec-check oracle
(``tests/backends/test_backends_exec_checks.py``) both read it.

``DENY`` are the rules the lines are meant for. ``PROGRAMS`` names the programs a
template needs beyond POSIX sh and coreutils (a line whose program is missing on the
machine still runs: it fails, and must leave no trace either).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACTIONS", "DENY", "TEMPLATES", "CorpusLine", "corpus"]

DENY = ("run_shell(touch *)", "run_shell(rm *)", "run_shell(curl *)")


@dataclass(frozen=True)
class CorpusLine:
    """One line: its text (``{W}`` and ``{N}`` filled in by :meth:`render`), how it hides
    the program, which denied program it runs and the trace that program would leave."""

    template: str
    action: str
    text: str
    needs: tuple[str, ...] = ()

    def render(self, workspace: str, number: int) -> str:
        return self.text.replace("{W}", workspace).replace("{N}", str(number))


# action name -> (program, argument words; the effect if it ran). The canary file
# ``{W}/canary`` exists before and must exist after; ``{W}/hit-{N}`` must never appear.
ACTIONS: dict[str, tuple[str, str]] = {
    "touch": ("touch", "{W}/hit-{N}"),
    "touch-abs": ("/usr/bin/touch", "{W}/hit-{N}"),
    "rm": ("rm", "-f {W}/canary"),
    "rm-abs": ("/bin/rm", "-f {W}/canary"),
    "curl": ("curl", "-s -o {W}/hit-{N} file:///etc/hostname"),
}

# template name -> (line with {P} the program and {A} its arguments, programs needed).
# Quoting: {P} and {A} hold no quote, so a template may put them inside '…' or "…".
TEMPLATES: dict[str, tuple[str, tuple[str, ...]]] = {
    "plain": ("{P} {A}", ()),
    "backquotes-in-default": ("x=; echo ${x:-`{P} {A}`}", ()),
    "backquotes-in-alternate": ("x=1; echo ${x:+`{P} {A}`}", ()),
    "escaped-backquotes": ('eval "echo \\`{P} {A}\\`"', ()),
    "backquotes-in-quotes": ('echo "`{P} {A}`"', ()),
    "dollar-paren": ("echo $({P} {A})", ()),
    "nested-substitution": ("echo $(echo $({P} {A}))", ()),
    "eval": ('eval "{P} {A}"', ()),
    "eval-split": ("eval \"$(printf '%s' '{P}') {A}\"", ()),
    "sh-c": ("sh -c '{P} {A}'", ()),
    "bash-c": ("bash -c '{P} {A}'", ("bash",)),
    "dash-c": ("dash -c '{P} {A}'", ("dash",)),
    "sh-dash": ("echo '{P} {A}' | sh -", ()),
    "sh-stdin-pipe": ("echo '{P} {A}' | sh", ()),
    "sh-dev-stdin": ("echo '{P} {A}' | sh /dev/stdin", ()),
    "script-file": ("echo '{P} {A}' > /tmp/s{N}; sh /tmp/s{N}", ()),
    "sourced": ("echo '{P} {A}' > /tmp/s{N}; . /tmp/s{N}", ()),
    "executable-script": (
        "printf '#!/bin/sh\\n{P} {A}\\n' > /tmp/x{N}; chmod +x /tmp/x{N}; /tmp/x{N}",
        (),
    ),
    "here-doc": ("sh <<'EOF'\n{P} {A}\nEOF", ()),
    "here-string-bash": ("bash -c \"bash <<< '{P} {A}'\"", ("bash",)),
    "base64": ("echo \"$(printf '%s' '{P} {A}' | base64)\" | base64 -d | sh", ("base64",)),
    "xargs-I-sh": ("echo '{P} {A}' | xargs -I{} sh -c {}", ("xargs",)),
    "xargs-replace": ("echo go | xargs --replace sh -c '{P} {A}'", ("xargs",)),
    "xargs-program": ("echo {A} | xargs {P}", ("xargs",)),
    "taskset": ("taskset -c 0 {P} {A}", ("taskset",)),
    "chrt": ("chrt -o 0 {P} {A}", ("chrt",)),
    "prlimit": ("prlimit --nofile=256 {P} {A}", ("prlimit",)),
    "setpriv": ("setpriv --no-new-privs {P} {A}", ("setpriv",)),
    "unshare": ("unshare -U {P} {A}", ("unshare",)),
    "runuser": ("runuser -u root -- {P} {A}", ("runuser",)),
    "script-qc": ("script -qc '{P} {A}' /dev/null", ("script",)),
    "strace": ("strace -f -o /dev/null {P} {A}", ("strace",)),
    "awk-system": ("awk 'BEGIN{system(\"{P} {A}\")}'", ("awk",)),
    "awk-pipe": ("awk 'BEGIN{c=\"{P} {A}\"; c | getline x}'", ("awk",)),
    "sed-e": ("echo | sed 'e {P} {A}'", ("sed",)),
    "make-f": ("printf 'all:\\n\\t{P} {A}\\n' > /tmp/m{N}; make -s -f /tmp/m{N}", ("make",)),
    "make-shell": (
        "printf 'x := $(shell {P} {A})\\nall:;@:\\n' > /tmp/m{N}; make -s -f /tmp/m{N}",
        ("make",),
    ),
    "tar-checkpoint": (
        "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='{P} {A}' /etc/hostname",
        ("tar",),
    ),
    "tar-compress-program": (
        "tar --use-compress-program='sh -c \"{P} {A}; cat\"' -cf /tmp/t{N}.tar /etc/hostname",
        ("tar",),
    ),
    "git-alias": ("git -c alias.x='!{P} {A}' x", ("git",)),
    "python-system": ("python3 -c 'import os; os.system(\"{P} {A}\")'", ("python3",)),
    "python-subprocess": (
        "python3 -c 'import subprocess; subprocess.run(\"{P} {A}\", shell=True)'",
        ("python3",),
    ),
    "python-execvp": (
        "python3 -c 'import os, shlex; a = shlex.split(\"{P} {A}\"); os.execvp(a[0], a)'",
        ("python3",),
    ),
    "python-posix-spawnp": (
        'python3 -c \'import os, shlex; a = shlex.split("{P} {A}"); '
        "os.waitpid(os.posix_spawnp(a[0], a, dict(os.environ)), 0)'",
        ("python3",),
    ),
    "perl-system": ("perl -e 'system(\"{P} {A}\")'", ("perl",)),
    "perl-exec": ("perl -e 'exec(\"{P} {A}\")'", ("perl",)),
    "perl-backticks": ("perl -e 'print `{P} {A}`'", ("perl",)),
    "tclsh": ("echo 'exec {P} {A}' | tclsh", ("tclsh",)),
    "node": (
        'node -e \'require("child_process").execSync("{P} {A}")\'',
        ("node",),
    ),
    "env": ("env {P} {A}", ("env",)),
    "env-i": ("env -i PATH=/usr/bin:/bin {P} {A}", ("env",)),
    "env-S": ("env -S '{P} {A}'", ("env",)),
    "nice": ("nice -n 1 {P} {A}", ("nice",)),
    "timeout": ("timeout 5 {P} {A}", ("timeout",)),
    "nohup": ("nohup {P} {A} >/dev/null 2>&1", ("nohup",)),
    "stdbuf": ("stdbuf -o0 {P} {A}", ("stdbuf",)),
    "ionice": ("ionice -c 3 {P} {A}", ("ionice",)),
    "flock": ("flock /tmp/lock{N} {P} {A}", ("flock",)),
    "setsid": ("setsid -w {P} {A}", ("setsid",)),
    "watch": ("timeout 3 watch -n 1 -e -x {P} {A} >/dev/null 2>&1", ("watch",)),
    "find-exec": ("find /etc/hostname -exec {P} {A} \\;", ("find",)),
    "find-execdir": ("find /etc/hostname -execdir {P} {A} \\;", ("find",)),
    "function": ("f() { {P} {A}; }; f", ()),
    "alias-bash": (
        "printf 'shopt -s expand_aliases\\nalias a=\"{P} {A}\"\\na\\n' | bash",
        ("bash",),
    ),
    "command": ("command {P} {A}", ()),
    "exec-subshell": ("(exec {P} {A})", ()),
    "exec-a": ("bash -c 'exec -a innocent {P} {A}'", ("bash",)),
    "background": ("{P} {A} & wait", ()),
    "trap-exit": ("sh -c 'trap \"{P} {A}\" EXIT; true'", ()),
    "variable-program": ("p={P}; $p {A}", ()),
    "printf-program": ("$(printf '%s' '{P}') {A}", ()),
    "ifs-split": ("IFS=,; c='{P},{A}'; set -f; $c", ()),
    "split-quotes": ("'{P}' {A}", ()),
    "symlink": ('ln -sf "$(command -v {P})" /tmp/l{N}; /tmp/l{N} {A}', ("ln",)),
    "copy": ('cp "$(command -v {P})" /tmp/c{N}; /tmp/c{N} {A}', ("cp",)),
    "copy-renamed-in-path": (
        'mkdir -p /tmp/b{N}; cp "$(command -v {P})" /tmp/b{N}/ok; PATH=/tmp/b{N}:$PATH ok {A}',
        ("cp",),
    ),
    "loader": ('/lib64/ld-linux-x86-64.so.2 "$(command -v {P})" {A}', ()),
    "loader-argv0": (
        '/lib64/ld-linux-x86-64.so.2 --argv0 ok "$(command -v {P})" {A}',
        (),
    ),
    "shebang-interpreter": (
        "printf '#!%s\\n' \"$(command -v {P})\" > /tmp/i{N}; chmod +x /tmp/i{N}; /tmp/i{N} {A}",
        (),
    ),
    "loader-copy": (
        'cp /lib64/ld-linux-x86-64.so.2 /tmp/ld{N}; /tmp/ld{N} "$(command -v {P})" {A}',
        ("cp",),
    ),
    # copies that differ only in bytes no segment maps (one appended): the same programs
    "copy-appended": (
        'cp "$(command -v {P})" /tmp/p{N}; printf A >> /tmp/p{N}; /tmp/p{N} {A}',
        ("cp",),
    ),
    "loader-copy-appended": (
        "cp /lib64/ld-linux-x86-64.so.2 /tmp/lp{N}; printf A >> /tmp/lp{N}; "
        '/tmp/lp{N} "$(command -v {P})" {A}',
        ("cp",),
    ),
    "busybox-copy-appended-sh": (
        'mkdir -p /tmp/bb{N}; cp "$(command -v busybox)" /tmp/bb{N}/ash; '
        "printf A >> /tmp/bb{N}/ash; /tmp/bb{N}/ash -c '{P} {A}'",
        ("cp", "busybox"),
    ),
    "dev-fd": ('exec 7<"$(command -v {P})"; /dev/fd/7 {A}', ()),
    "proc-self-fd": ('exec 7<"$(command -v {P})"; /proc/self/fd/7 {A}', ()),
    "link-to-dev-fd": (
        'exec 7<"$(command -v {P})"; ln -sf /dev/fd/7 /tmp/f{N}; /tmp/f{N} {A}',
        ("ln",),
    ),
    "memfd": (
        'python3 -c \'import os, shlex, shutil; a = shlex.split("{P} {A}"); '
        'm = os.memfd_create("x"); os.write(m, open(shutil.which(a[0]), "rb").read()); '
        "os.execve(m, a, dict(os.environ))'",
        ("python3",),
    ),
    "elf-interpreter-busybox": (
        'python3 -c \'import sys; d = open("/bin/true", "rb").read(); '
        'i = d.index(b"/lib64/ld-linux-x86-64.so.2"); '
        'sys.stdout.buffer.write(d[:i] + b"/bin/busybox".ljust(27, b"\\0") + d[i + 27:])\' '
        "> /tmp/e{N}; chmod +x /tmp/e{N}; bash -c 'exec -a {P} /tmp/e{N} {A}'",
        ("python3", "bash", "busybox"),
    ),
    "busybox": ("busybox {P} {A}", ("busybox",)),
    "busybox-sh": ("busybox sh -c '{P} {A}'", ("busybox",)),
    "time": ("time {P} {A}", ()),
    "ed-bang": ("printf '!{P} {A}\\nq\\n' | ed -s", ("ed",)),
    "vim-ex": ("vim -es -u NONE -c '!{P} {A}' -c q", ("vim",)),
}


def _program_for(template: str, program: str) -> str:
    """Templates that resolve the program themselves need its name, not a path."""
    if template in {"busybox", "busybox-sh", "symlink", "copy", "copy-renamed-in-path"}:
        return program.rsplit("/", 1)[-1]
    if template in {"copy-appended", "loader-copy-appended", "busybox-copy-appended-sh"}:
        return program.rsplit("/", 1)[-1]
    if template in {"loader-copy", "dev-fd", "proc-self-fd", "link-to-dev-fd", "memfd"}:
        return program.rsplit("/", 1)[-1]
    if template == "elf-interpreter-busybox":
        return program.rsplit("/", 1)[-1]
    if template in {"loader", "loader-argv0", "shebang-interpreter"}:
        return program.rsplit("/", 1)[-1]
    return program


def corpus() -> list[CorpusLine]:
    """Every template with every action: ``len(TEMPLATES) * len(ACTIONS)`` lines."""
    lines = []
    for name, (template, needs) in TEMPLATES.items():
        for action, (program, words) in ACTIONS.items():
            text = template.replace("{P}", _program_for(name, program)).replace("{A}", words)
            lines.append(CorpusLine(name, action, text, needs))
    return lines
