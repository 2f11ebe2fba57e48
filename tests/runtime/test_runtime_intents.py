"""Signed intents: a tampered, expired, replayed or missing intent runs nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio
from runtime_helpers import Ledger, register_standard_tools

from ringfence.runtime import Denied, Kernel, Posture
from ringfence.runtime._calls import Authorization
from ringfence.runtime._intents import verify_intent


@pytest.fixture
async def kernel(ledger: Ledger):
    async with Kernel(posture=Posture.UNRESTRICTED, intent_ttl_seconds=5) as k:
        register_standard_tools(k, ledger)
        yield k


async def test_valid_intent_runs_once(kernel: Kernel, ledger: Ledger) -> None:
    auth = await kernel.authorize("launch", {"x": "a"})
    await kernel.execute(auth)
    assert ledger.names() == ["launch"]
    with pytest.raises(Denied, match="replay"):
        await kernel.execute(auth)
    assert ledger.names() == ["launch"]


def forge(auth: Authorization, **changes: Any) -> Authorization:
    """What only code reaching past the Gate's mint can do: the intent must still refuse it."""
    fields = {f.name: getattr(auth, f.name) for f in dataclasses.fields(auth)}
    return Authorization._create(**{**fields, **changes})


async def test_authorizations_are_minted_only_by_the_gate(kernel: Kernel, ledger: Ledger) -> None:
    auth = await kernel.authorize("launch", {"x": "a"})
    with pytest.raises(TypeError, match="no public constructor"):
        dataclasses.replace(auth, arguments={"x": "rm -rf /"})
    with pytest.raises(TypeError, match="no public constructor"):
        Authorization(auth.spec, {"x": "b"}, auth.decision, "c", "t", "direct", auth.intent)
    assert ledger.runs == []


@pytest.mark.parametrize(
    "change",
    [
        {"tool": "peek"},
        {"arguments_sha256": "0" * 64},
        {"rule": "deny:*"},
        {"expires_at": 9e12},
        {"nonce": "fresh"},
    ],
)
async def test_altered_intent_is_refused(kernel: Kernel, ledger: Ledger, change: dict) -> None:
    auth = await kernel.authorize("launch", {"x": "a"})
    forged = forge(auth, intent=dataclasses.replace(auth.intent, **change))
    with pytest.raises(Denied, match="signature"):
        await kernel.execute(forged)
    assert ledger.runs == []


async def test_intent_for_other_arguments_is_refused(kernel: Kernel, ledger: Ledger) -> None:
    auth = await kernel.authorize("launch", {"x": "harmless"})
    swapped = forge(auth, arguments={"x": "rm -rf /"})
    with pytest.raises(Denied, match="does not match"):
        await kernel.execute(swapped)
    assert ledger.runs == []


async def test_missing_intent_is_refused(kernel: Kernel, ledger: Ledger) -> None:
    auth = await kernel.authorize("launch", {})
    with pytest.raises(Denied, match="no signed intent"):
        await kernel.execute(forge(auth, intent=None))
    assert ledger.runs == []


async def test_expired_intent_is_refused(ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED, intent_ttl_seconds=0.01) as kernel:
        register_standard_tools(kernel, ledger)
        auth = await kernel.authorize("launch", {})
        await trio.sleep(0.05)
        with pytest.raises(Denied, match="expired"):
            await kernel.execute(auth)
    assert ledger.runs == []


async def test_intent_from_another_kernel_is_refused(kernel: Kernel, ledger: Ledger) -> None:
    async with Kernel(posture=Posture.UNRESTRICTED) as other:
        register_standard_tools(other, ledger)
        foreign = await other.authorize("launch", {})
    mine = await kernel.authorize("launch", {})
    with pytest.raises(Denied, match="signature"):
        await kernel.execute(forge(mine, intent=foreign.intent))
    assert ledger.runs == []


async def test_an_intent_crossing_a_process_is_signed_and_the_public_key_alone_checks_it(
    kernel: Kernel, ledger: Ledger
) -> None:
    pem = kernel.public_key_pem()
    local = await kernel.authorize("launch", {"x": "a"})
    # In process: HMAC-tagged only; nothing an outsider could check, nothing to leak.
    assert local.intent.signature == b"" and not verify_intent(pem, local.intent)
    signed = kernel._authority.issue_signed("launch", {"x": "a"}, "allow", "posture:unrestricted")
    assert verify_intent(pem, signed)
    assert not verify_intent(pem, dataclasses.replace(signed, tool="peek"))
    assert not verify_intent(pem, dataclasses.replace(signed, nonce="fresh"))
    # The issuing kernel still redeems it (its tag covers the signature too), once.
    await kernel.execute(forge(local, intent=signed))
    assert ledger.names() == ["launch"]
    with pytest.raises(Denied, match="replay"):
        await kernel.execute(forge(local, intent=signed))


def test_the_session_key_pem_is_what_cryptography_writes_and_reads() -> None:
    """public_key_pem builds the SubjectPublicKeyInfo itself (no serialization import on the
    call path); it must be byte for byte cryptography's PEM, and load back as the same key."""
    from cryptography.hazmat.primitives import serialization

    from ringfence.runtime._intents import IntentAuthority, key_fingerprint, load_public_keys

    for _ in range(20):
        authority = IntentAuthority()
        public = authority._public
        expected = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()
        assert authority.public_key_pem() == expected
        (loaded,) = load_public_keys(expected)
        assert key_fingerprint(loaded) == key_fingerprint(public)
