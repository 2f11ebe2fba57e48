"""A script's call cannot hold the kernel with a string that the secret scan reads in quadratic time.

Every string of every call's arguments is scanned for ``scheme://user:password@`` before the
call is recorded (the password is then registered as a secret), valid call or not. Python's
engine tried the scheme from every letter of a run of letters: ``"a" * 200_000 + "://@"`` in
any argument (a call to no tool included) held the kernel's event loop about two minutes past
a script's timeout, 400,000 ten minutes. The scan is RE2's now (linear time), with the same
matches (the whitespace class spelled as Python's).
"""

from __future__ import annotations

import time

from ringfence.bridge import register_script_tool
from ringfence.bridge._tool import SCRIPT_TOOL
from ringfence.runtime import ApprovalAnswer, Kernel, ScriptedApprover

YES = ScriptedApprover(lambda r: ApprovalAnswer.once())
SCRIPT = """
long = "a" * 200000 + "://@"
try:
    call_tool("no_such_tool", note=long, url="postgres://app:pw-7f3a91@db.internal/x")
except ToolError as e:
    print("refused:", e.code)
print("the password:", "pw-7f3a91")
"""


async def test_a_long_run_of_letters_before_a_scheme_mark_is_scanned_in_linear_time() -> None:
    async with Kernel(approver=YES) as kernel:
        register_script_tool(kernel)
        started = time.monotonic()
        outcome = await kernel.invoke(SCRIPT_TOOL, {"script": SCRIPT, "timeout_seconds": 60})
        seconds = time.monotonic() - started
    assert outcome.ok, outcome.error
    # the scan still finds what it found: the URL's password is registered and redacted
    assert outcome.value["output"] == "refused: not_found\nthe password: [REDACTED SECRET]\n"
    assert seconds < 45, seconds  # the backtracking scan: about two minutes here


def test_the_scan_finds_what_pythons_expression_found() -> None:
    """Differential against the old expression, over texts of the characters that matter
    (Unicode spaces, which RE2's own ``\\s`` does not know, and lone surrogates)."""
    import random
    import re
    from urllib.parse import unquote

    from ringfence.runtime._redact import _NOT_SECRETS, url_userinfo_secrets

    old = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([^\s/:@]*):([^\s/@]+)@")
    rng = random.Random(4)
    alphabet = "a1:/@ .+-bZ%\xa0\u2003\x0b\x1c\x85é\u2029\udc80😀"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        expected: list[str] = []
        for m in old.finditer(text):
            user, password = m.group(1), m.group(2)
            expected.append(f"{user}:{password}")
            if password.lower() not in _NOT_SECRETS:
                expected.append(password)
                if unquote(password) != password:
                    expected.append(unquote(password))
        assert url_userinfo_secrets(text) == expected, repr(text)
    spaces = {c for c in range(0x110000) if chr(c).isspace()}
    for c in spaces:
        assert url_userinfo_secrets(f"x://u:p{chr(c)}q@") == [], hex(c)
