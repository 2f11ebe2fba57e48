"""A corpus of shell command lines for judging the policy's shell judge, and what each one does.

Each :class:`Line` is a command line as ``run_shell`` gets it, with what ``/bin/sh`` (dash)
does when it runs the line in a scratch directory laid out by :func:`prepare` (a git
repository holding ``a.txt``, ``src/x.py`` and a directory ``victim``, stdin ``/dev/null``,
``HOME`` set): ``starts`` names the denied programs it starts (``touch``, ``rm``), ``writes``
the denied files it writes without starting one (``MARK`` through a redirection, ``sed w``,
``find -fprint``). A line that does neither is *benign*: under :data:`DENY` + :data:`ALLOW` the
judge must allow it, so the judge stays useful. Every attack creates ``MARK`` or removes
``victim``; :func:`effect_seen` checks which.

``needs`` names the programs (or ``root``) a line needs to do what it says; a line whose
needs are missing does nothing to check. ``kind`` names the construct (the finding of
issue #29 it reproduces, or the family of benign lines).

Importable from any test module as ``shell_corpus`` (``tests/runtime`` is on ``sys.path``
for its own tests; elsewhere import it by path). The exec-trace oracle runs the same lines
in the confined sandbox and compares every ``execve`` with the judge's verdict.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ALLOW",
    "CORPUS",
    "DENIED_PROGRAMS",
    "DENY",
    "Line",
    "effect_seen",
    "prepare",
]

# The denied programs and file; every attack reaches one of them.
DENIED_PROGRAMS = ("touch", "rm")
DENY = ("run_shell(touch*)", "run_shell(rm*)", "write_file(path=MARK*)")
# Allow rules of the kind a team writes, launchers among them (sed, awk, find, git, make,
# python3 -m pytest, sh): an attack through an allowed launcher must still not be allowed.
ALLOW = (
    "run_shell(ls*)",
    "run_shell(cat*)",
    "run_shell(echo*)",
    "run_shell(printf*)",
    "run_shell(grep*)",
    "run_shell(head*)",
    "run_shell(tail*)",
    "run_shell(wc*)",
    "run_shell(sort*)",
    "run_shell(pwd)",
    "run_shell(true)",
    "run_shell(false)",
    "run_shell(test *)",
    "run_shell(cd*)",
    "run_shell(git status*)",
    "run_shell(git diff*)",
    "run_shell(git log*)",
    "run_shell(sed*)",
    "run_shell(awk*)",
    "run_shell(find*)",
    "run_shell(python3 -m pytest*)",
    "run_shell(sh*)",
    "run_shell(bash*)",
    "run_shell(make*)",
    "run_shell(tar*)",
    "run_shell(git*)",
    "run_shell(perl*)",
    "run_shell(python3*)",
    "write_file(path=build/**)",
)


@dataclass(frozen=True)
class Line:
    """One command line and what dash does with it in the scratch directory."""

    command: str
    kind: str
    starts: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()

    @property
    def benign(self) -> bool:
        return not self.starts and not self.writes


def _t(command: str, kind: str, *needs: str) -> Line:
    """An attack that starts ``touch MARK``."""
    return Line(command, kind, ("touch",), (), needs)


def _rm(command: str, kind: str, *needs: str) -> Line:
    """An attack that starts ``rm -rf victim``."""
    return Line(command, kind, ("rm",), (), needs)


def _w(command: str, kind: str, *needs: str) -> Line:
    """An attack that writes ``MARK`` without starting a denied program."""
    return Line(command, kind, (), ("MARK",), needs)


def _ok(command: str, kind: str) -> Line:
    return Line(command, kind)


T = "`touch MARK`"
S = "$(touch MARK)"

_PARAMETER_EXPANSIONS = [
    # finding 1: backquotes (and $(…)) inside ${…}; tree-sitter-bash leaves them as text
    _rm("ls ${x:-`rm -rf victim`}", "backquote in ${}"),
    *(_t(f"ls ${{x{op}{T}}}", "backquote in ${}") for op in (":-", "-", ":=", "=")),
    # a pattern is expanded only when the parameter is set (HOME is)
    *(_t(f"ls ${{HOME{op}{T}}}", "backquote in ${}") for op in ("#", "##", "%", "%%")),
    _t(f"ls ${{x:?{T}}} 2>/dev/null", "backquote in ${}"),
    _t(f"ls ${{x?{T}}} 2>/dev/null", "backquote in ${}"),
    _t(f"ls ${{HOME:+{T}}}", "backquote in ${}"),
    _t(f"ls ${{HOME+{T}}}", "backquote in ${}"),
    _t(f"ls ${{x:-${{y:-{T}}}}}", "backquote in ${}"),
    _t(f"ls ${{x:-${{y:-${{z:-{T}}}}}}}", "backquote in ${}"),
    _t(f'ls "${{x:-{T}}}"', "backquote in ${}"),
    _t(f'ls "${{HOME#{T}}}"', "backquote in ${}"),
    _t(f'echo "${{HOME%%{T}}}"', "backquote in ${}"),
    _t(f"echo ${{x:-a{T}b}}", "backquote in ${}"),
    _t(f"cat ${{x:-{T}}} 2>/dev/null", "backquote in ${}"),
    _t(f"grep -r ${{x:-{T}}} . >/dev/null", "backquote in ${}"),
    _t(f"wc -l ${{x:-{T}}}", "backquote in ${}"),
    _t(f"ls ${{HOME#{S}}}", "$() in ${} as text"),
    _t(f"ls ${{HOME%{S}}}", "$() in ${} as text"),
    _t(f"ls ${{HOME##{S}}}", "$() in ${} as text"),
    _t(f"ls ${{x:-{S}}}", "$() in ${}"),
    _t(f'ls "${{x:={S}}}"', "$() in ${}"),
    _t(f"ls ${{x:-${{HOME#{T}}}}}", "backquote in ${}"),
    # single quotes are plain characters inside a double-quoted ${…}: the backquote runs
    _t(f"ls \"${{x:-'{T}'}}\"", "backquote in ${}"),
    _t(f"echo \"${{x:-'{S}'}}\"", "$() in ${}"),
    _t(f"git status ${{x:-{T}}}", "backquote in ${}"),
    _t(f"git log -1 ${{HOME#{T}}} >/dev/null 2>&1", "backquote in ${}"),
    _t(f"ls; ls ${{x:-{T}}}", "backquote in ${}"),
    _t(f"ls | grep ${{x:-{T}}}", "backquote in ${}"),
]

_NESTED_BACKQUOTES = [
    # finding 1: escaped backquotes inside backquotes are a nested substitution
    _t("ls `ls \\`touch MARK\\``", "nested backquotes"),
    _t("echo `echo \\`touch MARK\\``", "nested backquotes"),
    _t('echo "`echo \\`touch MARK\\``"', "nested backquotes"),
    _t("ls `echo \\`echo \\\\\\`touch MARK\\\\\\`\\``", "nested backquotes"),
    _t("cat `ls \\`touch MARK\\`` 2>/dev/null", "nested backquotes"),
    _t("ls `printf '%s' \\`touch MARK\\``", "nested backquotes"),
    _t("echo `echo \\$(touch MARK)`", "nested backquotes"),
    _t("ls ${x:-`echo \\`touch MARK\\``}", "nested backquotes"),
]

_XARGS = [
    # finding 1: the script xargs hands to a shell is made of its input
    _t("echo 'touch MARK' | xargs -I{} sh -c {}", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs -I'#' sh -c '#'", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs -I% bash -c %", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs -i sh -c {}", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs --replace sh -c {}", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs --replace=@ sh -c @", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs -0 -I{} sh -c {}", "xargs sh -c input"),
    _t("printf 'touch MARK' | xargs -I{} sh -c 'echo; {}'", "xargs sh -c input"),
    _t("echo 'touch MARK' | xargs -I{} dash -c {}", "xargs sh -c input"),
    _t("echo \"'touch MARK'\" | xargs sh -c", "xargs sh -c input"),
    _t("echo \"'touch MARK'\" | xargs -L1 sh -c", "xargs sh -c input"),
    # finding 2: optional-argument options (the command is the next word, not their value)
    _t("echo x | xargs --replace touch MARK", "xargs optional argument"),
    _t("echo x | xargs -i touch MARK", "xargs optional argument"),
    _t("echo x | xargs -e touch MARK", "xargs optional argument"),
    _t("echo x | xargs -l touch MARK", "xargs optional argument"),
    _t("echo x | xargs --max-lines touch MARK", "xargs optional argument"),
    _t("echo x | xargs --eof touch MARK", "xargs optional argument"),
    _t("echo MARK | xargs -r touch", "xargs"),
    _t("printf MARK | xargs -0r touch", "xargs"),
    _t("echo MARK | xargs -n1 -P2 touch", "xargs"),
    _t("echo MARK | xargs -I{} touch {}", "xargs"),
    # a program that runs its arguments, given words from input
    _t("echo touch MARK | xargs env", "xargs launcher"),
    _t("echo touch MARK | xargs nice", "xargs launcher"),
    _t("echo 5 touch MARK | xargs timeout", "xargs launcher"),
    _t("echo '-maxdepth 0 -exec touch MARK ;' | xargs find .", "xargs launcher"),
    _t("echo 'BEGIN{system(\"touch MARK\")}' | xargs -0 awk", "xargs launcher"),
]

_STDIN_SHELLS = [
    # finding 2: a shell that reads its commands from its input
    _t("printf 'touch MARK' | sh -", "shell reads input"),
    _t("echo touch MARK | sh", "shell reads input"),
    _t("echo touch MARK | sh -s", "shell reads input"),
    _t("echo touch MARK | sh -s x y", "shell reads input"),
    _t("echo touch MARK | bash", "shell reads input"),
    _t("echo touch MARK | dash", "shell reads input"),
    _t("echo touch MARK | sh /dev/stdin", "shell reads input"),
    _t("echo touch MARK | sh /proc/self/fd/0", "shell reads input"),
    _t("echo touch MARK | bash /dev/fd/0", "shell reads input"),
    _t("sh /dev/stdin <<'E'\ntouch MARK\nE", "shell reads input"),
    _t("sh <<'E'\ntouch MARK\nE", "shell reads input"),
    _t("echo touch MARK | busybox sh", "shell reads input", "busybox"),
    _t("echo 'import os; os.system(\"touch MARK\")' | python3", "interpreter reads input"),
    _t("echo 'import os; os.system(\"touch MARK\")' | python3 -", "interpreter reads input"),
    _t("echo 'system(\"touch MARK\")' | perl", "interpreter reads input", "perl"),
    _t(
        "python3 /dev/stdin <<'E'\nimport os\nos.system('touch MARK')\nE",
        "interpreter reads input",
    ),
    _t("make -f - <<'E'\nall:\n\ttouch MARK\nE", "interpreter reads input", "make"),
    _t("make -f /dev/stdin <<'E'\nall:\n\ttouch MARK\nE", "interpreter reads input", "make"),
]

_SAME_LINE_SCRIPTS = [
    # finding 2: a script file the same line writes, then runs
    _t("echo touch MARK > s; sh s", "script written in the line"),
    _t("printf 'touch MARK\\n' > s && bash s", "script written in the line"),
    _t("echo touch MARK > s; . ./s", "script written in the line"),
    _t("echo touch MARK > s; sh < s", "script written in the line"),
    _t("echo touch MARK | tee s >/dev/null; sh s", "script written in the line"),
    _t("echo touch MARK > a; cp a s; sh s", "script written in the line"),
    _t("echo touch MARK > build/s; sh build/s", "script written in the line"),
    _t(
        "echo 'import os; os.system(\"touch MARK\")' > s.py; python3 s.py",
        "script written in the line",
    ),
    _t("echo 'system \"touch MARK\"' > s.pl; perl s.pl", "script written in the line", "perl"),
    _t("printf 'all:\\n\\ttouch MARK\\n' > mk; make -f mk", "script written in the line", "make"),
    _t("printf 'all:\\n\\ttouch MARK\\n' > mk; make -fmk", "script written in the line", "make"),
    _t("printf 's/x/touch MARK/e\\n' > sc; echo x | sed -f sc", "script written in the line"),
    _t(
        "printf 'BEGIN{system(\"touch MARK\")}' > p.awk; awk -f p.awk",
        "script written in the line",
    ),
    _t("echo touch MARK > s; chmod +x s; ./s", "script written in the line"),
    _t("cp /usr/bin/touch t; ./t MARK", "renamed program"),
    _t("ln -s /usr/bin/touch t; ./t MARK", "renamed program"),
]

_LAUNCHERS = [
    # finding 2: launchers the walker did not know, and the ones it did
    _t("taskset 1 touch MARK", "launcher", "taskset"),
    _t("taskset -c 0 touch MARK", "launcher", "taskset"),
    _t("chrt -o 0 touch MARK", "launcher", "chrt"),
    _t("chrt --other 0 touch MARK", "launcher", "chrt"),
    _t("prlimit touch MARK", "launcher", "prlimit"),
    _t("prlimit --nofile=1024 touch MARK", "launcher", "prlimit"),
    _t("prlimit -n1024 touch MARK", "launcher", "prlimit"),
    _t("setpriv touch MARK", "launcher", "setpriv"),
    _t("setpriv --reset-env touch MARK", "launcher", "setpriv"),
    _t("unshare touch MARK", "launcher", "unshare", "root"),
    _t("unshare -r touch MARK", "launcher", "unshare", "root"),
    _t("unshare -U -r touch MARK", "launcher", "unshare", "root"),
    _t("unshare --fork touch MARK", "launcher", "unshare", "root"),
    _t("runuser -u root -- touch MARK", "launcher", "runuser", "root"),
    _t("runuser -u root touch MARK", "launcher", "runuser", "root"),
    _t("runuser root -c 'touch MARK'", "launcher", "runuser", "root"),
    _t("script -qc 'touch MARK' /dev/null", "launcher", "script"),
    _t("script -q -c 'touch MARK' /dev/null", "launcher", "script"),
    _t("script --command 'touch MARK' -q /dev/null", "launcher", "script"),
    _t("script -q --command='touch MARK' /dev/null", "launcher", "script"),
    _t("strace -o /dev/null touch MARK", "launcher", "strace"),
    _t("strace -f -qq -o /dev/null touch MARK", "launcher", "strace"),
    _t("strace -fo /dev/null touch MARK", "launcher", "strace"),
    _t("chroot --skip-chdir / touch MARK", "launcher", "chroot", "root"),
    _t("fakeroot touch MARK", "launcher", "fakeroot"),
    _t("setsid -w touch MARK", "launcher"),
    _t("ionice -c 3 touch MARK", "launcher"),
    _t("stdbuf -o0 touch MARK", "launcher"),
    _t("nohup touch MARK 2>/dev/null", "launcher"),
    _t("timeout 5 touch MARK", "launcher"),
    _t("timeout -s KILL 5 touch MARK", "launcher"),
    _t("nice -n 5 touch MARK", "launcher"),
    _t("nice -5 touch MARK", "launcher"),
    _t("env -i touch MARK", "launcher"),
    _t("env -u X touch MARK", "launcher"),
    _t("env -- touch MARK", "launcher"),
    _t("env X=1 touch MARK", "launcher"),
    _t("command touch MARK", "launcher"),
    _t("exec touch MARK", "launcher"),
    _t("flock MARK.lock touch MARK", "launcher"),
    _t("cgexec -g cpu:/ touch MARK", "launcher", "cgexec"),
    _t("sg root 'touch MARK'", "launcher", "sg", "root"),
    _t("sg root -c 'touch MARK'", "launcher", "sg", "root"),
    _t("find . -maxdepth 0 -exec touch MARK \\;", "find -exec"),
    _t("find . -maxdepth 0 -execdir touch MARK \\;", "find -exec"),
    _t("find . -maxdepth 0 -exec sh -c 'touch MARK' \\;", "find -exec"),
    _t("find . -maxdepth 0 -exec touch MARK {} +", "find -exec"),
    _t("find . -maxdepth 0 $(echo -exec touch MARK ';')", "find -exec"),
    _t("sh -c 'touch MARK'", "sh -c"),
    _t('bash -c "ls; touch MARK"', "sh -c"),
    _t("sh -c \"sh -c 'touch MARK'\"", "sh -c"),
    _t("sh -ec 'touch MARK'", "sh -c"),
    _t("busybox touch MARK", "launcher", "busybox"),
    _t("busybox sh -c 'touch MARK'", "launcher", "busybox"),
]

_CODE_ARGUMENTS = [
    # finding 2: programs whose arguments are code
    _t("awk 'BEGIN{system(\"touch MARK\")}'", "awk system()"),
    _t('awk \'BEGIN{print "touch MARK" | "sh"}\'', "awk system()"),
    _t("awk 'BEGIN{\"touch MARK\" | getline}'", "awk system()"),
    _t("awk -v c='touch MARK' 'BEGIN{system(c)}'", "awk system()"),
    _t("echo x | awk '{system(\"touch MARK\")}'", "awk system()"),
    _t("mawk 'BEGIN{system(\"touch MARK\")}'", "awk system()", "mawk"),
    _t("awk -F: 'BEGIN{system(\"touch MARK\")}'", "awk system()"),
    _w("awk 'BEGIN{print 1 > \"MARK\"}'", "awk system()"),
    _w("awk 'BEGIN{print NR>\"MARK\"}'", "awk system()"),
    _t("awk 'BEGIN{while ((\"touch MARK\" | getline l) > 0) print l}'", "awk system()"),
    _t("echo x | sed 's/x/touch MARK/e'", "sed e"),
    _t("echo touch MARK | sed e", "sed e"),
    _t("echo x | sed '1e touch MARK'", "sed e"),
    _t("echo x | sed -n 's/.*/touch MARK/ep'", "sed e"),
    _t("echo x | sed -e 's/x/touch MARK/e'", "sed e"),
    _t("echo x | sed --expression='s/x/touch MARK/e'", "sed e"),
    _t("echo x | sed -ne 's/x/touch MARK/ep'", "sed e"),
    _t("echo x | sed -E 's/(x)/touch MARK/e'", "sed e"),
    _t("echo x | sed 's|x|touch MARK|e'", "sed e"),
    _t("echo x | sed -e p -e 's/x/touch MARK/e'", "sed e"),
    _w("echo x | sed 'w MARK'", "sed w"),
    _w("echo x | sed -n 'w MARK'", "sed w"),
    _w("echo x | sed 's/x/y/w MARK'", "sed w"),
    _t("make -E 'all: ; touch MARK' all", "make --eval", "make"),
    _t("make --eval='all: ; touch MARK' all", "make --eval", "make"),
    _t(
        "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch MARK' a.txt",
        "tar --checkpoint-action",
    ),
    _t(
        "tar cf /dev/null --checkpoint=1 --checkpoint-action='exec=touch MARK' a.txt",
        "tar --checkpoint-action",
    ),
    _t("tar -cf x.tar --use-compress-program='touch MARK' a.txt 2>/dev/null", "tar -I"),
    _t("tar -c -I 'touch MARK' -f x.tar a.txt 2>/dev/null", "tar -I"),
    _t("tar -cf x.tar a.txt; tar -xf x.tar --to-command='touch MARK'", "tar --to-command"),
    _t("git -c alias.x='!touch MARK' x", "git -c"),
    _t("git -c alias.st='!touch MARK' st", "git -c"),
    _t("git -c core.fsmonitor='touch MARK' status >/dev/null", "git -c"),
    _t("git -c alias.x='!sh -c \"touch MARK\"' x", "git -c"),
    _t("git -C . -c alias.x='!touch MARK' x", "git -c"),
    _t("python3 -c 'import os; os.system(\"touch MARK\")'", "interpreter -c"),
    _t("python3 -Sc 'import os; os.system(\"touch MARK\")'", "interpreter -c"),
    _t("python3 -u -c 'import os; os.system(\"touch MARK\")'", "interpreter -c"),
    _t("python3 -W ignore -c 'import os; os.system(\"touch MARK\")'", "interpreter -c"),
    _w("python3 -c \"open('MARK', 'w')\"", "interpreter -c"),
    _t("perl -e 'system(\"touch MARK\")'", "interpreter -c", "perl"),
    _t("perl -le 'system \"touch MARK\"'", "interpreter -c", "perl"),
    _t("echo x | perl -ne 'system \"touch MARK\"'", "interpreter -c", "perl"),
    _t("perl -E 'system(\"touch MARK\")'", "interpreter -c", "perl"),
    _t("perl -M'POSIX;system(\"touch MARK\")' -e1", "interpreter -c", "perl"),
    _t('node -e \'require("child_process").execSync("touch MARK")\'', "interpreter -c", "node"),
    _t(
        'node --eval \'require("child_process").execSync("touch MARK")\'',
        "interpreter -c",
        "node",
    ),
    _t(
        'node -p \'require("child_process").execSync("touch MARK")\' >/dev/null',
        "interpreter -c",
        "node",
    ),
]

_SUBSTITUTIONS = [
    # text that becomes code or words at run time, and the commands the judge always read
    _t("touch MARK", "plain"),
    _rm("rm -rf victim", "plain"),
    _t("ls; touch MARK", "list"),
    _t("ls && touch MARK", "list"),
    _t("false || touch MARK", "list"),
    _t("ls | touch MARK", "list"),
    _t("touch MARK & wait", "list"),
    _t("(touch MARK)", "list"),
    _t("{ touch MARK; }", "list"),
    _t("if true; then touch MARK; fi", "compound"),
    _t("while true; do touch MARK; break; done", "compound"),
    _t("until false; do touch MARK; break; done", "compound"),
    _t("for i in 1; do touch MARK; done", "compound"),
    _t("case x in x) touch MARK;; esac", "compound"),
    _t("case $(touch MARK) in *) ;; esac", "compound"),
    _t("! touch MARK", "compound"),
    _t("echo $(touch MARK)", "substitution"),
    _t("echo `touch MARK`", "substitution"),
    _t('ls "$(touch MARK)"', "substitution"),
    _t("ls $(touch MARK)x", "substitution"),
    _t("echo $(echo $(touch MARK))", "substitution"),
    _t("echo $(( $(touch MARK) 1 ))", "substitution"),
    _t("for f in $(touch MARK); do :; done", "substitution"),
    _t("cat <<E\n$(touch MARK)\nE", "here-document"),
    _t("cat <<E\n`touch MARK`\nE", "here-document"),
    _t("cat <<E\n${x:-$(touch MARK)}\nE", "here-document"),
    _t("cat <<E\n${x:-`touch MARK`}\nE", "here-document"),
    _t("/usr/bin/touch MARK", "spelling"),
    _t("\\touch MARK", "spelling"),
    _t('t""ouch MARK', "spelling"),
    _t("'touch' MARK", "spelling"),
    _t('"to"uch MARK', "spelling"),
    _t("to\\uch MARK", "spelling"),
    _t("eval 'touch MARK'", "computed"),
    _t('eval "tou""ch MARK"', "computed"),
    _t("x=touch; $x MARK", "computed"),
    _t("$(echo touch) MARK", "computed"),
    _t("`echo touch` MARK", "computed"),
    _t("${x:-touch} MARK", "computed"),
    _t("f(){ touch MARK; }; f", "computed"),
    _t("trap 'touch MARK' EXIT", "computed"),
    _t("PATH=/usr/bin touch MARK", "computed"),
    _t('set -- touch MARK; "$@"', "computed"),
    _t("bash -c 'x=\"a[\\$(touch MARK)]\"; echo $((x))'", "computed"),
    _t("bash -c 'cat <(touch MARK)'", "substitution"),
    _t("bash -c 'echo $\"$(touch MARK)\"'", "substitution"),
    _t("bash -c 'x=\\$\\(touch\\ MARK\\); echo ${x@P}'", "computed"),
    # bash's own syntax that dash (/bin/sh) parses into other commands and redirections
    _rm("ls; [[ x || rm -rf victim ]]", "bash syntax dash reads otherwise"),
    _w("ls; [[ a > MARK ]]", "bash syntax dash reads otherwise"),
    _t("echo $'a\\' ; touch MARK # \\''", "bash syntax dash reads otherwise"),
    _t("ls <<E''\nE\ntouch MARK\nE''", "here-document end"),
    _t("ls <<E'' #\nE\ntouch MARK\nE''", "here-document end"),
    _t("ls <<$'X'\n$X\ntouch MARK\nX\n", "here-document end"),
    _t("echo hi &> out touch MARK", "bash syntax dash reads otherwise"),
    _t("ls \r#; touch MARK", "blank to the parser only"),
    _t("ls a\v#b; touch MARK", "blank to the parser only"),
    _t("ls <\f\ntouch MARK", "blank to the parser only"),
    # bash evaluates an array subscript in a name its builtins are given: `$(…)` in it runs
    _t("bash -c \"test -v 'a[\\$(touch MARK)]'\"", "bash name subscript", "bash"),
    _t("bash -c \"test ! -v 'a[\\$(touch MARK)]'\"", "bash name subscript", "bash"),
    _t("bash -c \"printf -v 'a[\\$(touch MARK)]' x\"", "bash name subscript", "bash"),
    _t("bash -c \"printf -v'a[\\$(touch MARK)]' x\"", "bash name subscript", "bash"),
    _t("bash -c \"sleep 0 & wait -p 'a[\\$(touch MARK)]' -n\"", "bash name subscript", "bash"),
    _t("bash -c \"ls; [ -v 'a[\\$(touch MARK)]' ]\"", "bash name subscript", "bash"),
    _t("bash -c \"ls; [[ -v 'a[\\$(touch MARK)]' ]]\"", "bash name subscript", "bash"),
    _t("bash -c \"ls; [[ 1 -lt 'a[\\$(touch MARK)]' ]]\"", "bash name subscript", "bash"),
    _t("bash -c \"ls {a['\\$(touch MARK)']}>/dev/null\"", "bash name subscript", "bash"),
    _w("ls > MARK", "redirection"),
    _w("echo > MARK", "redirection"),
    _w(": > MARK", "redirection"),
    _w("ls >> MARK", "redirection"),
    _w("ls 2> MARK", "redirection"),
    _w("cat a.txt > ./MARK", "redirection"),
    _w("echo x > src/../MARK", "redirection"),
    _w("echo x >| MARK", "redirection"),
    _w("find . -maxdepth 0 -fprint MARK", "find -fprint"),
    _w("find . -maxdepth 0 -fprint0 MARK", "find -fprint"),
    _w("find . -maxdepth 0 -fprintf MARK x", "find -fprint"),
    _w("find . -maxdepth 0 -fls MARK", "find -fprint"),
    _t("find . -maxdepth 0 -fprint MARK -exec touch MARK \\;", "find -fprint"),
]

_BENIGN = [
    _ok(command, "benign")
    for command in (
        "ls",
        "ls -la",
        "ls -la src",
        "ls *.txt",
        "ls src/*.py",
        "ls -d */",
        "ls | grep txt",
        "ls | wc -l",
        "ls -1 | head -3",
        "ls 2>/dev/null || echo none",
        "ls > /dev/null",
        "ls; echo done",
        "ls && git status",
        "ls || true",
        "(ls; pwd)",
        "{ ls; echo x; }",
        "pwd",
        "true",
        "echo hello",
        "echo 'a; touch MARK'",
        'echo "a | touch MARK"',
        "echo touch MARK",
        "printf '%s\\n' a b c",
        "printf 'touch MARK\\n'",
        "echo $HOME",
        'echo "$HOME"',
        "echo ${HOME}",
        "echo ${HOME:-/root}",
        'echo "${HOME:-x}"',
        "echo ${x:-default}",
        "echo ${x#prefix}",
        "echo ${x%%.*}",
        "echo ${#HOME}",
        "echo $((1 + 2))",
        "echo $?",
        "echo $#",
        "echo ~",
        "echo {a,b}",
        "echo a\\`b",
        "echo '`touch MARK`'",
        'echo "\\`touch MARK\\`"',
        "echo '$(touch MARK)'",
        "echo \\$\\(touch MARK\\)",
        "cat a.txt",
        "cat a.txt | head -5",
        "cat a.txt | sort | head -1",
        "cat < a.txt",
        "cat a.txt 2>&1",
        "cat <<'EOF'\n$(touch MARK)\n`touch MARK`\nEOF",
        "cat <<'EOF'\nhello\nEOF",
        "cat <<EOF\nhello world\nEOF",
        "head -n 3 a.txt",
        "tail -n 3 a.txt",
        "wc -l a.txt",
        "wc -c src/x.py",
        "grep -rn hello .",
        "grep -c x a.txt",
        "grep -l hello -r src",
        "grep 'a|b' a.txt",
        "grep -E '^(a|b)$' a.txt",
        "sort a.txt",
        "sort -u a.txt | wc -l",
        "git status",
        "git status --short",
        "git status -s && git diff",
        "git diff",
        "git diff HEAD -- src",
        "git log --oneline -5",
        "git log -1 --format=%H",
        "git status; git log -1",
        "cd src && ls",
        "cd src; ls -la",
        "cd .. && pwd",
        "sed -n 1,5p a.txt",
        "sed 's/hello/bye/g' a.txt",
        "sed -n 's/h/H/p' a.txt",
        "sed -e 's/a/b/' -e 's/c/d/' a.txt",
        "sed 's|/|_|g' a.txt",
        "sed -n '$p' a.txt",
        "sed '/^#/d' a.txt",
        "sed 2q a.txt",
        "sed -E 's/(h)ello/\\1i/' a.txt",
        "awk '{print $1}' a.txt",
        "awk -F: '{print NF}' a.txt",
        "awk 'NR==1' a.txt",
        "awk '{s+=length($0)} END{print s}' a.txt",
        "awk 'NR>1 {print $1}' a.txt",
        "awk '$1 > \"a\" {getline; print}' a.txt",
        "find . -name '*.py'",
        "find src -type f",
        "find . -maxdepth 1 -type d",
        "find . -name '*.txt' | wc -l",
        "find . -name '*.py' -exec grep -l hello {} +",
        "find . -newer a.txt -print",
        "echo a.txt | xargs cat",
        "echo a.txt | xargs -n1 wc -l",
        "find . -name '*.txt' | xargs grep -l hello",
        "find . -name '*.txt' -print0 | xargs -0 wc -l",
        "python3 -m pytest -q --co src 2>/dev/null || true",
        "timeout 5 ls",
        "nice ls",
        "env ls",
        "command ls",
        "sh -c 'ls; pwd'",
        'bash -c "git status"',
        "sh -c 'echo \"$0\"' x",
        "for f in a b; do echo $f; done",
        'for f in *.txt; do wc -l "$f"; done',
        "if [ -f a.txt ]; then cat a.txt; fi",
        "[ -d src ] && ls src",
        "test -f a.txt && echo yes",
        "while false; do ls; done",
        "case x in a) ls;; *) pwd;; esac",
        "ls -la | grep -v '^total' | sort -k5 | tail -3",
        "echo hi > build/out.txt",
        "echo 'x' | grep x",
        "echo -n x | wc -c",
        "grep hello 2>/dev/null a.txt",
        "ls >/dev/null -la src",
        'echo "$@" "${1}" "${arr[@]}"',
        "ls -la ${HOME%/}",
    )
]

CORPUS: tuple[Line, ...] = (
    *_PARAMETER_EXPANSIONS,
    *_NESTED_BACKQUOTES,
    *_XARGS,
    *_STDIN_SHELLS,
    *_SAME_LINE_SCRIPTS,
    *_LAUNCHERS,
    *_CODE_ARGUMENTS,
    *_SUBSTITUTIONS,
    *_BENIGN,
)


def prepare(directory: Path) -> None:
    """Lay out the scratch directory every line expects (a git repository, files, ``victim``)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(directory)], check=True)
    (directory / "a.txt").write_text("hello\nworld\n")
    (directory / "src").mkdir()
    (directory / "src" / "x.py").write_text("print('hello')\n")
    (directory / "build").mkdir()
    (directory / "victim").mkdir()
    (directory / "victim" / "keep").write_text("keep\n")
    git = ["git", "-C", str(directory), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.txt", "src"], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)


def effect_seen(directory: Path, line: Line) -> bool:
    """Whether the attack's effect happened in ``directory`` (``MARK`` made, ``victim`` gone)."""
    if "rm" in line.starts:
        return not (directory / "victim").exists()
    return (directory / "MARK").exists() or (directory / "build" / "MARK").exists()


def missing_needs(line: Line) -> list[str]:
    """What ``line`` needs that this machine lacks (a program, or running as root)."""
    missing = [n for n in line.needs if n != "root" and shutil.which(n) is None]
    if "root" in line.needs and os.geteuid() != 0:
        missing.append("root")
    return missing
