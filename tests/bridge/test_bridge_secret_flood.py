"""A script that floods the session's redactor with credential values, through ``ringfence run-script``.

Every string under a credential-named argument (``password=...``) is registered as a
secret before the call is recorded, valid call or not. The redactor rebuilt one regular
expression over every secret at each registration: one call carrying 1,500 such values
held the host's event loop for 34 s here, past the run's 3 s timeout (which cannot fire
while the loop is held), and 20,000 (a 250 KB argument) for hours. Registrations are now
merged into the expression in doubling levels, built when a redaction needs them, so the
work grows as ``n log n``; what is redacted is unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

N_ONE_CALL = 20_000
N_CALLS = 1_500

SCRIPT = f"""
try:
    call_tool("no_such_tool", password=["pw%08d" % i for i in range({N_ONE_CALL})])
except ToolError as e:
    print("one call:", e.code)
for i in range({N_CALLS}):
    try:
        call_tool("no_such_tool", token="tk%08d" % i)
    except ToolError:
        pass
print("after", "pw%08d" % 7, "tk%08d" % 9)
"""


def run_script(
    tmp_path: Path, under_tmp: Path, source: str, *, timeout: int, wall: int
) -> tuple[dict, str, float]:
    """``ringfence run-script`` of ``source`` (its ``--timeout`` ``timeout``, killed after
    ``wall`` seconds: the old code took hours or minutes): the result, the event stream's
    text and the seconds it took."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.py"
    script.write_text(source)
    events = tmp_path / "events.jsonl"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, "-m", "ringfence", "run-script", str(script),
            "--timeout", str(timeout), "--workspace", str(ws), "--posture", "unrestricted",
            "--events", str(events), "--json",
        ],
        capture_output=True,
        text=True,
        timeout=wall,
        env={**os.environ, "TMPDIR": str(under_tmp)},
        check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["result"], events.read_text(), seconds


def test_a_flood_of_credential_values_does_not_hold_the_host(
    tmp_path: Path, under_tmp: Path
) -> None:
    # the old redactor: hours
    value, stream, seconds = run_script(tmp_path, under_tmp, SCRIPT, timeout=60, wall=120)
    assert value["status"] == "ok", value
    assert len(value["calls"]) <= 201 and value["calls_omitted"]["count"] > 0
    # every value was registered, and none leaks: not in the output, not in the event stream
    assert "one call: not_found" in value["output"]
    assert "pw00000007" not in value["output"] and "tk00000009" not in value["output"]
    assert "pw00000007" not in stream and "pw00019999" not in stream
    assert "tk00000009" not in stream and "tk00001499" not in stream
    assert seconds < 100, seconds


def test_the_levels_redact_exactly_as_one_expression_of_every_secret() -> None:
    """Differential: registered one by one past the one-level size (so up to ~11 levels),
    every redaction equals the single longest-first expression's (leftmost, then longest)."""
    import random
    import re

    from ringfence.runtime._redact import MARKER, Redactor

    rng = random.Random(2)
    secrets = list({"".join(rng.choice("ab") for _ in range(rng.randint(4, 14))) for _ in range(3000)})  # fmt: skip
    redactor = Redactor()
    for i, secret in enumerate(secrets, 1):
        redactor.register(secret)
        text = "".join(rng.choice("abx") for _ in range(40))
        got = redactor.redact(text)
        if i % 61 == 0 or i == len(secrets):
            one = "|".join(re.escape(s) for s in sorted(secrets[:i], key=len, reverse=True))
            assert got == re.compile(one).sub(MARKER, text), (i, text)
    assert redactor.longest == max(map(len, secrets))


HUGE = """
secret = "Q" * 12_000_000 + "z"
try:
    call_tool("no_such_tool", password=secret)
except ToolError as e:
    print("registered:", e.code)
line = "y" * 65_000
for i in range(1000):
    print(line)
print(secret)
print("end")
"""


def test_a_huge_credential_value_does_not_slow_every_later_chunk(
    tmp_path: Path, under_tmp: Path
) -> None:
    """The attack: a 12 MB "password" made the output's stream redactor hold back and re-scan
    12 MB at each chunk the runner wrote: 65 MB of output held the host's loop for half a
    minute past a 10 s timeout. A value that long is registered as pieces of at most 64 KiB:
    all of it is still redacted (the script prints it whole at the end), and the run ends
    in seconds (a timeout of 25 s: a loaded machine's run, far below the old half minute past
    the timeout)."""
    value, _, _ = run_script(tmp_path, under_tmp, HUGE, timeout=25, wall=150)
    assert value["status"] == "ok", value.get("error")
    assert "registered: not_found" in value["output"] and value["output"].rstrip().endswith("end")
    assert "QQQQ" not in value["output"]  # the secret, printed whole, is markers only


def test_a_variable_used_many_times_under_credential_names_does_not_hold_the_host(
    tmp_path: Path, under_tmp: Path
) -> None:
    """The script's literals bound to credential names are found on the host before the run
    starts, where its timeout cannot fire: listed again at each use, the literals of a name
    assigned 3,000 times and passed 3,000 times as ``token=`` (a 96 KB script) were 9 million
    entries, registered one by one — 76 s past a 5 s timeout here (until 2026-12-07)."""
    n = 3_000
    source = "".join(f't = "lit{i:08d}"\n' for i in range(n)) + "def f(**kw):\n    pass\n"
    source += "f(token=t)\n" * n + 'print("last", t, "lit%08d" % 7)\n'
    # the old scan: 76 s here
    value, stream, seconds = run_script(tmp_path, under_tmp, source, timeout=20, wall=200)
    assert value["status"] == "ok", value
    # every literal is still registered: the last value of t and an earlier one alike
    assert value["output"] == "last [REDACTED SECRET] [REDACTED SECRET]\n"
    assert "lit00000007" not in stream and "lit00002999" not in stream
    assert seconds < 45, seconds  # a loaded machine's run; the old scan: 76 s


SPREAD = """
import hashlib
values = [hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in range(20000)]
try:
    call_tool("no_such_tool", password=values)
except ToolError as e:
    print("registered:", e.code)
line = hashlib.sha256(b"x").hexdigest() * 2000
for i in range(16):
    print(line)
print("last", values[7], values[19999])
"""


def test_many_credential_values_of_every_first_character_do_not_slow_each_redaction(
    tmp_path: Path, under_tmp: Path
) -> None:
    """The attack: credential values that start with every character (hex digests, not a shared
    "pw" prefix) made the redactor's one alternation try each of them at every position of a
    text. 20,000 of them registered by one call (a 300 KB argument) made the redaction of the
    script's next 1 MB of output take minutes (30,000 and 1.3 MB: 6 min past a 5 s timeout),
    on the host's event loop. The secrets are now matched as a trie: a position costs the depth
    of the secrets it starts, not their number; every one is still redacted."""
    # the old redactor: about 5 min per MB of output here
    value, stream, seconds = run_script(tmp_path, under_tmp, SPREAD, timeout=120, wall=300)
    assert value["status"] == "ok", value.get("error")
    assert "registered: not_found" in value["output"]
    assert value["output"].rstrip().endswith("last [REDACTED SECRET] [REDACTED SECRET]")
    import hashlib

    some = [hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in (7, 4242, 19999)]
    assert not any(s in stream for s in some)
    assert seconds < 150, seconds


def test_the_trie_redacts_exactly_as_one_expression_of_every_secret() -> None:
    """Differential, for the trie's own shapes: nodes with more children than a bucket (many
    first characters, characters a class must escape), and chains of secrets each the prefix
    of the next, deeper than one expression nests (left to further expressions)."""
    import random
    import re

    from ringfence.runtime._redact import MARKER, Redactor

    rng = random.Random(7)
    alphabets = ("abcdefghij", "".join(chr(0x400 + i) for i in range(300)) + "x[]^-\\.|(")
    cases = []
    for alphabet in alphabets:
        for _ in range(12):
            n = rng.randint(1, 600)
            secrets = {"".join(rng.choice(alphabet) for _ in range(rng.randint(4, 12))) for _ in range(n)}  # fmt: skip
            texts = ["".join(rng.choice(alphabet + "zz") for _ in range(200)) for _ in range(4)]
            texts.append(" ".join(rng.sample(sorted(secrets), min(5, len(secrets)))))
            cases.append((sorted(secrets), texts))
    chain = ["a" * n for n in range(4, 300)] + ["a" * n + "b" for n in range(4, 250, 3)]
    cases.append((chain, ["a" * 400, "a" * 200 + "b" + "a" * 9, "xaaaab", "aaa"]))
    for secrets, texts in cases:
        one = re.compile("|".join(re.escape(s) for s in sorted(secrets, key=len, reverse=True)))
        redactor = Redactor(secrets)
        for text in texts:
            assert redactor.redact(text) == one.sub(MARKER, text), (secrets[:3], text)


def test_long_credential_literals_against_a_large_output_take_linear_time(
    tmp_path: Path, under_tmp: Path
) -> None:
    """Eleven 20,000-character credential literals (``"1111" + "a" * 20_000 + "b"``) and a
    million ``a`` printed: the old redactor walked each position as far as the text agreed
    with a secret, about a minute of the host's CPU here (until 2026-12-07). Bounded by the
    CPU time of the ``run-script`` process (not the wall clock), generously."""
    import resource

    lines = [f'{"abcdefghij"[i]}_api_key = "{str(i) * 4 + "a" * 20_000 + "b"}"' for i in range(10)]
    lines.append(f'password = "{"a" * 20_000 + "c"}"')
    lines.append('print("a" * 1_000_000 + "c", "1111" + "a" * 20_000 + "b")')
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    value, stream, _ = run_script(tmp_path, under_tmp, "\n".join(lines), timeout=60, wall=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert value["status"] == "ok", value.get("error")
    assert value["output"].startswith("a" * 1000)
    assert "a" * 20_000 + "c" not in value["output"] and "1111" not in value["output"]
    assert "1111" + "a" * 100 not in stream
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 30, f"the run took {cpu:.1f}s of CPU"


# Credential literals bound by each way Python binds a name: a parameter's default, a loop
# variable, one name of a tuple, a with's target, a comprehension's; and a plain name bound
# so, then used under a credential name. Until 2026-12-07 only ``name = literal`` counted.
BOUND_LITERALS = {
    "default": 'def f(api_token="Lit1-default-a8x"):\n    return api_token\nprint(f())',
    "kwonly": 'def f(*, password="Lit2-kwonly-a8x"):\n    return password\nprint(f())',
    "lambda": 'f = lambda secret="Lit3-lambda-a8x": secret\nprint(f())',
    "loop": 'for password in ["Lit4-loop-a8x"]:\n    print(password)',
    "tuple": '(api_key, n) = ("Lit5-tuple-a8x", 1)\nprint(api_key)',
    "starred": '[*token, n] = ["Lit6-starred-a8x", 1]\nprint(token)',
    "comprehension": 'print([token for token in ["Lit7-comprehension-a8x"]])',
    "plain-default": 'def g(t="Lit8-plain-default-a8x"):\n    return dict(token=t)\nprint(g())',
    "plain-loop": 'for t in ["Lit9-plain-loop-a8x"]:\n    h = {"Authorization": t}\n    print(t)',
    "plain-tuple": 'a, t = 1, "LitA-plain-tuple-a8x"\nprint(dict(password=t), t)',
    "dict-comprehension": 'print({"token": v for v in ["LitB-dict-comprehension-a8x"]})',
}


def test_credential_literals_bound_any_way_are_redacted_everywhere(
    tmp_path: Path, under_tmp: Path
) -> None:
    source = "\n".join(BOUND_LITERALS.values()) + '\nresult = "done"\n'
    value, stream, _ = run_script(tmp_path, under_tmp, source, timeout=60, wall=120)
    assert value["status"] == "ok" and value["result"] == "done", value
    for how, text in BOUND_LITERALS.items():
        (literal,) = re.findall(r"Lit\w-[\w-]+-a8x", text)
        # the script printed it: the output, the proposed record's script and every event
        # show it redacted
        assert literal not in value["output"], how
        assert literal not in stream, how
    assert value["output"].count("[REDACTED SECRET]") >= len(BOUND_LITERALS)
    proposed = [
        json.loads(line)
        for line in stream.splitlines()
        if '"proposed"' in line and "run_tool_script" in line
    ]
    assert proposed and "[REDACTED SECRET]" in json.dumps(proposed[0])
