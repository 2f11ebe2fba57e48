"""run_shell output past its caps: redacted first, cut after, and the spool holds it all (to 64 MiB).

A real command on the local backend, through ``create_kernel`` + ``run_shell``,
prints a registered secret (a credential-named variable) exactly across each
place where output is cut: the reply's head/tail cut, the old 32 MiB memory
cut, and the 64 MiB spool limit. No piece of the secret may survive anywhere.
"""

from __future__ import annotations

import re
import secrets
import tempfile
from pathlib import Path

import pytest

from ringfence import create_kernel
from ringfence.backends._output import CUT_MARGIN_CHARS, SPOOL_LIMIT_BYTES, TAIL_WINDOW_BYTES
from ringfence.runtime import Posture

MiB = 1024 * 1024


def _pieces(token: str) -> list[str]:
    """Recognisable fragments: a prefix and a suffix long enough to narrow a guess."""
    return [token, token[:10], token[-8:]]


async def test_a_secret_across_every_cut_leaves_no_piece_and_the_spool_is_whole(
    tmp_path: Path,
) -> None:
    token = "ghp_" + secrets.token_hex(15)
    half = len(token) // 2
    reply_cut = (64 * 1024 - 1024) // 2  # run_shell's cap is the kernel's minus marker room
    at = [reply_cut - half, 32 * MiB - half, SPOOL_LIMIT_BYTES - half]
    # A 4-byte gap: the last secret's prefix ends the kept head, its suffix starts the tail.
    total = SPOOL_LIMIT_BYTES + TAIL_WINDOW_BYTES + 4
    script, pos = ["f() { head -c $1 /dev/zero | tr '\\0' a; }"], 0
    for start in at:
        script.append(f'f {start - pos}; printf %s "$GH_TOKEN"')
        pos = start + len(token)
    script.append(f"f {total - pos - 4}; echo END")

    async with create_kernel(
        roots=[tmp_path], posture=Posture.UNRESTRICTED, spool_dir=tmp_path / "spool"
    ) as kernel:
        result = await kernel.call(
            "run_shell", {"command": "\n".join(script), "env": {"GH_TOKEN": token}}
        )

    assert result["exit_code"] == 0 and result["truncated"]["stdout_bytes"] == total
    reply = result["stdout"]
    assert reply.endswith("END\n")
    spool = Path(result["truncated"]["stdout_spool"])
    assert re.search(rf"full output in {re.escape(str(spool))}", reply)
    text = spool.read_text()
    for piece in _pieces(token):
        assert piece not in reply and piece not in text, piece
    # The two secrets inside the spool limit are replaced whole, the cut one is gone.
    assert text.count("[REDACTED SECRET]") == 2
    # The spool holds every byte up to its limit (less the margin at the gap), then a
    # marker, then the last MiB: the old capture lost 32 MiB..33 MiB from the middle.
    head, marker, tail = re.split(r"(\n\[… ringfence dropped \d+ bytes past its .*? …\]\n)", text)
    redacted = 2 * (len("[REDACTED SECRET]") - len(token))
    assert len(head) == SPOOL_LIMIT_BYTES + redacted - CUT_MARGIN_CHARS
    assert f"{SPOOL_LIMIT_BYTES}-byte spool limit" in marker
    assert tail.endswith("END\n") and len(tail) == TAIL_WINDOW_BYTES - CUT_MARGIN_CHARS


async def test_a_spool_inside_a_root_leaves_no_temporary_directory_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose spool lies in a root keeps a quarantine outside it, in a private
    temporary directory: each command made one and left it, empty, in /tmp for good."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    ws = tmp_path / "ws"
    ws.mkdir()
    async with create_kernel(
        roots=[ws], posture=Posture.UNRESTRICTED, spool_dir=ws / "spool", change_sets=False
    ) as kernel:
        for _ in range(3):
            result = await kernel.call("run_shell", {"command": "true"})
            assert result["exit_code"] == 0
    assert [p.name for p in tmp.iterdir() if p.name.startswith("ringfence-spool-")] == []
