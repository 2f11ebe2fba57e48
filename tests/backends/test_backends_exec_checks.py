"""Exec checks on the confined ``local`` backend: deny rules enforced where programs start.

The oracle (``test_no_denied_program_runs_whatever_the_line``) runs the corpus of
``tests/runtime/exec_corpus.py`` (every way the issue lists to start a program the shell
judge cannot see, times five denied actions) through the real ``run_shell`` under
``allow-reversible`` and a policy denying ``touch``, ``rm`` and ``curl``. Two oracles,
both independent of the supervisor that does the checking:

- the kernel's own record of every ``execve``/``execveat`` of the sandbox: ``strace -ff``
  attached from the host to the sandbox's supervisor (ptrace from outside; nothing in the
  sandbox can see or stop it). Every exec that *succeeded* is judged with the runtime's
  rule matcher, program by program (no wrapper looked through): none may match a deny
  rule;
- effects: each denied action leaves a trace if it runs (a new ``hit-N`` file in the
  workspace, the canary removed, a fetched file), so the workspace must be exactly what
  it was, which also covers what a name cannot (copies, links, the loader, busybox).

Lines are batched (each line a file written with ``write_file``, run by ``sh`` from a
batch script that ``run_shell`` runs: every line reaches the sandbox, whatever the Gate
would say of it alone); the Gate's verdict on each line alone is recorded too.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from backends_helpers import chown_like_workspace

from ringfence import create_kernel
from ringfence.runtime import (
    ApprovalAnswer,
    Denied,
    GitMetadata,
    Posture,
    Rules,
    ScriptedApprover,
)
from ringfence.runtime.policy._matchers import Tri
from ringfence.runtime.policy._rules import parse_rule
from ringfence.runtime.shell._parts import SimpleCommand, Word

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))  # the corpora
from exec_corpus import DENY, corpus

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

BATCH = 45  # lines per run_shell call


def tree(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (but the corpus scripts): its kind and content digest."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel.startswith(".corpus"):
            continue
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def supervisor_pid() -> int:
    """The host pid of this process's sandbox supervisor (a descendant running the file)."""
    me = psutil.Process()
    for child in me.children(recursive=True):
        try:
            argv = child.cmdline()
            if "bwrap" not in argv[0] and any("_supervisor.py" in a for a in argv):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError("no sandbox supervisor below this process")


_CALL = re.compile(r"^(execve|execveat)\((.*)\) += (-?\d+)", re.S)
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _unescape(text: str) -> str:
    return codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape")


def traced_execs(prefix: Path) -> list[tuple[str, list[str], int]]:
    """(path, argv, result) of every execve/execveat strace saw, from its per-pid files."""
    found = []
    for file in prefix.parent.glob(prefix.name + ".*"):
        for line in file.read_text(errors="replace").splitlines():
            m = _CALL.match(line)
            if m is None:
                continue
            args, result = m.group(2), int(m.group(3))
            strings = []
            end = len(args)
            pos = 0
            for s in _STRING.finditer(args):  # the path, then argv up to its closing ]
                if "]" in args[pos : s.start()]:
                    end = pos
                    break
                strings.append(_unescape(s.group(1)))
                pos = s.end()
            assert end >= 0 and "..." not in args[:end], line  # nothing cut by strace
            if strings:  # (execveat's descriptor comes first, unquoted)
                found.append((strings[0], strings[1:], result))
    return found


def denied_by_rules(words: list[str], deny: tuple[str, ...] = DENY) -> str | None:
    """The deny rule the runtime's matcher finds for this one program run, no wrapper
    looked through (the independent judge of the trace)."""
    command = SimpleCommand(argv=tuple(Word(w) for w in words))
    for text in deny:
        rule = parse_rule(text, "deny")
        assert rule.command is not None
        if rule.command.match_command(command, deny_side=True) is Tri.YES:
            return text
    return None


def start_strace(pid: int, prefix: Path) -> subprocess.Popen[bytes]:
    tracer = subprocess.Popen(
        ["strace", "-ff", "-qq", "-s", "65535", "-e", "trace=execve,execveat", "-o", str(prefix),
         "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # attached once the supervisor shows a tracer
        status = Path(f"/proc/{pid}/status").read_text()
        if re.search(r"^TracerPid:\s+[1-9]", status, re.M):
            return tracer
        if tracer.poll() is not None:
            raise AssertionError(f"strace exited: {tracer.stderr.read().decode()}")  # type: ignore[union-attr]
        time.sleep(0.02)
    tracer.kill()
    raise AssertionError("strace did not attach within 20 s")


def batch_script(numbers: list[int]) -> str:
    """Each line from its own file (a syntax error stops that line alone), output cut."""
    listed = " ".join(str(n) for n in numbers)
    return (
        "exec </dev/null\n"
        f"for n in {listed}; do\n"
        '  echo "### $n"\n'
        "  sh .corpus/line-$n.sh 2>&1 | head -c 2000\n"
        "done\n"
        "echo '### end'\n"
    )


NEEDS_STRACE = pytest.mark.skipif(
    shutil.which("strace") is None and not os.environ.get("CI"),  # CI installs it (.ci/run)
    reason="strace is not installed (apt-get install strace)",
)


class OracleRun:
    """One corpus run: its lines through the real run_shell, strace's record, the results."""

    def __init__(self, lines: list[str], deny: tuple[str, ...]) -> None:
        self.lines = lines
        self.deny = deny
        self.outputs: list[dict[str, Any]] = []
        self.batches: list[list[int]] = []
        self.gate: dict[str, int] = {}
        self.execs: list[tuple[str, list[str], int]] = []
        self.refused_merges: list[str] = []  # batches whose git metadata writes were refused

    async def run(self, workspace: Path, trace: Path, batches: list[list[int]]) -> None:
        """Each line a file written with ``write_file``, run by ``sh`` from a batch script that
        ``run_shell`` runs, under allow-reversible, the deny rules and strace."""
        approver = ScriptedApprover(lambda _r: ApprovalAnswer.once("the oracle runs every line"))
        async with create_kernel(
            roots=[workspace], backend="local", rules=Rules(deny=self.deny),
            posture=Posture.ALLOW_REVERSIBLE, approver=approver,
        ) as k:  # fmt: skip
            assert k.registry.get("run_shell").exec_checked
            # The Gate's verdict on each line alone (the judge's business; recorded, not asserted).
            policy = k.rules.effective_policy
            assert policy is not None
            for line in self.lines:
                verdict = policy.evaluate("run_shell", {"command": line})
                effect = verdict.effect.value if verdict and verdict.effect else "posture"
                self.gate[effect] = self.gate.get(effect, 0) + 1
            started = await k.call("run_shell", {"command": "true"})
            assert started["exit_code"] == 0
            tracer = start_strace(supervisor_pid(), trace)
            try:
                for n, text in enumerate(self.lines):
                    await k.call(
                        "write_file", {"path": f".corpus/line-{n}.sh", "content": text + "\n"}
                    )
                for b, numbers in enumerate(batches):
                    name = f".corpus/batch-{b}.sh"
                    await k.call("write_file", {"path": name, "content": batch_script(numbers)})
                    try:
                        result = await k.call(
                            "run_shell", {"command": f"sh {name}", "timeout_seconds": 300}
                        )
                    except GitMetadata as exc:  # a git line touched .git: the rest was merged
                        self.refused_merges.append(exc.message)
                        continue
                    assert result["status"] == "exited", result
                    assert "### end" in result["stdout"], (result["stdout"][-500:], result)
                    self.outputs.append(result)
                    self.batches.append(numbers)
            finally:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(10)
                if tracer.stderr is not None:
                    tracer.stderr.close()
        self.execs = traced_execs(trace)

    def escaped(self) -> list[tuple[str, str, list[str]]]:
        """Every exec that succeeded and that a deny rule matches (the runtime's matcher)."""
        found = []
        for path, argv, result in self.execs:
            if result != 0:
                continue
            for words in ([path, *argv[1:]], argv):
                rule = denied_by_rules(words, self.deny) if words else None
                if rule is not None:
                    found.append((rule, path, argv))
                    break
        return found

    def denials(self) -> int:
        return sum(r.get("exec_denied", {}).get("denied", 0) for r in self.outputs)

    def summary(self) -> str:
        ran = sum(1 for *_x, r in self.execs if r == 0)
        return (
            f"{len(self.lines)} lines, {len(self.execs)} execs traced ({ran} ran), "
            f"{self.denials()} refused by the exec checks; the Gate alone: {self.gate}; "
            f"{len(self.refused_merges)} batch(es) with git metadata refused at the merge"
        )


def batched(numbers: list[int]) -> list[list[int]]:
    return [numbers[b : b + BATCH] for b in range(0, len(numbers), BATCH)]


@NEEDS_STRACE
async def test_no_denied_program_runs_whatever_the_line(workspace: Path, tmp_path: Path) -> None:
    """Every line of the corpus under allow-reversible and deny rules for touch, rm, curl:
    no exec of a denied program succeeds (strace's record, judged by the runtime's matcher),
    the workspace is unchanged (no hit file, the canary still there).

    Before exec checks (the supervisor without the notifier) the plain lines already fail
    this: ``sh .corpus/batch-0.sh`` runs ``touch`` and every wrapper's ``touch``."""
    canary = workspace / "canary"
    canary.write_text("still here\n")
    chown_like_workspace(workspace, canary)
    before = tree(workspace)
    lines = corpus()
    assert len(lines) >= 300
    oracle = OracleRun([line.render(str(workspace), n) for n, line in enumerate(lines)], DENY)
    (tmp_path / "trace").mkdir()
    await oracle.run(workspace, tmp_path / "trace" / "exec", batched(list(range(len(lines)))))
    assert sum(1 for *_x, r in oracle.execs if r == 0) > len(lines), "strace saw too few execs"
    assert oracle.escaped() == [], oracle.escaped()[:20]
    refused = [(p, a) for p, a, r in oracle.execs if r != 0]
    assert oracle.denials() > 0 and any(denied_by_rules([p, *a[1:]], DENY) for p, a in refused)
    after = tree(workspace)
    assert after == before, {k2: after.get(k2) for k2 in set(after) ^ set(before)}
    print("\n" + oracle.summary())


@NEEDS_STRACE
async def test_the_judges_corpus_starts_no_denied_program(workspace: Path, tmp_path: Path) -> None:
    """The shell judge's corpus (``tests/runtime/shell_corpus.py``) in the sandbox, under its
    own deny rules: no line starts ``touch`` or ``rm`` (strace), none leaves its effect
    (``MARK``, ``victim`` removed); and no benign line has an exec refused (exec checks
    must not break what the judge allows). Lines that write ``MARK`` without starting a
    program are the judge's (a redirection is not an exec) and are left out."""
    import shell_corpus

    owner = workspace.stat()
    os.chown(workspace, os.geteuid(), os.getegid())  # (git refuses a directory of another owner)
    shell_corpus.prepare(workspace)
    for path in [workspace, *workspace.rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
    attacks = [line for line in shell_corpus.CORPUS if line.starts]
    benign = [line for line in shell_corpus.CORPUS if line.benign]
    deny = tuple(d for d in shell_corpus.DENY if d.startswith("run_shell("))
    lines = [line.command for line in (*attacks, *benign)]
    oracle = OracleRun(lines, deny)
    (tmp_path / "trace").mkdir()
    batches = [
        *batched(list(range(len(attacks)))),
        *batched(list(range(len(attacks), len(lines)))),
    ]
    await oracle.run(workspace, tmp_path / "trace" / "exec", batches)
    assert oracle.escaped() == [], oracle.escaped()[:20]
    # `find -fprint MARK -exec touch MARK` writes MARK itself (a write, the judge's rule;
    # its touch is refused): that line's MARK is no exec's effect.
    writes_itself = [line for line in attacks if "-fprint MARK" in line.command]
    if (workspace / "MARK").exists() and writes_itself:
        (workspace / "MARK").unlink()
    seen = [line.command for line in attacks if shell_corpus.effect_seen(workspace, line)]
    assert seen == [], seen[:10]
    for result, numbers in zip(oracle.outputs, oracle.batches, strict=True):
        if numbers[0] >= len(attacks):  # a batch of benign lines
            assert "exec_denied" not in result, result["exec_denied"]
    print("\n" + oracle.summary())


def test_the_corpus_reads_back() -> None:
    """The corpus module is importable and as large as the oracle needs."""
    lines = corpus()
    assert len(lines) >= 300
    assert len({(line.template, line.action) for line in lines}) == len(lines)
    assert all("{P}" not in line.text and "{A}" not in line.text for line in lines)


# -- single attacks, each through the real run_shell ----------------------------------------


def approve_all() -> ScriptedApprover:
    return ScriptedApprover(lambda _r: ApprovalAnswer.once("the test runs the line"))


async def run_lines(
    ws: Path, lines: list[str], deny: tuple[str, ...] = DENY, **kw: Any
) -> list[dict[str, Any]]:
    kw.setdefault("posture", Posture.ALLOW_REVERSIBLE)
    async with create_kernel(
        roots=[ws], backend="local", rules=Rules(deny=deny), approver=approve_all(), **kw
    ) as k:
        out = []
        for line in lines:
            args = {"command": line} if isinstance(line, str) else line
            out.append(await k.call("run_shell", args))
        return out


def denied_rules(result: dict[str, Any]) -> list[str]:
    return [d["rule"] for d in result.get("exec_denied", {}).get("denials", [])]


async def test_a_script_whose_interpreter_is_denied_is_refused(workspace: Path) -> None:
    """``#!/usr/bin/touch`` makes the kernel run touch with the script's path: before exec
    checks the hit file appeared (the Gate reads only ``./s hit``)."""
    (workspace / "s").write_text("#!/usr/bin/touch\n")
    (workspace / "s").chmod(0o755)
    (result,) = await run_lines(workspace, ["./s hit"])
    assert not (workspace / "hit").exists()
    assert denied_rules(result) == ["deny:run_shell(touch *)"]
    assert result["exec_denied"]["denials"][0]["program"] == "/usr/bin/touch"


async def test_argv_patterns_are_matched_at_exec(workspace: Path) -> None:
    """A rule over arguments (``rm -f *``) refuses that argv at exec and nothing else:
    ``rm other`` (allowed by the rules) runs, ``rm -f canary`` behind eval does not."""
    for name in ("canary", "other"):
        (workspace / name).write_text("x\n")
    chown_like_workspace(workspace, workspace / "canary", workspace / "other")
    (result,) = await run_lines(
        workspace, ["eval 'r''m -f canary'; eval 'r''m other'"], deny=("run_shell(rm -f *)",)
    )
    assert (workspace / "canary").exists() and not (workspace / "other").exists()
    assert set(denied_rules(result)) == {"deny:run_shell(rm -f *)"}


async def test_a_rule_on_the_calls_cwd_applies_to_those_calls_only(workspace: Path) -> None:
    """``run_shell(cwd=sub/**, command=touch *)``: execs are checked against the rules this
    call meets (its cwd), as the Gate would judge them."""
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    deny = ("run_shell(cwd=sub/**, command=touch *)",)
    results = await run_lines(
        workspace,
        [{"command": "eval 'tou''ch in-sub'", "cwd": "sub"}, {"command": "eval 'tou''ch top'"}],
        deny=deny,
    )
    assert not (workspace / "sub" / "in-sub").exists() and denied_rules(results[0])
    assert (workspace / "top").exists() and "exec_denied" not in results[1]


async def test_a_cwd_rule_holds_for_the_directory_a_linked_cwd_reaches(workspace: Path) -> None:
    """``cwd=lnk`` with ``lnk -> sub`` (a link the agent's own command made) starts the
    command in ``sub``: ``run_shell(cwd=sub/**, command=touch *)`` was judged against the
    spelling ``lnk``, neither the Gate nor the exec checks applied it, and both lines
    left their file in ``sub``. Now the cwd is judged as the directory it reaches."""
    (workspace / "sub").mkdir()
    chown_like_workspace(workspace, workspace / "sub")
    deny = ("run_shell(cwd=sub/**, command=touch *)",)
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny),
        posture=Posture.ALLOW_REVERSIBLE, approver=approve_all(),
    ) as k:  # fmt: skip
        made = await k.call("run_shell", {"command": "ln -s sub lnk && mkdir sub/d"})
        assert made["exit_code"] == 0 and (workspace / "lnk").is_symlink(), (made["stderr"], made)
        hidden = await k.call("run_shell", {"command": "eval 'tou''ch hit-1'", "cwd": "lnk"})
        deeper = await k.call("run_shell", {"command": "eval 'tou''ch hit-2'", "cwd": "lnk/d"})
        with pytest.raises(Denied) as plain:
            await k.call("run_shell", {"command": "touch hit-3", "cwd": "lnk"})
    assert sorted(p.name for p in (workspace / "sub").rglob("*")) == ["d"]
    assert denied_rules(hidden) and denied_rules(deeper), (hidden, deeper)
    assert plain.value.details.get("rule") == "deny:run_shell(cwd=sub/**, command=touch *)"
    assert plain.value.field == "cwd"
    assert "resolves to" in plain.value.message


async def test_a_cwd_or_timeout_rule_holds_for_a_call_that_leaves_the_argument_out(
    workspace: Path,
) -> None:
    """A matcher on an argument the call does not hold never matched: a call that left out
    ``cwd`` (the command starts in the first root) passed ``run_shell(cwd=!src/**, command=rm
    *)`` at the Gate and at the exec checks, and one that left out ``timeout_seconds`` (it
    runs for 120 s) passed ``run_shell(timeout_seconds=100..)``: ``rm keep`` removed the
    file. Now a left-out argument is judged as the value the command runs with."""
    (workspace / "src").mkdir()
    chown_like_workspace(workspace, workspace / "src")
    (workspace / "keep").write_text("kept\n")
    deny = ("run_shell(cwd=!src/**, command=rm *)", "run_shell(timeout_seconds=100..)")
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny),
        posture=Posture.UNRESTRICTED, approver=approve_all(),
    ) as k:  # fmt: skip
        with pytest.raises(Denied) as plain:
            await k.call("run_shell", {"command": "rm keep", "timeout_seconds": 60})
        hidden = await k.call("run_shell", {"command": "eval 'r''m keep'", "timeout_seconds": 60})
        with pytest.raises(Denied) as slow:
            await k.call("run_shell", {"command": "touch slow", "cwd": "src"})
        inside = await k.call(
            "run_shell", {"command": "touch made", "cwd": "src", "timeout_seconds": 60}
        )
    assert (workspace / "keep").read_text() == "kept\n"
    assert plain.value.details.get("rule") == "deny:run_shell(cwd=!src/**, command=rm *)"
    assert denied_rules(hidden) and set(denied_rules(hidden)) == {
        "deny:run_shell(cwd=!src/**, command=rm *)"
    }, hidden
    assert slow.value.details.get("rule") == "deny:run_shell(timeout_seconds=100..)"
    assert not (workspace / "src" / "slow").exists()
    # the rules do not reach past what they name
    assert inside["exit_code"] == 0 and (workspace / "src" / "made").exists(), inside


@pytest.mark.skipif(os.geteuid() != 0, reason="binds a directory on the host (root)")
@pytest.mark.parametrize("change_sets", [True, False])
async def test_a_program_is_looked_at_again_where_another_mount_shows_written_files(
    workspace: Path, change_sets: bool
) -> None:
    """The supervisor remembers a program found only in read-only places (its identity,
    and the argv let go). Which places were read-only was a list of names (the roots,
    /tmp, /var/tmp, /dev): the same files shown by another mount (here a bind of the
    workspace made on the host; for a session run by a developer's own uid, the
    overlays' upper directories, bound into the sandbox) counted as read-only, so a copy
    of ``true`` run there was remembered, and the copy of ``touch`` written over it
    later ran past ``run_shell(touch *)`` with the same argv. The kernel's mount table
    now says what can change."""
    # (outside /tmp, /mnt and the homes, which the sandbox hides behind directories of its own)
    alias = Path(tempfile.mkdtemp(prefix="ringfence-test-alias-", dir="/"))
    subprocess.run(["mount", "--bind", str(workspace), str(alias)], check=True)
    try:
        lines = [
            "cp /usr/bin/true p",
            f"{alias}/p hit",
            "cp /usr/bin/touch p",
            f"{alias}/p hit",
        ]
        results = await run_lines(workspace, lines, change_sets=change_sets)
    finally:
        subprocess.run(["umount", "-l", str(alias)], check=False)
        alias.rmdir()
    assert results[1]["exit_code"] == 0 and "exec_denied" not in results[1], (
        results[1]["stderr"],
        results[1],
    )
    assert not (workspace / "hit").exists(), results[3]
    assert denied_rules(results[3]) == ["deny:run_shell(touch *)"], results[3]


async def test_fexecve_and_relative_paths_are_resolved_like_the_kernel(workspace: Path) -> None:
    """``execveat(fd, "", AT_EMPTY_PATH)`` (fexecve) and a path relative to the process's
    working directory name the same denied file."""
    code = (
        "import os; fd = os.open('/usr/bin/touch', os.O_RDONLY); "
        "os.execve(fd, ['x', 'hit-fd'], dict(os.environ))"
    )
    results = await run_lines(
        workspace, [f'python3 -c "{code}"', f"cd /usr/bin && p=./tou; ${{p}}ch {workspace}/hit-rel"]
    )
    assert not (workspace / "hit-fd").exists() and not (workspace / "hit-rel").exists()
    assert all(denied_rules(r) == ["deny:run_shell(touch *)"] for r in results), results


async def test_denials_are_in_the_event_stream(workspace: Path, tmp_path: Path) -> None:
    """Each command whose execs were refused leaves one ``exec_denied`` event naming them."""
    events = tmp_path / "events.jsonl"
    await run_lines(workspace, ["x=tou; ${x}ch hit"], events_path=events)
    records = [json.loads(line) for line in events.read_text().splitlines()]
    denied = [r for r in records if r.get("kind") == "exec_denied"]
    assert len(denied) == 1, [r.get("kind") for r in records]
    assert "touch" in json.dumps(denied[0])


async def test_rules_added_during_the_session_hold_at_the_next_command(workspace: Path) -> None:
    """The rules go to the sandbox with each command that has different ones."""
    async with create_kernel(
        roots=[workspace], backend="local", posture=Posture.ALLOW_REVERSIBLE,
        approver=approve_all(),
    ) as k:  # fmt: skip
        first = await k.call("run_shell", {"command": "eval 'tou''ch one'"})
        k.add_rules("test", Rules(deny=("run_shell(touch *)",)))
        second = await k.call("run_shell", {"command": "eval 'tou''ch two'"})
    assert (workspace / "one").exists() and "exec_denied" not in first
    assert not (workspace / "two").exists() and denied_rules(second)


async def test_exec_checks_without_change_sets(workspace: Path) -> None:
    """``--no-change-sets``: the command's child is forked (not posix_spawn'd) so it can
    install the filter; the same refusal."""
    (result,) = await run_lines(workspace, ["x=tou; ${x}ch hit"], change_sets=False)
    assert not (workspace / "hit").exists() and denied_rules(result)


async def test_only_a_backend_that_checks_execs_claims_it(workspace: Path) -> None:
    """exec_checked: the confined local backend (unless switched off); never host."""
    async with create_kernel(roots=[workspace], backend="local") as k:
        assert k.registry.get("run_shell").exec_checked
    async with create_kernel(
        roots=[workspace], backend="local", backend_options={"exec_checks": False}
    ) as k:
        assert not k.registry.get("run_shell").exec_checked
    async with create_kernel(roots=[workspace], backend="host", change_sets=False) as k:
        assert not k.registry.get("run_shell").exec_checked


RACE = """
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
allowed, denied = b"/usr/bin/true\\0\\0", b"/usr/bin/touch\\0"
path = ctypes.create_string_buffer(allowed, 16)
argv = (ctypes.c_char_p * 3)(b"x", sys.argv[1].encode(), None)
def flip():
    while True:
        ctypes.memmove(path, denied, 15)
        ctypes.memmove(path, allowed, 15)
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        threading.Thread(target=flip, daemon=True).start()
        for _ in range(300):
            libc.execve(path, argv, None)
        os._exit(3)
    os.waitpid(pid, 0)
    if os.path.exists(sys.argv[1]):
        print("the race was won")
        break
"""


async def test_a_thread_rewriting_the_path_cannot_run_a_denied_program(workspace: Path) -> None:
    """TOCTOU: a second thread flips the path between ``/usr/bin/true`` and ``/usr/bin/touch``
    while the first execs it; the supervisor reads one, the kernel may read the other. The
    Landlock backstop refuses to execute touch whatever the supervisor read. Without it
    (the notifier alone) the race was won within a few forks here, on every run."""
    (workspace / "race.py").write_text(RACE)
    hit = workspace / "hit"
    (result,) = await run_lines(
        workspace, [{"command": f"python3 race.py {hit} 60", "timeout_seconds": 120}]
    )
    assert "the race was won" not in result["stdout"], result
    assert not hit.exists()
    assert result["exec_denied"]["denied"] > 0  # the notifier refused the reads of touch


async def test_a_rule_naming_programs_by_a_path_glob_knows_their_copies(workspace: Path) -> None:
    """`run_shell(/usr/bin/tou* *)` names /usr/bin/touch as `run_shell(touch *)` does, and a
    copy of it under another name is the same program; the identity by inode and content
    looked only for names a glob without a `/` matched, so the copy ran."""
    (result,) = await run_lines(
        workspace, ["cp /usr/bin/touch ./t && ./t hit"], deny=("run_shell(/usr/bin/tou* *)",)
    )
    assert not (workspace / "hit").exists(), result
    assert denied_rules(result) == ["deny:run_shell(/usr/bin/tou* *)"], result


async def test_a_denied_script_handed_to_its_interpreter_is_refused(workspace: Path) -> None:
    """`run_shell(gunzip *)`, and gunzip is a `#!/bin/sh` script: `sh /usr/bin/gunzip f.gz`
    made the kernel execute sh, which ran gunzip's own lines, and f.gz was uncompressed. The
    script handed to its own interpreter is now checked as the script; reading it is not."""
    with open("/usr/bin/gunzip", "rb") as f:
        if f.read(2) != b"#!":
            pytest.skip("gunzip is not a #! script here")
    import gzip

    (workspace / "f.gz").write_bytes(gzip.compress(b"hi\n"))
    lines = ["sh /usr/bin/gunzip f.gz", "bash -e /usr/bin/gunzip -k f.gz", "cat /usr/bin/gunzip"]
    first, second, control = await run_lines(workspace, lines, deny=("run_shell(gunzip *)",))
    assert (workspace / "f.gz").exists() and not (workspace / "f").exists()
    assert set(denied_rules(first)) == {"deny:run_shell(gunzip *)"}, first
    assert set(denied_rules(second)) == {"deny:run_shell(gunzip *)"}, second
    assert control["exit_code"] == 0 and "gzip" in control["stdout"], control


def _linked_shell_script() -> tuple[str, str] | None:
    """A link on ``/usr/bin`` to a ``#!/bin/sh`` script of another name (``bzcmp ->
    bzdiff``, ``lzcmp -> xzdiff``): the link's name and the script's real path."""
    for entry in sorted(os.listdir("/usr/bin")):
        link = f"/usr/bin/{entry}"
        real = os.path.realpath(link)
        if not os.path.islink(link) or os.path.basename(real) == entry:
            continue
        try:
            with open(real, "rb") as f:
                head = f.readline()
        except OSError:
            continue
        if re.fullmatch(rb"#! ?/bin/sh\s*", head):
            return entry, real
    return None


async def test_a_denied_script_handed_to_its_interpreter_under_any_name_is_refused(
    workspace: Path,
) -> None:
    """The script a rule names is known by inode, whatever the word that hands it to its
    interpreter: before, only a word spelling the rule's name was looked at, so the script's
    real path behind the link on PATH (`node /usr/lib/node_modules/npm/bin/npm-cli.js` past
    `run_shell(npm *)`, `sh /usr/bin/bzdiff` past `run_shell(bzcmp *)`), another link to it
    and `/dev/stdin` ran it; and the script as the interpreter's standard input (`sh -s f.gz
    < /usr/bin/gunzip`) uncompressed f.gz past `run_shell(gunzip *)`."""
    found = _linked_shell_script()
    with open("/usr/bin/gunzip", "rb") as f:
        if found is None or f.read(2) != b"#!":
            pytest.skip("no linked #!/bin/sh script, or gunzip is no script, here")
    link, real = found
    import gzip

    (workspace / "f.gz").write_bytes(gzip.compress(b"hi\n"))
    chown_like_workspace(workspace, workspace / "f.gz")
    deny = (f"run_shell({link} *)", "run_shell(gunzip *)", "run_shell(npm *)")
    lines = [
        f"sh {real} --version; echo rc=$?",
        f"ln -s {real} /tmp/other; sh /tmp/other --version; echo rc=$?",
        f"sh /dev/stdin --version < {real}; echo rc=$?",
        "sh -s f.gz < /usr/bin/gunzip; echo rc=$?",
        "sh -c 'echo fine'; cat /usr/bin/gunzip | head -c 2",
    ]
    npm = os.path.realpath("/usr/bin/npm")
    if shutil.which("node") and os.path.basename(npm) != "npm":
        lines.append(f"node {npm} --version; echo rc=$?")
    results = await run_lines(workspace, lines, deny=deny)
    for result in results[:3]:
        assert set(denied_rules(result)) == {f"deny:run_shell({link} *)"}, result
        assert result["stdout"] == "rc=126\n", result  # the script printed nothing
    assert set(denied_rules(results[3])) == {"deny:run_shell(gunzip *)"}, results[3]
    assert (workspace / "f.gz").exists() and not (workspace / "f").exists()
    control = results[4]
    assert control["stdout"] == "fine\n#!" and "exec_denied" not in control, control
    if len(results) > 5:
        assert set(denied_rules(results[5])) == {"deny:run_shell(npm *)"}, results[5]
        assert results[5]["stdout"] == "rc=126\n", results[5]


async def test_a_copy_of_a_denied_scripts_interpreter_is_that_interpreter(workspace: Path) -> None:
    """The interpreter is known by what its file is, like a denied program: before, only
    its name was, so a copy of dash at /tmp/x (`/tmp/x /usr/bin/gunzip f.gz`) uncompressed
    f.gz past `run_shell(gunzip *)`; a copy of it running anything else still runs."""
    with open("/usr/bin/gunzip", "rb") as f:
        if f.read(2) != b"#!":
            pytest.skip("gunzip is not a #! script here")
    import gzip

    (workspace / "f.gz").write_bytes(gzip.compress(b"hi\n"))
    chown_like_workspace(workspace, workspace / "f.gz")
    lines = [
        "cp /bin/sh /tmp/x && /tmp/x /usr/bin/gunzip f.gz; echo rc=$?",
        "cp /bin/sh /tmp/x && /tmp/x -c 'echo fine'",
    ]
    denied, control = await run_lines(workspace, lines, deny=("run_shell(gunzip *)",))
    assert (workspace / "f.gz").exists() and not (workspace / "f").exists()
    assert set(denied_rules(denied)) == {"deny:run_shell(gunzip *)"}, denied
    assert denied["stdout"] == "rc=126\n", denied
    assert control["stdout"] == "fine\n" and "exec_denied" not in control, control


async def test_a_denied_script_after_many_interpreter_options_is_refused(workspace: Path) -> None:
    """Every word of argv may be the script: only the first 16 were looked at, so `sh` with
    17 `-e` before `/usr/bin/gunzip f.gz` uncompressed f.gz past `run_shell(gunzip *)`."""
    with open("/usr/bin/gunzip", "rb") as f:
        if f.read(2) != b"#!":
            pytest.skip("gunzip is not a #! script here")
    import gzip

    (workspace / "f.gz").write_bytes(gzip.compress(b"hi\n"))
    chown_like_workspace(workspace, workspace / "f.gz")
    line = "sh " + "-e " * 40 + "/usr/bin/gunzip f.gz; echo rc=$?"
    (result,) = await run_lines(workspace, [line], deny=("run_shell(gunzip *)",))
    assert (workspace / "f.gz").exists() and not (workspace / "f").exists()
    assert set(denied_rules(result)) == {"deny:run_shell(gunzip *)"}, result
    assert result["stdout"] == "rc=126\n", result


@pytest.mark.parametrize("change_sets", [True, False])
async def test_a_rule_naming_a_workspace_script_by_relative_path_knows_it_by_any_path(
    workspace: Path, change_sets: bool
) -> None:
    """`run_shell(scripts/deploy.sh *)` names the file below the root: before, it was looked
    up once, relative to the supervisor's own directory, so only the word spelled as the
    rule was refused, and `./scripts/deploy.sh`, `$PWD/scripts/deploy.sh`, `cd scripts &&
    ./deploy.sh`, `sh ./scripts/deploy.sh` and a copy all ran it (the Gate reads none of
    them as the rule's word either). It is looked up at every exec, so a script the same
    command writes counts too."""
    (workspace / "scripts").mkdir()
    chown_like_workspace(workspace, workspace / "scripts")
    write = "printf '#!/bin/sh\\ntouch \"$1\"\\n' > scripts/deploy.sh; chmod +x scripts/deploy.sh"
    lines = [
        f"{write}; ./scripts/deploy.sh hit-0; echo rc=$?",
        "./scripts/deploy.sh hit-1; echo rc=$?",
        "$PWD/scripts/deploy.sh hit-2; echo rc=$?",
        "cd scripts && ./deploy.sh ../hit-3; echo rc=$?",
        "sh ./scripts/deploy.sh hit-4; echo rc=$?",
        "cp scripts/deploy.sh /tmp/d && /tmp/d hit-5; echo rc=$?",
        "sh -c 'echo ok'",
    ]
    deny = ("run_shell(scripts/deploy.sh *)",)
    results = await run_lines(workspace, lines, deny=deny, change_sets=change_sets)
    assert sorted(p.name for p in workspace.iterdir()) == ["scripts"]
    for result in results[:-1]:
        assert set(denied_rules(result)) == {"deny:run_shell(scripts/deploy.sh *)"}, result
        assert result["stdout"].endswith("rc=126\n"), result
    assert results[-1]["stdout"] == "ok\n" and "exec_denied" not in results[-1], results[-1]


async def test_a_rule_naming_workspace_scripts_by_a_relative_glob_knows_them_by_path(
    workspace: Path,
) -> None:
    """`run_shell(scripts/*.sh *)`: a glob with a `/` was looked for on PATH only, so every
    way but the word as the Gate reads it (`cd scripts && ./deploy.sh`, `$PWD/scripts/…`)
    ran a script below the root; a program below a root now goes by its path there too."""
    (workspace / "scripts").mkdir()
    script = workspace / "scripts" / "deploy.sh"
    script.write_text('#!/bin/sh\ntouch "$1"\n')
    script.chmod(0o755)
    chown_like_workspace(workspace, workspace / "scripts", script)
    lines = [
        "cd scripts && ./deploy.sh ../hit-1; echo rc=$?",
        "$PWD/scripts/deploy.sh hit-2; echo rc=$?",
        "sh -c 'echo ok'",
    ]
    results = await run_lines(workspace, lines, deny=("run_shell(scripts/*.sh *)",))
    assert sorted(p.name for p in workspace.iterdir()) == ["scripts"]
    for result in results[:-1]:
        assert set(denied_rules(result)) == {"deny:run_shell(scripts/*.sh *)"}, result
        assert result["stdout"] == "rc=126\n", result
    assert results[-1]["stdout"] == "ok\n" and "exec_denied" not in results[-1], results[-1]


async def test_a_denied_script_named_by_an_interpreters_option_value_is_refused(
    workspace: Path,
) -> None:
    """`node --require=/usr/lib/node_modules/npm/bin/npm-cli.js -e 1` loads npm's own script
    (node skips its `#!` line) and ran npm past `run_shell(npm *)` (it printed its usage):
    the value of an `--option=value` word is looked at like a word of its own."""
    npm = os.path.realpath("/usr/bin/npm")
    if not shutil.which("node") or not os.path.isfile(npm):
        pytest.skip("node and npm are not installed here")
    lines = [f"node --require={npm} -e 1; echo rc=$?", "node -e 'console.log(2)'"]
    denied, control = await run_lines(workspace, lines, deny=("run_shell(npm *)",))
    assert set(denied_rules(denied)) == {"deny:run_shell(npm *)"}, denied
    assert denied["stdout"] == "rc=126\n", denied  # npm printed no usage
    assert control["stdout"] == "2\n" and "exec_denied" not in control, control


async def test_a_copy_of_a_denied_script_handed_to_its_interpreter_is_refused(
    workspace: Path,
) -> None:
    """A denied script's exact bytes under another name are that script, handed to its
    interpreter as a word or on standard input, as they are when exec'd: before, a copy
    named /tmp/g (`sh /tmp/g f.gz`, `sh -s f.gz < /tmp/g`) uncompressed f.gz past
    `run_shell(gunzip *)`."""
    with open("/usr/bin/gunzip", "rb") as f:
        if f.read(2) != b"#!":
            pytest.skip("gunzip is not a #! script here")
    import gzip

    (workspace / "f.gz").write_bytes(gzip.compress(b"hi\n"))
    chown_like_workspace(workspace, workspace / "f.gz")
    lines = [
        "cp /usr/bin/gunzip /tmp/g && sh /tmp/g f.gz; echo rc=$?",
        "cp /usr/bin/gunzip /tmp/g && sh -s f.gz < /tmp/g; echo rc=$?",
    ]
    results = await run_lines(workspace, lines, deny=("run_shell(gunzip *)",))
    assert (workspace / "f.gz").exists() and not (workspace / "f").exists()
    for result in results:
        assert set(denied_rules(result)) == {"deny:run_shell(gunzip *)"}, result
        assert result["stdout"] == "rc=126\n", result


async def test_a_denied_name_in_a_writable_path_directory_is_looked_up_at_each_exec(
    workspace: Path,
) -> None:
    """With `PATH` holding a directory commands write (`$PWD/bin`, as `node_modules/.bin`
    is), `run_shell(deploy *)` names what `bin/deploy` is when the exec happens: it was
    looked up once, at the first command, so a `deploy` made later was known by its name
    alone and its script, handed to `sh` by its real path or copied to /tmp/x, ran."""
    env = {"PATH": f"{workspace}/bin:/usr/local/bin:/usr/bin:/bin"}
    make = (
        "mkdir -p bin tools && printf '#!/bin/sh\\ntouch \"$1\"\\n' > tools/d.sh && "
        "chmod +x tools/d.sh && ln -s ../tools/d.sh bin/deploy && echo made"
    )
    lines = [
        make,
        "sh tools/d.sh hit-1; echo rc=$?",
        "cp tools/d.sh /tmp/x && /tmp/x hit-2; echo rc=$?",
        "sh -c 'echo fine'",
    ]
    results = await run_lines(
        workspace,
        [{"command": line, "env": env} for line in lines],
        deny=("run_shell(deploy *)",),
    )
    assert results[0]["stdout"] == "made\n", results[0]
    assert sorted(p.name for p in workspace.iterdir()) == ["bin", "tools"]
    for result in results[1:3]:
        assert set(denied_rules(result)) == {"deny:run_shell(deploy *)"}, result
        assert result["stdout"] == "rc=126\n", result
    assert results[3]["stdout"] == "fine\n" and "exec_denied" not in results[3], results[3]


async def test_a_program_valgrind_runs_is_checked_like_the_loaders(workspace: Path) -> None:
    """valgrind's tool maps the program its argv names and runs it in its own process (no
    exec of it), so `valgrind /usr/bin/touch hit` ran touch past `run_shell(touch *)`; a
    valgrind tool (or its launcher, or a copy) is now checked like the dynamic loader: the
    program it is given is an invocation too."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed here")
    lines = [
        "valgrind -q /usr/bin/touch hit-1; echo rc=$?",
        "cp /usr/bin/touch /tmp/t && valgrind -q --tool=none /tmp/t hit-2; echo rc=$?",
        "valgrind -q --tool=none /bin/echo fine",
    ]
    results = await run_lines(workspace, lines)
    assert not list(workspace.glob("hit-*"))
    for result in results[:2]:
        assert set(denied_rules(result)) == {"deny:run_shell(touch *)"}, result
        assert result["stdout"] == "rc=126\n", result
    assert results[2]["stdout"] == "fine\n" and "exec_denied" not in results[2], results[2]


# The same race for a denied program with a second hard link beside it (perl and
# perl5.36.0 here; bzip2, bunzip2 and bzcat; gunzip and uncompress): the backstop granted
# EXECUTE on every other entry of /usr/bin, the second link among them, and a Landlock
# rule belongs to the inode, so the denied file itself was granted.
RACE_LINK = """
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
allowed, denied = sys.argv[3].encode() + b"\\0", sys.argv[4].encode() + b"\\0"
assert len(allowed) == len(denied)
path = ctypes.create_string_buffer(allowed, len(allowed) + 1)
argv = (ctypes.c_char_p * 4)(b"x", b"-e", ("open F, '>', '%s'" % sys.argv[1]).encode(), None)
def flip():
    while True:
        ctypes.memmove(path, denied, len(denied))
        ctypes.memmove(path, allowed, len(allowed))
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        threading.Thread(target=flip, daemon=True).start()
        for _ in range(300):
            libc.execve(path, argv, None)
        os._exit(3)
    os.waitpid(pid, 0)
    if os.path.exists(sys.argv[1]):
        print("the race was won")
        break
"""


def _hard_linked_perl() -> tuple[str, str] | None:
    """``/usr/bin/perl`` and a same-length allowed program, when perl has a second link in
    ``/usr/bin``; None otherwise."""
    try:
        st = os.stat("/usr/bin/perl")
    except OSError:
        return None
    if st.st_nlink < 2:
        return None
    with os.scandir("/usr/bin") as entries:
        if any(e.name != "perl" and e.inode() == st.st_ino for e in entries):
            return "/usr/bin/true", "/usr/bin/perl"
    return None


async def test_a_denied_program_with_a_second_hard_link_keeps_its_backstop(
    workspace: Path,
) -> None:
    """Under `run_shell(perl *)`, a thread flips the exec path between /usr/bin/true and
    /usr/bin/perl; the kernel's Landlock backstop must refuse perl whatever the supervisor
    read. It granted perl's inode through its other link (perl5.36.0), and perl ran."""
    pair = _hard_linked_perl()
    if pair is None:
        pytest.skip("/usr/bin/perl has no second hard link in /usr/bin here")
    (workspace / "race.py").write_text(RACE_LINK)
    hit = workspace / "hit"
    (result,) = await run_lines(
        workspace,
        [{"command": f"python3 race.py {hit} 60 {pair[0]} {pair[1]}", "timeout_seconds": 120}],
        deny=("run_shell(perl *)",),
    )
    assert "the race was won" not in result["stdout"], result
    assert not hit.exists()
    assert result["exec_denied"]["denied"] > 0  # the notifier refused the reads of perl


PROBE_FAILS = """
import ctypes, struct, sys, trio
from ringfence import create_kernel
from ringfence.runtime import ApprovalAnswer, Posture, Rules, ScriptedApprover, Unavailable

# A seccomp filter with a listener, held open here: the kernel allows one listener per
# filter chain, so no process below this one (the sandbox's included) can add its own.
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ins = lambda c, t, f, k: struct.pack("<HBBI", c, t, f, k)
prog = ins(0x20, 0, 0, 0) + ins(0x15, 0, 1, 1000) + ins(6, 0, 0, 0x7FC00000) + ins(6, 0, 0, 0x7FFF0000)
buf = ctypes.create_string_buffer(prog, len(prog))
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
libc.prctl(38, 1, 0, 0, 0)
listener = libc.syscall(317, 1, 8, ctypes.byref(fprog))
assert listener >= 0, ctypes.get_errno()

async def main(ws):
    approver = ScriptedApprover(lambda _r: ApprovalAnswer.once("yes"))
    async with create_kernel(roots=[ws], backend="local", rules=Rules(deny=("run_shell(touch *)",)),
                             posture=Posture.ALLOW_REVERSIBLE, approver=approver) as k:
        assert k.registry.get("run_shell").exec_checked
        try:
            await k.call("run_shell", {"command": "x=tou; ${x}ch hit"})
        except Unavailable as exc:
            print("REFUSED", exc.message)
        print("CLAIM", k.registry.get("run_shell").exec_checked)
        r = await k.call("run_shell", {"command": "echo later"})
        print("LATER", r["stdout"].strip(), "exec_denied" in r)

trio.run(main, sys.argv[1])
"""


async def test_a_session_that_cannot_check_execs_fails_closed(workspace: Path) -> None:
    """The probe fails (here: the kernel process already holds a seccomp listener, so no
    process below it can install one): the call that deny rules apply to is refused with
    ``unavailable`` naming exec checks, nothing ran, and ``run_shell`` stops claiming
    ``exec_checked`` (the Gate then judges lines on their text alone)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE_FAILS, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REFUSED" in out.stdout and "cannot check execs" in out.stdout, out.stdout
    assert "Device or resource busy" in out.stdout, out.stdout  # EBUSY: the reason, named
    assert "CLAIM False" in out.stdout and "LATER later False" in out.stdout, out.stdout
    assert not (workspace / "hit").exists()


async def test_dev_fd_and_proc_self_name_the_processes_own_files(workspace: Path) -> None:
    """``/dev/fd/N``, ``/proc/self/fd/N`` and links to them are the exec'ing process's
    descriptors: an allowed program runs through them, a denied one does not. (The
    supervisor once opened them itself and checked its own descriptors instead: the
    allowed program failed with ENOENT or ENXIO.)"""
    line = (
        "exec 8</bin/echo; /dev/fd/8 via-dev-fd; /proc/self/fd/8 via-proc-self; "
        "ln -sf /dev/fd/8 /tmp/l8; /tmp/l8 via-link; "
        'x=tou; exec 9<"$(command -v ${x}ch)"; /dev/fd/9 hit-a; ln -sf /proc/self/fd/9 /tmp/l9; '
        "/tmp/l9 hit-b; echo done"
    )
    (result,) = await run_lines(workspace, [line])
    assert result["stdout"].split() == ["via-dev-fd", "via-proc-self", "via-link", "done"], result
    assert not (workspace / "hit-a").exists() and not (workspace / "hit-b").exists()
    assert result["exec_denied"]["denied"] == 2


async def test_a_copy_that_differs_only_where_nothing_is_mapped_is_the_same_program(
    workspace: Path,
) -> None:
    """A copy of touch with a byte appended or its section-table offset changed, a copy of
    the dynamic loader with a byte appended given touch, a copy of busybox with a byte
    appended run as its shell: each ran touch before (its bytes were no file's a rule
    names). What the kernel maps of each is touch's, the loader's, busybox's: refused. A
    copy of an allowed program with a byte appended still runs."""
    ws = str(workspace)
    lines = [
        f"cp /usr/bin/touch /tmp/a1; printf A >> /tmp/a1; /tmp/a1 {ws}/hit-1",
        "cp /usr/bin/touch /tmp/a2; printf '\\001' | dd of=/tmp/a2 bs=1 seek=40 conv=notrunc "
        f"2>/dev/null; /tmp/a2 {ws}/hit-2",
        f"cp /lib64/ld-linux-x86-64.so.2 /tmp/a3; printf A >> /tmp/a3; "
        f"/tmp/a3 /usr/bin/touch {ws}/hit-3",
    ]
    if shutil.which("busybox"):
        lines.append(
            'cp "$(command -v busybox)" /tmp/ash; printf A >> /tmp/ash; '
            f'x=tou; /tmp/ash -c "${{x}}ch {ws}/hit-4"'
        )
    lines.append(f"cp /bin/ls /tmp/a5; printf A >> /tmp/a5; /tmp/a5 -d {ws}")
    results = await run_lines(workspace, lines)
    assert not list(workspace.glob("hit-*")), sorted(p.name for p in workspace.glob("hit-*"))
    for result in results[:-1]:
        assert denied_rules(result) == ["deny:run_shell(touch *)"], result
    assert results[-1]["exit_code"] == 0 and results[-1]["stdout"].strip() == ws, results[-1]
    assert "exec_denied" not in results[-1]


# A `#!` line the supervisor read otherwise than the kernel: the kernel's argument ends at a
# NUL, and without a newline in the first 256 bytes it reads 255 of them. The supervisor saw
# `install\0x` / `installX` where make got `install`, so `make install *` never matched.
_MAKE_INSTALL = "install:\n\ttouch hit\n"
_PAD = 256 - len("#!/usr/bin/make") - len("installX")  # X: the file's 256th byte
SHEBANG_LINES = {
    "nul": b"#!/usr/bin/make install\0x\n",
    "256th-byte": b"#!/usr/bin/make" + b" " * _PAD + b"installX",
    "256th-byte-newline": b"#!/usr/bin/make" + b" " * _PAD + b"installX\n",
}


@pytest.mark.parametrize("name", sorted(SHEBANG_LINES))
async def test_a_script_line_is_read_as_the_kernel_reads_it(
    workspace: Path, tmp_path: Path, name: str
) -> None:
    """`./s` runs `make install ./s` (the kernel's reading): refused by `make install *`
    at exec, no recipe ran, and the event stream names the refusal."""
    assert len(SHEBANG_LINES[name].split(b"\n")[0]) in (25, 256)
    (workspace / "Makefile").write_text(_MAKE_INSTALL)
    (workspace / "s").write_bytes(SHEBANG_LINES[name])
    (workspace / "s").chmod(0o755)
    chown_like_workspace(workspace, workspace / "Makefile", workspace / "s")
    events = tmp_path / "events.jsonl"
    (result,) = await run_lines(
        workspace, ["./s"], deny=("run_shell(make install *)",), events_path=events
    )
    assert not (workspace / "hit").exists(), result
    assert denied_rules(result) == ["deny:run_shell(make install *)"], result
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert "make install *" in json.dumps([r for r in records if r["kind"] == "exec_denied"])


def test_the_supervisor_reads_a_script_line_as_the_kernel_does(tmp_path: Path) -> None:
    """:func:`shebang` against the kernel on generated `#!` lines (blanks, NULs, newlines,
    lines around the 256-byte buffer): the same interpreter and argument, or both refuse.
    The kernel's reading is what an interpreter script prints of its arguments."""
    from ringfence.backends.confined._execcheck import Refused, shebang

    show = tmp_path / "i"
    show.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    show.chmod(0o755)
    script = tmp_path / "s"
    rng = __import__("random").Random(255)
    heads = [b"#!" + bytes(show) + b" a\0b\n", b"#!" + bytes(show) + b" ", b"#!" + bytes(show)]
    for _ in range(300):
        lead = bytes(rng.choice(b" \t") for _ in range(rng.choice([0, 1, 3])))
        size = rng.choice([8, 40, 250, 251, 252, 253, 254, 255, 256, 257, 300]) - len(bytes(show))
        tail = bytes(rng.choice(b" \t\0aX\n" if rng.random() < 0.3 else b" \taX") for _ in
                     range(max(size, 0)))  # fmt: skip
        heads.append(b"#!" + lead + bytes(show) + tail)
    for head in heads:
        script.write_bytes(head)
        script.chmod(0o755)
        try:
            out = subprocess.run([str(script)], capture_output=True, check=True).stdout
            words = out.split(b"\0")[:-1]
            kernel: tuple[bytes, bytes | None] | None = (bytes(show), *(words[:-1] or [None]))
        except OSError:  # ENOEXEC, or ENOENT for another interpreter name
            kernel = None
        try:
            name, optional = shebang(head)
            ours = (name, optional) if name == bytes(show) else None
        except Refused:
            ours = None
        assert ours == kernel, head


async def test_an_elf_interpreter_is_checked_whatever_the_class_byte_says(
    workspace: Path, tmp_path: Path
) -> None:
    """The kernel's x86-64 loader reads the magic and ``e_machine``, not ``EI_CLASS``: a copy
    of ``true`` marked 32-bit, whose ``PT_INTERP`` names ``touch``, still starts touch with
    its argv (``-c hit``). The supervisor skipped such a file's ``PT_INTERP``; now the
    rule ``touch -c *`` (argv: no Landlock backstop) refuses it."""
    data = bytearray(Path("/usr/bin/true").read_bytes())
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", data, at)[0] == 3:  # PT_INTERP
            (offset,) = struct.unpack_from("<Q", data, at + 8)
            (size,) = struct.unpack_from("<Q", data, at + 32)
            data[offset : offset + size] = b"/usr/bin/touch".ljust(size, b"\0")
            break
    else:
        pytest.skip("/usr/bin/true has no PT_INTERP")
    data[4] = 1  # ELFCLASS32
    (workspace / "p").write_bytes(bytes(data))
    (workspace / "p").chmod(0o755)
    chown_like_workspace(workspace, workspace / "p")
    events = tmp_path / "events.jsonl"
    (result,) = await run_lines(
        workspace, ["./p -c hit"], deny=("run_shell(touch -c *)",), events_path=events
    )
    assert not (workspace / "hit").exists(), result
    assert denied_rules(result) == ["deny:run_shell(touch -c *)"], result
    assert result["exec_denied"]["denials"][0]["program"] == "/usr/bin/touch"
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert "touch -c *" in json.dumps([r for r in records if r["kind"] == "exec_denied"])


# git takes its command from argv[0] when that is `git-<command>` (git.c): the links in
# git's exec path, a link so named, `exec -a`. With a remote named like one of git's own
# commands (`status`), `git-push status …` passed as `git status …` and pushed; and
# `git fetch` from a local repository was refused (`git-upload-pack '/tmp/r'` read as an
# alias `/tmp/r`).
_GIT_REPOS = (
    "cd /tmp && git init -q --bare r.git && git init -q src && cd src"
    " && git -c user.name=a -c user.email=b commit -q --allow-empty -m x"
    " && git remote add status /tmp/r.git"
    " && git config remote.status.receivepack 'git receive-pack'"
)
DASHED_PUSHES = {
    "exec-path": "/usr/lib/git-core/git-push -q status HEAD:refs/heads/hit",
    "exec-a": "bash -c 'exec -a git-push git -q status HEAD:refs/heads/hit'",
    "link": 'ln -s "$(command -v git)" /tmp/git-push && /tmp/git-push -q status HEAD:refs/heads/hit',
}
GIT_PUSH = "run_shell(git push*)"


@pytest.mark.skipif(
    not Path("/usr/lib/git-core/git-push").exists(), reason="git's exec path is elsewhere"
)
@pytest.mark.parametrize("name", sorted(DASHED_PUSHES))
async def test_git_run_as_git_command_is_matched_as_git_and_that_command(
    workspace: Path, tmp_path: Path, name: str
) -> None:
    """`git-push status …` is `git push status …`: refused at exec by `git push*`, the
    bare repository never gets the ref, and the event stream names the refusal."""
    line = f"{_GIT_REPOS} && {DASHED_PUSHES[name]}; git -C /tmp/r.git for-each-ref"
    events = tmp_path / "events.jsonl"
    (result,) = await run_lines(workspace, [line], deny=(GIT_PUSH,), events_path=events)
    assert "refs/heads/hit" not in result["stdout"], result
    assert denied_rules(result) == [f"deny:{GIT_PUSH}"], result
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert "git push" in json.dumps([r for r in records if r["kind"] == "exec_denied"])


async def test_a_git_command_run_by_git_itself_is_not_taken_for_an_alias(
    workspace: Path,
) -> None:
    """The control: `git fetch` from a local repository runs `git-upload-pack '/tmp/r'`,
    which a rule over `git push` leaves alone."""
    line = (
        "cd /tmp && git init -q r && git -C r -c user.name=a -c user.email=b commit -q"
        " --allow-empty -m x && git init -q src && git -C src fetch -q /tmp/r HEAD"
        " && echo fetched"
    )
    (result,) = await run_lines(workspace, [line], deny=(GIT_PUSH,))
    assert result["stdout"] == "fetched\n" and not denied_rules(result), result


# A thread of its own descriptor table: clone(CLONE_VM | CLONE_SIGHAND | CLONE_THREAD, stack)
# without CLONE_FILES (unshare is denied; clone without a namespace flag is not). The new
# thread makes its fd 5 a copy of fd 6 (/usr/bin/true) in its own table and execs
# /proc/self/fd/5: procfs's `self` is the thread *group*, so the kernel runs the group
# leader's fd 5. The bytes (x86-64), from:
#   mov r9, rsi; mov rsi, rdi; mov edi, 0x10900; xor edx, edx; xor r10d, r10d; xor r8d, r8d
#   mov eax, 56; syscall (clone); test rax, rax; jnz parent
#   mov eax, 33; mov edi, 6; mov esi, 5; syscall (dup2)
#   mov rdi, [r9]; mov rsi, [r9+8]; xor edx, edx; mov eax, 59; syscall (execve)
#   mov eax, 60; mov edi, 127; syscall (exit); parent: ret
THREAD_EXEC = """
import ctypes, mmap, os, sys, time
code = bytes.fromhex(
    "4989f14889febf0009010031d24531d24531c0b8380000000f054885c0752db821000000bf06000000"
    "be050000000f05498b39498b710831d2b83b0000000f05b83c000000bf7f0000000f05c3"
)
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
stub = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)(
    ctypes.addressof(ctypes.c_char.from_buffer(buf))
)
stack = ctypes.create_string_buffer(1 << 16)
top = (ctypes.addressof(stack) + (1 << 16) - 64) & ~15
os.dup2(os.open(sys.argv[1], os.O_RDONLY), 5)  # the leader's fd 5
os.dup2(os.open("/usr/bin/true", os.O_RDONLY), 6)  # the thread's fd 5, once copied
path = ctypes.create_string_buffer(b"/proc/self/fd/5")
argv = (ctypes.c_char_p * 3)(b"x", sys.argv[2].encode(), None)
block = (ctypes.c_void_p * 2)(ctypes.addressof(path), ctypes.addressof(argv))
stub(top, ctypes.addressof(block))
time.sleep(3)  # the thread's exec ends this process (its threads) when it succeeds
print("refused", sys.argv[2])
"""


@NEEDS_STRACE
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the thread's code is x86-64")
async def test_proc_self_in_a_thread_is_its_process_not_the_thread(
    workspace: Path, tmp_path: Path
) -> None:
    """A thread with its own descriptor table execs ``/proc/self/fd/5``: the kernel runs the
    thread group's fd 5 (a copy of touch), and the supervisor took ``self`` for the thread
    and checked the thread's fd 5 (``/usr/bin/true``): the copy of touch ran past
    ``run_shell(touch *)``. The control: the same with ``/bin/echo`` as the group's fd 5
    runs echo. Oracles: the workspace and the kernel's exec record (strace)."""
    (workspace / "thread_exec.py").write_text(THREAD_EXEC)
    trace = tmp_path / "trace"
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=("run_shell(touch *)",)),
        posture=Posture.ALLOW_REVERSIBLE, approver=approve_all(),
    ) as k:  # fmt: skip
        copied = await k.call("run_shell", {"command": "cp /usr/bin/touch ./t"})
        assert copied["exit_code"] == 0, copied
        tracer = start_strace(supervisor_pid(), trace)
        try:
            result = await k.call(
                "run_shell",
                {"command": "python3 thread_exec.py ./t hit; python3 thread_exec.py /bin/echo ok"},
            )
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(10)
            if tracer.stderr is not None:
                tracer.stderr.close()
    assert not (workspace / "hit").exists(), result
    assert result["stdout"].splitlines() == ["refused hit", "ok"], result
    assert denied_rules(result) == ["deny:run_shell(touch *)"], result
    assert result["exec_denied"]["denials"][0]["program"] == str(workspace / "t"), result
    # The kernel's record: the exec of the group's copy of touch failed (an exec that
    # succeeds from a thread is recorded unfinished, superseded in the leader's pid).
    ran = [(argv, rc) for path, argv, rc in traced_execs(trace) if path == "/proc/self/fd/5"]
    assert ran == [(["x", "hit"], -1)], ran


# An ELF whose PT_INTERP is its last program header of COUNT (the kernel reads up to 64 KiB
# of them, 1,170), the rest PT_NULL but one PT_LOAD of the file and a copy of the
# interpreter's PT_TLS (static glibc finds its TLS through AT_PHDR, the main program's).
MANY_HEADERS = """
import os, struct, sys
out, interp, tls_from, count = sys.argv[1], sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
data = open(tls_from, "rb").read()
(phoff,), (phnum,) = struct.unpack_from("<Q", data, 32), struct.unpack_from("<H", data, 56)
tls = [data[phoff + 56 * i : phoff + 56 * i + 56] for i in range(phnum)]
tls = [h for h in tls if struct.unpack_from("<I", h)[0] == 7]
base, at = 0x800000000, 64 + 56 * count
size = at + len(interp) + 1
head = b"\\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
head += struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, base + at, 64, 0, 0, 64, 56, count, 0, 0, 0)
headers = [struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000), *tls]
headers += [bytes(56)] * (count - 1 - len(headers))
headers.append(struct.pack("<IIQQQQQQ", 3, 4, at, base + at, base + at, size - at, size - at, 1))
with open(out, "wb") as f:
    f.write(head + b"".join(headers) + interp + b"\\0")
os.chmod(out, 0o755)
os.execv(out, ["sh", "-c", sys.argv[5]])
"""


def _static_busybox() -> str | None:
    from ringfence.backends.confined._execcheck import _elf_interpreter

    found = shutil.which("busybox")
    return found if found and _elf_interpreter(found) is None else None


@pytest.mark.skipif(_static_busybox() is None, reason="no statically linked busybox")
async def test_an_elf_interpreter_past_the_256th_program_header_is_checked(
    workspace: Path,
) -> None:
    """A program whose PT_INTERP is its 300th (or 1,170th) program header names a copy of
    busybox: the kernel maps busybox and starts it with the program's argv, `sh -c 'touch
    hit'`. The supervisor read 256 headers, took the program for a static one and let it
    go: touch ran past `run_shell(touch *)`. The control: the same program under a rule
    busybox holds no applet for runs its shell (`echo ran`)."""
    busybox = _static_busybox()
    assert busybox is not None
    (workspace / "many.py").write_text(MANY_HEADERS)
    ws = str(workspace)
    lines = [
        f"cp {busybox} ./bb && python3 many.py ./x {ws}/bb {busybox} 300 'touch hit-300'",
        f"python3 many.py ./y {ws}/bb {busybox} 1170 'touch hit-1170'",
    ]
    results = await run_lines(workspace, lines)
    assert not list(workspace.glob("hit-*")), results
    for result in results:
        assert denied_rules(result) == ["deny:run_shell(touch *)"], result
        assert result["exec_denied"]["denials"][0]["program"] == f"{ws}/bb", result
    (control,) = await run_lines(
        workspace,
        [f"python3 many.py ./z {ws}/bb {busybox} 300 'echo ran'"],
        deny=("run_shell(perl *)",),
    )
    assert control["stdout"] == "ran\n" and "exec_denied" not in control, control


# Deny rules whose options the program reads under other spellings: flags given as a glob
# word, a long option, and a long option with its value attached.
OPTION_RULES = (
    "run_shell(rm -rf*)",
    "run_shell(rm --recursive*)",
    "run_shell(touch --date=2001*)",
)


@NEEDS_STRACE
async def test_option_spellings_of_a_denied_command_never_start_it(
    workspace: Path, tmp_path: Path
) -> None:
    """`rm -rf*` was the glob `-rf*` over one word, so `rm -fr d` and `rm -r -f d` (the same
    options to rm) ran past it at exec and at the Gate; `rm --recursive*` let `rm --recur d`
    by (getopt_long takes an unambiguous prefix) and `touch --date=2001*` let `touch --date
    2001-01-01 t` by (the value in the next word). Each line here, through wrappers and
    words computed at run time, is run past the Gate (a batch script): strace sees no exec
    the runtime's matcher denies succeed, and nothing is removed or made. The controls, a
    plain `rm -f` and `touch --date 1999…`, still run."""
    names = [f"d{n}" for n in range(1, 10)]
    for name in names:
        (workspace / name / "x").mkdir(parents=True)
        chown_like_workspace(workspace, workspace / name, workspace / name / "x")
    (workspace / "plain").write_text("x\n")
    chown_like_workspace(workspace, workspace / "plain")
    before = tree(workspace)
    lines = [
        "rm -fr d1",
        "rm -r -f d2",
        "rm -v -r -f d3",
        "c=rm; $c -fr d4",
        "find d5 -maxdepth 0 -exec rm -fr {} \\;",
        "echo d6 | xargs rm -r -f",
        "rm --recur d7",
        "env rm --recu d8",
        'python3 -c \'import os; os.execvp("rm", ["rm", "-f", "-r", "d9"])\'',
        "touch --date 2001-01-01 t1",
        "touch --da=2001-01-01 t2",
        "d=--dat; $d 2001-01-01 t3 2>/dev/null; touch $d 2001-01-01 t3",
        "rm -f plain",
        "touch --date 1999-01-01 ok",
    ]
    oracle = OracleRun(lines, OPTION_RULES)
    (tmp_path / "trace").mkdir()
    await oracle.run(workspace, tmp_path / "trace" / "exec", [list(range(len(lines)))])
    assert oracle.escaped() == [], oracle.escaped()
    after = tree(workspace)
    assert [n for n in names if f"{n}/x" not in after] == [], after
    assert not [t for t in ("t1", "t2", "t3") if (workspace / t).exists()]
    assert "plain" not in after and "ok" in after, after  # the controls ran
    assert set(after) - set(before) == {"ok"}, after
    assert oracle.denials() >= 12, oracle.outputs


@pytest.mark.parametrize(
    "backend",
    [pytest.param("local", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="")),
     "docker"],
)  # fmt: skip
async def test_option_spellings_are_denied_by_the_gate_on_every_backend(
    workspace: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """docker checks no exec, so the Gate's reading is all a deny rule has there: `rm -fr d`
    and `rm -r -f d`, read whole (rm a known program), ran past `run_shell(rm -rf*)` under
    posture unrestricted and removed `d`. Now each is denied, naming the rule, and `d`
    stays; so are `rm --recur d` and `touch --date 2001-01-01 t` under their rules."""
    options: dict[str, Any] = {}
    if backend == "docker":
        from backends_helpers import DOCKER_OPTIONS

        request.getfixturevalue("docker_client")  # skips (or fails in CI) without a daemon
        options = dict(DOCKER_OPTIONS)
    (workspace / "d" / "x").mkdir(parents=True)
    chown_like_workspace(workspace, workspace / "d", workspace / "d" / "x")
    asked: list[str] = []

    def answer(req: Any) -> ApprovalAnswer:
        asked.append(req.arguments["command"])
        return ApprovalAnswer.deny("the test says no")

    async with create_kernel(
        roots=[workspace], backend=backend, rules=Rules(deny=OPTION_RULES),
        posture=Posture.UNRESTRICTED, approver=ScriptedApprover(answer),
        backend_options=options,
    ) as k:  # fmt: skip
        for line, rule in [
            ("rm -fr d", "run_shell(rm -rf*)"),
            ("rm -r -f d", "run_shell(rm -rf*)"),
            ("rm -v -rf d", "run_shell(rm -rf*)"),
            ("rm --recur d", "run_shell(rm --recursive*)"),
            ("touch --date 2001-01-01 t", "run_shell(touch --date=2001*)"),
        ]:
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": line})
            assert rule in refused.value.message, (line, refused.value.message)
        shown = await k.call("run_shell", {"command": "ls d"})
        assert shown["stdout"].split() == ["x"], shown
    assert asked == [] and (workspace / "d" / "x").is_dir()
    assert not (workspace / "t").exists()


@NEEDS_STRACE
async def test_options_after_the_operands_never_start_a_denied_command(
    workspace: Path, tmp_path: Path
) -> None:
    """GNU getopt permutes: `rm d -fr` is `rm -fr d`, and options after the operands ran past
    `run_shell(rm -rf*)` and `run_shell(rm --recursive*)` (a rule was matched word by word
    from the program on). Now a pattern that admits further words also meets its options
    anywhere before `--`. Past the Gate (a batch script), through wrappers and computed
    words: strace sees no denied exec succeed, nothing is removed; the control `rm plain -f`
    (no -r) still runs."""
    names = [f"d{n}" for n in range(1, 6)]
    for name in names:
        (workspace / name / "x").mkdir(parents=True)
        chown_like_workspace(workspace, workspace / name, workspace / name / "x")
    (workspace / "plain").write_text("x\n")
    chown_like_workspace(workspace, workspace / "plain")
    lines = [
        "rm d1 -fr",
        "c=rm; $c d2 -r -f",
        "find d3 -maxdepth 0 -exec rm {} -r -f \\;",
        "rm -f d4 --recursive",
        "echo d5 | xargs -I{} rm {} -v --recu",
        "rm plain -f",
    ]
    oracle = OracleRun(lines, OPTION_RULES)
    (tmp_path / "trace").mkdir()
    await oracle.run(workspace, tmp_path / "trace" / "exec", [list(range(len(lines)))])
    assert oracle.escaped() == [], oracle.escaped()
    after = tree(workspace)
    assert [n for n in names if f"{n}/x" not in after] == [], after
    assert "plain" not in after, after  # the control ran
    assert oracle.denials() >= 5, oracle.outputs


@pytest.mark.parametrize(
    "backend",
    [pytest.param("local", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="")),
     "docker"],
)  # fmt: skip
async def test_options_after_the_operands_are_denied_by_the_gate(
    workspace: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """`rm d -fr` and `rm -f d --recursive`, read whole, were allowed under posture
    unrestricted past `run_shell(rm -rf*)` and `run_shell(rm --recursive*)` (docker has no
    exec check behind the Gate). Now each is denied, naming the rule; `d` stays."""
    options: dict[str, Any] = {}
    if backend == "docker":
        from backends_helpers import DOCKER_OPTIONS

        request.getfixturevalue("docker_client")  # skips (or fails in CI) without a daemon
        options = dict(DOCKER_OPTIONS)
    (workspace / "d" / "x").mkdir(parents=True)
    chown_like_workspace(workspace, workspace / "d", workspace / "d" / "x")
    async with create_kernel(
        roots=[workspace], backend=backend, rules=Rules(deny=OPTION_RULES),
        posture=Posture.UNRESTRICTED,
        approver=ScriptedApprover(lambda _r: ApprovalAnswer.deny("the test says no")),
        backend_options=options,
    ) as k:  # fmt: skip
        for line, rule in [
            ("rm d -fr", "run_shell(rm -rf*)"),
            ("rm d -r -v -f", "run_shell(rm -rf*)"),
            ("rm -f d --recursive", "run_shell(rm -"),  # rm -rf* or rm --recursive*
        ]:
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": line})
            assert rule in refused.value.message, (line, refused.value.message)
    assert (workspace / "d" / "x").is_dir()


@NEEDS_STRACE
async def test_a_flag_in_the_other_case_or_by_its_long_name_never_starts_a_denied_command(
    workspace: Path, tmp_path: Path
) -> None:
    """`rm -Rf d` (rm's -R is -r), `rm -r --force d` and `rm --recursive --force d` ran past
    `run_shell(rm -rf*)`: the flags set took only the letters as spelled, and no long
    option. Now a flag counts in either case and a long option as its first letter (GNU
    names them so), on the deny side. Past the Gate, through a computed word and find:
    strace sees no denied exec succeed, nothing is removed; `rm --force plain` still runs."""
    names = [f"d{n}" for n in range(1, 5)]
    for name in names:
        (workspace / name / "x").mkdir(parents=True)
        chown_like_workspace(workspace, workspace / name, workspace / name / "x")
    (workspace / "plain").write_text("x\n")
    chown_like_workspace(workspace, workspace / "plain")
    lines = [
        "rm -Rf d1",
        "c=rm; $c -r --force d2",
        "rm d3 --recursive --force",
        "find d4 -maxdepth 0 -exec rm -R -f {} \\;",
        "rm --force plain",
    ]
    oracle = OracleRun(lines, OPTION_RULES)
    (tmp_path / "trace").mkdir()
    await oracle.run(workspace, tmp_path / "trace" / "exec", [list(range(len(lines)))])
    assert oracle.escaped() == [], oracle.escaped()
    after = tree(workspace)
    assert [n for n in names if f"{n}/x" not in after] == [], after
    assert "plain" not in after, after  # the control ran
    assert oracle.denials() >= 4, oracle.outputs


@pytest.mark.parametrize(
    "backend",
    [pytest.param("local", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="")),
     "docker"],
)  # fmt: skip
async def test_a_flag_in_the_other_case_is_denied_by_the_gate(
    workspace: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """`rm -Rf d`, read whole, was allowed under posture unrestricted past `run_shell(rm
    -rf*)` and removed `d` on docker (no exec check behind the Gate). Now it is denied,
    naming the rule, and so is `rm -r --force d`; `d` stays."""
    options: dict[str, Any] = {}
    if backend == "docker":
        from backends_helpers import DOCKER_OPTIONS

        request.getfixturevalue("docker_client")  # skips (or fails in CI) without a daemon
        options = dict(DOCKER_OPTIONS)
    (workspace / "d" / "x").mkdir(parents=True)
    chown_like_workspace(workspace, workspace / "d", workspace / "d" / "x")
    async with create_kernel(
        roots=[workspace], backend=backend, rules=Rules(deny=OPTION_RULES),
        posture=Posture.UNRESTRICTED,
        approver=ScriptedApprover(lambda _r: ApprovalAnswer.deny("the test says no")),
        backend_options=options,
    ) as k:  # fmt: skip
        for line in ("rm -Rf d", "rm -r --force d", "rm -fR d"):
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": line})
            assert "run_shell(rm -rf*)" in refused.value.message, (line, refused.value.message)
    assert (workspace / "d" / "x").is_dir()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an ssh client")
async def test_a_value_attached_to_a_denied_short_option_is_that_option(workspace: Path) -> None:
    """`ssh -oProxyCommand=…` is `ssh -o ProxyCommand=…` to ssh, whose ProxyCommand runs as
    a shell command: under `run_shell(ssh -o ProxyCommand*)` and posture unrestricted the
    attached spelling (read whole by the Gate, or computed) ran ssh and its `touch hit-N`.
    Now the value attached to the rule's last flag is read as the next word, at exec and at
    the Gate; ssh never starts. The control, another `-o` option, runs ssh."""
    deny = ("run_shell(ssh -o ProxyCommand*)",)
    lines = [
        "ssh -F /dev/null -oProxyCommand='touch hit-1' x",
        'o=-4oProxyCommand; ssh -F /dev/null "$o=touch hit-2" x',
        "ssh -F /dev/null -v -oProxyCommand='touch hit-3' x",
    ]
    results = []
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny), approver=approve_all(),
        posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        for line in lines:
            try:
                results.append(await k.call("run_shell", {"command": line}))
            except Denied as exc:
                results.append({"gate": exc.message})
        control = await k.call(
            "run_shell", {"command": "ssh -F /dev/null -oConnectTimeout=1 x; echo ran"}
        )
    assert not list(workspace.glob("hit-*")), results
    assert "run_shell(ssh -o ProxyCommand*)" in results[0]["gate"], results[0]
    assert "run_shell(ssh -o ProxyCommand*)" in results[2]["gate"], results[2]
    assert set(denied_rules(results[1])) == {"deny:run_shell(ssh -o ProxyCommand*)"}, results[1]
    assert control["stdout"] == "ran\n" and "exec_denied" not in control, control


_FORCE_REPOS = (
    "cd /tmp && rm -rf a b && git init -q --bare b && git init -q a && cd a"
    " && git -c user.email=t@t -c user.name=t commit -q --allow-empty -m one && "
)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_a_short_flag_meets_the_long_option_a_rule_names(workspace: Path) -> None:
    """`git push -f` is `git push --force`: under `run_shell(git push --force*)` and posture
    unrestricted, `git push -f ../b …` (read whole, or its flag computed) pushed. Now a
    short flags word holding the letter a rule's long option is named after meets it, at
    the Gate and at exec; the bare repository never gets the branch. The control, a push
    without the flag, pushes."""
    deny = ("run_shell(git push --force*)",)
    check = "; git -C ../b rev-parse -q --verify refs/heads/main || echo NOT-PUSHED"
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny), approver=approve_all(),
        posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        with pytest.raises(Denied) as refused:
            await k.call(
                "run_shell", {"command": _FORCE_REPOS + "git push -q -f ../b HEAD:main" + check}
            )
        assert "run_shell(git push --force*)" in refused.value.message, refused.value.message
        computed = await k.call(
            "run_shell", {"command": _FORCE_REPOS + "f=-uf; git push -q $f ../b HEAD:main" + check}
        )
        control = await k.call(
            "run_shell", {"command": _FORCE_REPOS + "git push -q ../b HEAD:main" + check}
        )
    assert computed["stdout"].strip() == "NOT-PUSHED", computed
    assert set(denied_rules(computed)) == {"deny:run_shell(git push --force*)"}, computed
    assert "NOT-PUSHED" not in control["stdout"] and "exec_denied" not in control, control


# Options a word computed at run time (or the words xargs appends) may give after the
# operands: each line removes `d` (and with `*`, every file) if it runs.
_COMPUTED_OPTION_LINES = (
    "rm d ${x:--rf}",  # the default value: `rm d -rf`
    "echo -rf d | xargs rm",  # xargs appends `-rf d`: `rm -rf d`
    "rm d *",  # the glob meets the file named `-rf`: `rm d -rf d keep`
    "rm -r d ${x:--f}",  # the last flag computed after the operand
)


@pytest.mark.parametrize(
    ("backend", "kind"),
    [pytest.param("local", "ask", marks=pytest.mark.skipif(shutil.which("bwrap") is None,
                                                           reason="")),
     ("docker", "deny")],
)  # fmt: skip
async def test_options_a_computed_word_gives_after_the_operands_meet_the_rule(
    workspace: Path, request: pytest.FixtureRequest, backend: str, kind: str
) -> None:
    """`rm d ${x:--rf}`, `echo -rf d | xargs rm` and `rm d *` beside a file named `-rf` run
    `rm -rf d` (getopt permutes), but the permuted reading looked at literal words only
    and an open tail shorter than the pattern was a sure NO: under posture unrestricted each
    removed `d` past `run_shell(rm -rf*)`, a deny rule on docker (no exec check behind the
    Gate) and an ask rule on any backend (never enforced at exec). Now a computed word
    before `--`, or an open tail, may give the options the pattern names: the Gate asks,
    the approver says no, and `d` stays; the control, `rm plain`, runs unasked."""
    options: dict[str, Any] = {}
    if backend == "docker":
        from backends_helpers import DOCKER_OPTIONS

        request.getfixturevalue("docker_client")  # skips (or fails in CI) without a daemon
        options = dict(DOCKER_OPTIONS)
    (workspace / "d" / "x").mkdir(parents=True)
    for name in ("-rf", "keep", "plain"):
        (workspace / name).write_text("x\n")
    chown_like_workspace(
        workspace, workspace / "d", workspace / "d" / "x", workspace / "-rf",
        workspace / "keep", workspace / "plain",
    )  # fmt: skip
    asked: list[str] = []

    def answer(req: Any) -> ApprovalAnswer:
        asked.append(req.arguments["command"])
        return ApprovalAnswer.deny("the test says no")

    rules = Rules(**{kind: ("run_shell(rm -rf*)",)})  # type: ignore[arg-type]
    async with create_kernel(
        roots=[workspace], backend=backend, rules=rules, posture=Posture.UNRESTRICTED,
        approver=ScriptedApprover(answer), backend_options=options,
    ) as k:  # fmt: skip
        for line in _COMPUTED_OPTION_LINES:
            with pytest.raises(Denied):
                await k.call("run_shell", {"command": line})
        control = await k.call("run_shell", {"command": "rm plain"})
    assert asked == list(_COMPUTED_OPTION_LINES), asked
    assert (workspace / "d" / "x").is_dir() and (workspace / "keep").exists()
    assert (workspace / "-rf").exists()
    assert control["exit_code"] == 0 and not (workspace / "plain").exists(), control


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_options_after_the_operands_past_the_programs_own_options_never_start_it(
    workspace: Path,
) -> None:
    """`git -C . push ../b HEAD:main -f` is `git push --force`: git's own `-C .` first, then
    push's options among its operands. The permuted reading started at the program's
    first word only and the past-the-options reading did not permute, so under `run_shell(
    git push --force*)` and posture unrestricted it pushed on `local` (read whole at the
    Gate, or its flag computed past the exec check), and so did `git -c x.y=1 push … -uf`.
    Now options among the operands are met from each place the leading options may end,
    at the Gate and at exec: the bare repository never gets the branch. The control, the
    same push without the flag, pushes."""
    deny = ("run_shell(git push --force*)",)
    check = "; git -C ../b rev-parse -q --verify refs/heads/main || echo NOT-PUSHED"
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny), approver=approve_all(),
        posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        for line in (
            "git -C . push -q ../b HEAD:main -f",
            "git -C . push -q -u ../b HEAD:main --force",
        ):
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": _FORCE_REPOS + line + check})
            assert "run_shell(git push --force*)" in refused.value.message, refused.value.message
        computed = [
            await k.call("run_shell", {"command": _FORCE_REPOS + line + check})
            for line in (
                "f=-f; git -C . push -q ../b HEAD:main $f",
                "f=-uf; git -c x.y=1 push -q ../b HEAD:main $f",
                "f=--force; git -C . push -q ../b HEAD:main $f",
            )
        ]
        control = await k.call(
            "run_shell", {"command": _FORCE_REPOS + "git -C . push -q ../b HEAD:main" + check}
        )
    for result in computed:
        assert result["stdout"].strip() == "NOT-PUSHED", result
        assert set(denied_rules(result)) == {"deny:run_shell(git push --force*)"}, result
    assert "NOT-PUSHED" not in control["stdout"] and "exec_denied" not in control, control


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an ssh client")
async def test_an_option_and_its_value_after_the_operands_are_that_option(
    workspace: Path,
) -> None:
    """OpenSSH reads its options after the host too: `ssh -F /dev/null x -o
    ProxyCommand='touch hit-1'` ran the ProxyCommand under `run_shell(ssh -o ProxyCommand*)`
    and posture unrestricted on `local`, since the permuted reading took the option's value
    for an operand (and `-oProxyCommand=…` after the host met no reading at all). Now the
    options after the operands are also read moved before them, each with the word after
    it as its value, at the Gate and at exec: read whole it is denied, computed it is
    refused at exec, no hit file appears. The control, another `-o` option, runs ssh."""
    deny = ("run_shell(ssh -o ProxyCommand*)",)
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny), approver=approve_all(),
        posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        for line in (
            "ssh -F /dev/null x -o ProxyCommand='touch hit-1'",
            "ssh -F /dev/null x -v -oProxyCommand='touch hit-2'",
        ):
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": line})
            assert "run_shell(ssh -o ProxyCommand*)" in refused.value.message, refused.value
        computed = [
            await k.call("run_shell", {"command": line})
            for line in (
                "o=-o; ssh -F /dev/null x $o ProxyCommand='touch hit-3'",
                'o=-oProxyCommand; ssh -F /dev/null x "$o=touch hit-4"',
                "o=-o; ssh -F /dev/null -4 x -v $o ProxyCommand='touch hit-5'",
            )
        ]
        control = await k.call(
            "run_shell", {"command": "ssh -F /dev/null x -o ConnectTimeout=1; echo ran"}
        )
    assert not list(workspace.glob("hit-*")), computed
    for result in computed:
        assert set(denied_rules(result)) == {"deny:run_shell(ssh -o ProxyCommand*)"}, result
    assert control["stdout"] == "ran\n" and "exec_denied" not in control, control


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_an_option_with_its_value_after_the_operands_is_met_past_other_options(
    workspace: Path,
) -> None:
    """The readings above with other options about: `git -C . push -q x --rep origin` (git's
    own `-C .` first, push's `-q` between `push` and the option, `--rep` abbreviated) was
    read with `-q x` or `--rep origin` as operands and let through to git under `run_shell(
    git push --repo origin*)`. Now each option that meets the rule's is read first with
    its value, past each place the leading options may end: the Gate denies it, naming
    the rule, and git never starts (no `exec_denied`, no output)."""
    deny = ("run_shell(git push --repo origin*)",)
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=deny), approver=approve_all(),
        posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        for line in ("git -C . push -q x --rep origin", "git push -q x --re origin"):
            with pytest.raises(Denied) as refused:
                await k.call("run_shell", {"command": line + "; touch ran"})
            assert "run_shell(git push --repo origin*)" in refused.value.message, refused.value
        control = await k.call("run_shell", {"command": "git -C . push x -q origin; touch ran"})
    assert control["exit_code"] == 0 and (workspace / "ran").exists(), control


async def test_a_long_command_with_options_after_its_operands_is_read_loosely(
    workspace: Path,
) -> None:
    """The permuted readings cost a match per place the leading options may end, and per
    option read with its value: past 48 words (or 6 such places) a command is read loosely
    instead, which may over-match and never under-matches, at the Gate and at exec.
    `rm d a1 … a60 -rf` is not let through under `run_shell(rm -rf*)`: `d` stays."""
    (workspace / "d" / "x").mkdir(parents=True)
    chown_like_workspace(workspace, workspace / "d", workspace / "d" / "x")
    line = "rm d " + " ".join(f"a{n}" for n in range(60)) + " -rf"
    async with create_kernel(
        roots=[workspace], backend="local", rules=Rules(deny=("run_shell(rm -rf*)",)),
        approver=approve_all(), posture=Posture.UNRESTRICTED,
    ) as k:  # fmt: skip
        result = await k.call("run_shell", {"command": line})
    assert set(denied_rules(result)) == {"deny:run_shell(rm -rf*)"}, result
    assert (workspace / "d" / "x").is_dir()
