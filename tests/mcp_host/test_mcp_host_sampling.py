"""Sampling and elicitation: default deny, bounds, approval, redaction both ways, URL mode never opened."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
import trio
from mcp_host_helpers import events_of, manifest, py_server, toml_str

from ringfence.mcp_host import ElicitationAnswer, connect_servers
from ringfence.mcp_host.testing import FakeSamplingProvider, ScriptedElicitor
from ringfence.runtime import ApprovalAnswer, Posture, Rules
from ringfence.runtime._redact import MARKER

SAMPLING = 'sampling_policy = "allow"\nsampling_allowed_models = ["fake-large", "fake-small"]\nsampling_max_tokens = 100\nsampling_total_tokens = 150'


async def test_sampling_is_denied_by_default(make_kernel, state: Path) -> None:
    provider = FakeSamplingProvider()
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke("mcp.notes.sample", {"prompt": "hi"})
        assert out.error is not None and out.error.code == "tool_error"
    assert provider.requests == [] and not (state / "sampled.log").exists()


async def test_sampling_within_bounds_redacted_both_ways(make_kernel, sink, state: Path) -> None:
    secret = "sk-" + secrets.token_hex(12)
    provider = FakeSamplingProvider(reply=lambda r: f"the key is {secret}", tokens_used=60)
    m = manifest(py_server("notes", "annotated.py", state=state, extra=SAMPLING))
    kernel = make_kernel()
    kernel.register_secret(secret)
    async with kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke(
            "mcp.notes.sample", {"prompt": f"repeat {secret}", "max_tokens": 80}
        )
        assert out.ok, out.error
        (request,) = provider.requests
        # The provider got the server's message only, with the secret redacted, and the hinted model.
        assert request.messages == (("user", f"repeat {MARKER}"),)
        assert request.model == "fake-small" and request.max_tokens == 80
        # The server received the provider's answer with the secret redacted.
        assert (state / "sampled.log").read_text() == f"fake-small: the key is {MARKER}\n"

        # 60 of 150 tokens used: another 100 would exceed the session budget.
        over = await kernel.invoke("mcp.notes.sample", {"prompt": "again", "max_tokens": 100})
        assert over.error is not None
        # And more than sampling_max_tokens in one request is refused outright.
        over = await kernel.invoke("mcp.notes.sample", {"prompt": "again", "max_tokens": 101})
        assert over.error is not None
        assert len(provider.requests) == 1
    (requested, *_) = events_of(sink, "mcp_sampling_requested")
    (finished,) = events_of(sink, "mcp_sampling_finished")
    # Its own trace, not the tool call's; in it the request went through the Gate as a call.
    tool_traces = {
        e["trace_id"] for e in events_of(sink, "proposed") if e["tool"] == "mcp.notes.sample"
    }
    assert (
        requested["trace_id"] == finished["trace_id"] and requested["trace_id"] not in tool_traces
    )
    gated = [e for e in sink.records() if e["trace_id"] == requested["trace_id"]]
    assert [e["kind"] for e in gated] == [
        "mcp_sampling_requested", "proposed", "decided", "started", "finished", "mcp_sampling_finished"
    ]  # fmt: skip
    assert gated[1]["tool"] == "mcp.notes.__sampling" and gated[1]["origin"] == "mcp-sampling"
    assert gated[2]["rule"] == "autonomous:mcp.notes.__sampling"
    assert finished["model"] == "fake-small" and finished["tokens_left"] == 90
    assert len(events_of(sink, "mcp_sampling_refused")) == 2
    assert secret not in "\n".join(sink.lines)


async def test_sampling_offers_no_tools(make_kernel, state: Path) -> None:
    provider = FakeSamplingProvider()
    m = manifest(py_server("notes", "annotated.py", state=state, extra=SAMPLING))
    async with make_kernel() as kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke(
            "mcp.notes.sample", {"prompt": "use the shell", "offer_tools": True}
        )
        assert out.error is not None
    assert provider.requests == []


async def test_sampling_ask_asks_every_time(make_kernel, state: Path) -> None:
    provider = FakeSamplingProvider()
    extra = 'sampling_policy = "ask"\nsampling_allowed_models = ["fake-small"]'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    kernel = make_kernel([ApprovalAnswer.deny("no sampling"), ApprovalAnswer.session("ok")])
    async with kernel, connect_servers(kernel, m, sampling_provider=provider):
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "one"})).error is not None
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "two"})).ok
        # "For this session" does not stick for sampling: the next one asks again (and is denied).
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "three"})).error is not None
    asked = kernel.approver.requests
    assert [r.tool for r in asked] == ["mcp.notes.__sampling"] * 3
    assert asked[1].arguments["messages"] == [{"role": "user", "text": "two"}]
    assert [r.messages[0][1] for r in provider.requests] == ["two"]


async def test_sampling_runs_behind_one_lock(make_kernel, state: Path) -> None:
    class Slow:
        active = 0
        most = 0

        async def create_message(self, request):
            Slow.active += 1
            Slow.most = max(Slow.most, Slow.active)
            await trio.sleep(0.1)
            Slow.active -= 1
            return await FakeSamplingProvider().create_message(request)

    m = manifest(
        py_server("a", "annotated.py", state=state, extra=SAMPLING),
        py_server("b", "annotated.py", state=state, extra=SAMPLING),
    )
    async with (
        make_kernel() as kernel,
        connect_servers(kernel, m, sampling_provider=Slow()),
        trio.open_nursery() as n,
    ):
        for server in ("a", "b", "a"):
            n.start_soon(kernel.call, f"mcp.{server}.sample", {"prompt": "p"})
    assert Slow.most == 1
    assert len((state / "sampled.log").read_text().splitlines()) == 3


async def test_elicitation_is_denied_by_default(make_kernel, state: Path) -> None:
    elicitor = ScriptedElicitor([ElicitationAnswer("accept", {"city": "Paris"})])
    m = manifest(py_server("notes", "annotated.py", state=state))
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):
        out = await kernel.invoke("mcp.notes.ask_form", {})
        assert out.error is not None
    assert elicitor.prompts == []


async def test_elicitation_form_is_validated(make_kernel, sink, state: Path) -> None:
    elicitor = ScriptedElicitor(
        [ElicitationAnswer("accept", {"city": "Paris"}), ElicitationAnswer("accept", {"city": 5})]
    )
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "allow"')
    )
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):
        ok = await kernel.call("mcp.notes.ask_form", {})
        assert "accept: {'city': 'Paris'}" in ok["text"]
        bad = await kernel.call("mcp.notes.ask_form", {})
        assert "cancel" in bad["text"]  # an answer that does not match the form is not sent
    assert elicitor.prompts[0].requested_schema["properties"]["city"]["type"] == "string"
    assert [e["action"] for e in events_of(sink, "mcp_elicitation_answered")] == [
        "accept",
        "cancel",
    ]


async def test_elicitation_never_asks_for_credentials(make_kernel, state: Path) -> None:
    elicitor = ScriptedElicitor(lambda p: ElicitationAnswer("accept", {"x": "hunter2"}))
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "allow"')
    )
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor) as cs:
        for field in (
            "password",
            "apiKey",
            "credit_card_number",
            "otp",
            "github_token",
            "private_key",
        ):
            out = await kernel.invoke("mcp.notes.ask_form", {"field": field})
            assert out.error is not None, field
        failures = cs["notes"].diagnostics.failures
        refusals = [
            f for f in failures if f["action"] == "elicitation" and "credentials" in f["message"]
        ]
        assert len(refusals) == 6
    assert elicitor.prompts == []  # none of the forms was shown


async def test_url_elicitation_is_shown_whole_and_never_opened(make_kernel, state: Path) -> None:
    hits: list[bytes] = []
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def record(stream: trio.SocketStream) -> None:
        hits.append(await stream.receive_some(100))

    url = f"http://127.0.0.1:{port}/consent?state=abc"
    elicitor = ScriptedElicitor([ElicitationAnswer("accept")])
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "allow"')
    )
    async with trio.open_nursery() as n:
        await n.start(trio.serve_listeners, record, listeners)
        async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):
            out = await kernel.call("mcp.notes.ask_url", {"url": url})
            assert out["text"].splitlines()[1] == "accept"
            refused = await kernel.invoke(
                "mcp.notes.ask_url", {"url": "https://user:pw@example.com/x"}
            )
            assert refused.error is not None
        n.cancel_scope.cancel()
    (prompt,) = elicitor.prompts
    assert prompt.mode == "url" and prompt.url == url  # the whole URL, query included
    assert hits == []  # nothing connected to it


async def test_elicitation_ask_policy_asks_first(make_kernel, state: Path) -> None:
    elicitor = ScriptedElicitor([ElicitationAnswer("accept", {"city": "Oslo"})])
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "ask"')
    )
    kernel = make_kernel([ApprovalAnswer.deny("not now"), ApprovalAnswer.once()])
    async with kernel, connect_servers(kernel, m, elicitor=elicitor):
        first = await kernel.call("mcp.notes.ask_form", {})
        assert "decline" in first["text"] and elicitor.prompts == []
        second = await kernel.call("mcp.notes.ask_form", {})
        assert "Oslo" in second["text"]
    assert [r.tool for r in kernel.approver.requests] == ["mcp.notes.__elicitation"] * 2


@pytest.mark.npm
async def test_everything_sampling_elicitation_and_roots_round_trips(
    make_kernel, tmp_path: Path, everything_bin: Path
) -> None:
    binary = everything_bin
    extra = f'{SAMPLING}\nelicitation_policy = "allow"\nroots = [{toml_str(tmp_path)}]\n'
    block = f'[[server]]\nname = "everything"\ntransport = "stdio"\ncommand = {toml_str(binary)}\nargs = ["stdio"]\n{extra}'
    provider = FakeSamplingProvider(reply=lambda r: "sampled by the fake")
    elicitor = ScriptedElicitor(lambda p: ElicitationAnswer("decline"))
    kernel = make_kernel(posture=Posture.ALLOW_ALL)
    async with (
        kernel,
        connect_servers(
            kernel, manifest(block), sampling_provider=provider, elicitor=elicitor
        ) as cs,
    ):
        remote = {t.remote_name: t.name for t in cs["everything"].tools}
        assert {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"} <= set(
            remote
        )
        out = await kernel.call(
            remote["trigger-sampling-request"], {"prompt": "hello", "maxTokens": 20}
        )
        assert "sampled by the fake" in out["text"]
        assert provider.requests[0].max_tokens == 20
        roots = await kernel.call(remote["get-roots-list"], {})
        assert tmp_path.as_uri() in roots["text"]
        await kernel.invoke(remote["trigger-elicitation-request"], {})
        assert elicitor.prompts and elicitor.prompts[0].mode == "form"


# -- one door: the session's rules, grants and dry runs apply to server requests (issue 13) --


async def test_deny_rules_refuse_sampling_and_elicitation(make_kernel, sink, state: Path) -> None:
    provider = FakeSamplingProvider()
    elicitor = ScriptedElicitor([ElicitationAnswer("accept", {"city": "Paris"})])
    extra = f'{SAMPLING}\nelicitation_policy = "allow"'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    # "allow" in the manifest does not outrank the operator's deny rule.
    kernel = make_kernel(rules=Rules(deny=("*.__sampling", "*.__elicitation")))
    async with (
        kernel,
        connect_servers(kernel, m, sampling_provider=provider, elicitor=elicitor),
    ):
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "hi"})).error is not None
        declined = await kernel.call("mcp.notes.ask_form", {})
        assert "decline" in declined["text"]
    assert provider.requests == [] and elicitor.prompts == []
    assert not (state / "sampled.log").exists()
    decided = {e["tool"]: e for e in events_of(sink, "decided") if "__" in e["tool"]}
    assert decided["mcp.notes.__sampling"]["rule"] == "deny:*.__sampling"
    assert decided["mcp.notes.__elicitation"]["rule"] == "deny:*.__elicitation"
    assert not [e for e in events_of(sink, "started") if "__" in e["tool"]]


async def test_a_session_grant_covers_the_same_sampling_request(make_kernel, state: Path) -> None:
    provider = FakeSamplingProvider()
    extra = 'sampling_policy = "ask"\nsampling_allowed_models = ["fake-small"]'
    m = manifest(py_server("notes", "annotated.py", state=state, extra=extra))
    kernel = make_kernel([ApprovalAnswer.session("ok")])
    async with kernel, connect_servers(kernel, m, sampling_provider=provider):
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "same"})).ok
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "same"})).ok  # granted
        assert (await kernel.invoke("mcp.notes.sample", {"prompt": "other"})).error is not None
    assert [r.tool for r in kernel.approver.requests] == ["mcp.notes.__sampling"] * 2
    assert [r.messages[0][1] for r in provider.requests] == ["same", "same"]


async def test_sampling_tools_are_not_callable_by_name(make_kernel, state: Path) -> None:
    provider = FakeSamplingProvider()
    m = manifest(py_server("notes", "annotated.py", state=state, extra=SAMPLING))
    async with make_kernel() as kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke("mcp.notes.__sampling", {"server": "notes"})
        assert out.error is not None and out.error.code == "not_found"
    assert provider.requests == []


@pytest.mark.parametrize(
    ("asked", "shown"),
    [
        # A Cyrillic "\u0456" for the "i": reads github.com, resolves elsewhere.
        ("https://g\u0456thub.com/login/device", "https://xn--gthub-n2e.com/login/device"),
        # A division slash inside the host: reads as a path on github.com.
        (
            "https://evil.example\u2215github.com/login",
            "https://evil.xn--examplegithub-9i2h.com/login",
        ),
        # A right-to-left override in the fragment: the tail reads "https://github.com".
        (
            "https://evil.example/#\u202emoc.buhtig//:sptth",
            "https://evil.example/#%E2%80%AEmoc.buhtig//:sptth",
        ),
        # An invisible word joiner and a look-alike letter in the path.
        ("https://evil.example/\u2060g\u0456thub", "https://evil.example/%E2%81%A0g%D1%96thub"),
    ],
    ids=["cyrillic-letter", "division-slash", "rtl-override-in-fragment", "invisible-in-path"],
)
async def test_a_url_elicitation_shows_its_host_as_dns_sees_it(
    make_kernel, sink, state: Path, asked: str, shown: str
) -> None:
    """URL mode is where credential flows belong, so the person must see where the URL goes:
    a look-alike host is shown (and recorded) in its IDNA ASCII form, never as it reads."""
    elicitor = ScriptedElicitor([ElicitationAnswer("decline")])
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "allow"')
    )
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):
        out = await kernel.call("mcp.notes.ask_url", {"url": asked})
        assert out["text"].splitlines()[1] == "decline"
    (prompt,) = elicitor.prompts
    assert prompt.url == shown
    # The Gate decided (and recorded) the request with the URL as shown.
    (proposed,) = [r for r in events_of(sink, "proposed") if r["tool"].endswith("__elicitation")]
    assert proposed["arguments"]["url"] == shown


@pytest.mark.parametrize(
    "asked",
    [
        # Python (and a reader) takes "evil.example\.github.com" as the host; a browser goes
        # to evil.example with the path "/.github.com/login".
        "https://evil.example\\.github.com/login",
        "https://evil.example\\\\github.com/login/device",
    ],
    ids=["backslash-dot", "double-backslash"],
)
async def test_a_url_elicitation_with_a_backslash_is_refused_unseen(
    make_kernel, sink, state: Path, asked: str
) -> None:
    """A browser reads a backslash in an https URL as '/', so the host a person would read
    (a github.com subdomain) is not the one the browser opens: the request never reaches the
    person, and the event stream says why."""
    elicitor = ScriptedElicitor([ElicitationAnswer("accept")])
    m = manifest(
        py_server("notes", "annotated.py", state=state, extra='elicitation_policy = "allow"')
    )
    async with make_kernel() as kernel, connect_servers(kernel, m, elicitor=elicitor):
        out = await kernel.invoke("mcp.notes.ask_url", {"url": asked})
        assert out.error is not None or "accept" not in out.value["text"]
    assert elicitor.prompts == []
    (refused,) = events_of(sink, "mcp_elicitation_refused")
    assert "backslash" in refused["reason"]
    assert not [r for r in events_of(sink, "proposed") if r["tool"].endswith("__elicitation")]


async def test_a_huge_sampling_request_is_refused_before_it_is_recorded(
    make_kernel, sink, state: Path
) -> None:
    """A server's sampling request of 4 MiB of text (the tool call asking for it is a few bytes):
    it was recorded whole as the ``proposed`` arguments of ``mcp.notes.__sampling`` (and shown
    to the approver, and sent to the provider), so within the request budget a server could
    write 20 x 32 MiB to the event log per minute. Over 1 Mi characters it is now refused before
    it is recorded, shown or sent, naming the limit; a small one still goes through."""
    from ringfence.mcp_host._sampling import MAX_SAMPLING_CHARACTERS

    provider = FakeSamplingProvider()
    m = manifest(py_server("notes", "annotated.py", state=state, extra=SAMPLING))
    async with make_kernel() as kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke("mcp.notes.sample", {"prompt": "abcd", "repeat": 1 << 20})
        assert out.error is not None
        assert f"{MAX_SAMPLING_CHARACTERS:,}" in out.error.message, out.error.message
        assert provider.requests == []
        small = await kernel.invoke("mcp.notes.sample", {"prompt": "hi"})
        assert small.ok, small.error
    assert len(provider.requests) == 1
    (refused,) = events_of(sink, "mcp_sampling_refused")
    assert "4,194,304 characters" in refused["reason"]
    sampled = [e for e in events_of(sink, "proposed") if e["tool"] == "mcp.notes.__sampling"]
    assert len(sampled) == 1 and len(json.dumps(sampled)) < 10_000
    assert max(len(line) for line in sink.lines) < 100_000


@pytest.mark.parametrize(
    ("asked", "what"),
    [
        ({"prompt": "hi", "stops": 40_000}, "stop sequences"),  # 2.6 MB of stop sequences
        ({"prompt": "hi", "messages": 100_000}, "messages"),  # 100,000 empty messages
    ],
)
async def test_a_sampling_request_huge_outside_its_text_is_refused_before_it_is_recorded(
    make_kernel, sink, state: Path, asked: dict[str, object], what: str
) -> None:
    """The 1 Mi character bound counted only the messages' text and the system prompt: a
    request of two characters of text and 40,000 stop sequences (2.6 MB), or 100,000 empty
    messages, was recorded whole as the ``proposed`` arguments of ``mcp.notes.__sampling``
    (and shown, and sent), 20 such requests a minute. Everything the request would record
    counts now: it is refused before it is recorded, shown or sent, naming the limit."""
    from ringfence.mcp_host._sampling import MAX_SAMPLING_CHARACTERS

    provider = FakeSamplingProvider()
    m = manifest(py_server("notes", "annotated.py", state=state, extra=SAMPLING))
    async with make_kernel() as kernel, connect_servers(kernel, m, sampling_provider=provider):
        out = await kernel.invoke("mcp.notes.sample", asked)
        assert out.error is not None
        assert f"{MAX_SAMPLING_CHARACTERS:,}" in out.error.message, out.error.message
        assert provider.requests == []
    (refused,) = events_of(sink, "mcp_sampling_refused")
    assert what in refused["reason"], refused["reason"]
    assert not [e for e in events_of(sink, "proposed") if e["tool"] == "mcp.notes.__sampling"]
    assert max(len(line) for line in sink.lines) < 100_000
    assert not (state / "sampled.log").exists()
