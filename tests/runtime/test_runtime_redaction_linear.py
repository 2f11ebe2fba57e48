"""Redaction is linear in the text and the secrets, and replaces what the old expressions did.

Until 2026-12-07 :meth:`Redactor.redact` matched one expression over the secrets at every
position of a text: a position cost as far as the text agreed with a secret, so long
secrets that a large output repeats most of (``"1111" + "a" * 20_000 + "b"`` against
``"a" * 400_000``) held the host for the text times the secrets' length. The old matcher
(a trie expression per level, leftmost-longest across levels) is kept here as the oracle:
the new one must replace exactly what it replaced.
"""

from __future__ import annotations

import itertools
import re
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from ringfence.runtime._redact import MARKER, Redactor, _trie_expressions


def _oracle_sub(patterns: list[re.Pattern[str]], text: str) -> str:
    """The old ``_sub_leftmost_longest``: the leftmost match of any pattern, the longest of
    those starting there, then on from its end."""
    out: list[str] = []
    pos = 0
    found: list[re.Match[str] | None] = [p.search(text) for p in patterns]
    while True:
        best: re.Match[str] | None = None
        for i, match in enumerate(found):
            if match is not None and match.start() < pos:
                match = found[i] = patterns[i].search(text, pos)
            if match is not None and (
                best is None
                or match.start() < best.start()
                or (match.start() == best.start() and match.end() > best.end())
            ):
                best = match
        if best is None:
            break
        out.append(text[pos : best.start()])
        out.append(MARKER)
        pos = best.end()
    out.append(text[pos:])
    return "".join(out)


def _oracle(secrets: list[str], text: str) -> str:
    kept = sorted({s for s in secrets if len(s) >= 4})
    if not kept or not text:
        return text
    return _oracle_sub(_trie_expressions(kept), text)


# A small alphabet (with a lone surrogate and a non-BMP character) so secrets overlap, nest
# and share prefixes and suffixes with each other and with the text.
_CHARS = st.sampled_from(["a", "b", "c", "\ud800", "\U0001f600", "."])
_SECRET = st.text(_CHARS, min_size=4, max_size=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secrets=st.lists(_SECRET, min_size=1, max_size=8), text=st.text(_CHARS, max_size=80))
def test_the_linear_redaction_replaces_what_the_expressions_did(
    secrets: list[str], text: str
) -> None:
    redactor = Redactor()
    for secret in secrets:
        redactor.register(secret)
    assert redactor.redact(text) == _oracle(secrets, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(_SECRET, min_size=1, max_size=120), min_size=2, max_size=4),
    text=st.text(_CHARS, max_size=200),
)
def test_secrets_registered_between_redactions_match_as_one_set(
    batches: list[list[str]], text: str
) -> None:
    """Several levels (more than 256 secrets, registered between redactions) together
    replace what one expression over all of them would."""
    redactor = Redactor()
    seen: list[str] = []
    for i, batch in enumerate(batches):
        # Padded so there are enough distinct secrets for several levels.
        for j, secret in enumerate(batch):
            for k in range(3):
                redactor.register(f"{secret}{i}{j}{k}")
                seen.append(f"{secret}{i}{j}{k}")
            redactor.register(secret)
            seen.append(secret)
        assert redactor.redact(text) == _oracle(seen, text)


def test_long_secrets_against_a_large_text_take_linear_time() -> None:
    """Process CPU time (not wall clock) of redacting a million characters that repeat most
    of eleven 20,000-character secrets: the old matcher took about 45 s of CPU here, this
    takes about one; the bound is generous for a loaded machine."""
    secrets = [str(i) * 4 + "a" * 20_000 + "b" for i in range(10)] + ["a" * 20_000 + "c"]
    redactor = Redactor(secrets)
    text = "a" * 1_000_000 + "c" + "1111" + "a" * 20_000 + "b"
    began = time.process_time()
    out = redactor.redact(text)
    spent = time.process_time() - began
    assert out == "a" * 980_000 + MARKER + MARKER
    assert spent < 15, f"redaction took {spent:.1f}s of CPU"


def test_many_nested_secrets_take_linear_time() -> None:
    """A thousand secrets each a prefix of the next (``aaaa``, ``aaaaa``, …) against a text
    of their letter: every position starts a thousand of them, and only the longest is kept."""
    secrets = ["a" * n for n in range(4, 1004)]
    redactor = Redactor(secrets)
    text = "a" * 300_000
    began = time.process_time()
    out = redactor.redact(text)
    spent = time.process_time() - began
    assert out == MARKER * 300  # 299 of the longest, then the 103 left are one too
    assert spent < 15, f"redaction took {spent:.1f}s of CPU"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    secrets=st.lists(_SECRET, min_size=1, max_size=6),
    text=st.text(_CHARS, max_size=80),
    cuts=st.lists(st.integers(0, 80), max_size=8),
)
def test_a_stream_in_any_chunks_is_redacted_as_the_whole_text(
    secrets: list[str], text: str, cuts: list[int]
) -> None:
    """Whatever the chunks, the stream sends what redacting the whole text would."""
    redactor = Redactor(secrets)
    stream = redactor.stream()
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    sent = "".join(stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    assert sent + stream.flush() == _oracle(secrets, text)


def test_a_huge_secret_streamed_in_chunks_takes_linear_time() -> None:
    """A 12 MB secret printed whole after 13 MB of other output, in 64 KiB chunks: each
    chunk is decided once (the old stream redacted its held-back tail again each time)."""
    secret = "Q" * 12_000_000 + "z"
    redactor = Redactor()
    redactor.register_credential(secret)
    text = ("y" * 65_000 + "\n") * 200 + secret + "\nend\n"
    stream = redactor.stream()
    began = time.process_time()
    sent = [stream.feed(text[i : i + 65_536]) for i in range(0, len(text), 65_536)]
    out = "".join(sent) + stream.flush()
    spent = time.process_time() - began
    assert "QQQQ" not in out and out.endswith(MARKER + "\nend\n")
    assert spent < 20, f"redaction took {spent:.1f}s of CPU"
