"""OpenTelemetry export: spans from a real session (in-memory exporter) and from the
``ringfence`` command over OTLP/HTTP to a receiver on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from ringfence import create_kernel
from ringfence.cli._main import main
from ringfence.otel import OtelObserver
from ringfence.runtime import ApprovalAnswer, ScriptedApprover, verify_file

SECRET = "sk-live-0123456789abcdefSECRET"


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    managed = tmp_path / "managed-policy.toml"
    managed.write_text("# no managed rules\n")
    monkeypatch.setenv("RINGFENCE_MANAGED_POLICY", str(managed))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def approve_reads_and_scripts(request: Any) -> ApprovalAnswer:
    if request.tool == "write_file":
        return ApprovalAnswer.deny("no writes")
    return ApprovalAnswer.once("ok")


async def run_session(ws: Path, events: Path, observer: OtelObserver) -> None:
    async with create_kernel(
        roots=[ws],
        backend="local",
        approver=ScriptedApprover(approve_reads_and_scripts),
        events_path=events,
        event_observer=observer,
    ) as kernel:
        observer.consequence_of = lambda tool: (
            kernel.registry.get(tool).consequence.value if tool in kernel.registry else None
        )
        script = "call_tool('read_file', path='notes.txt')\nresult = 'done'\n"
        outcome = await kernel.invoke("run_tool_script", {"script": script, "timeout_seconds": 30})
        assert outcome.ok, outcome.error
        await kernel.invoke("write_file", {"path": "w.txt", "content": "x"})
        await kernel.invoke("read_file", {"path": "missing.txt", "api_key": SECRET})
        await kernel.invoke("read_file", {"path": "notes.txt", "limit": "x" * 50_000})


def spans_of(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


async def test_each_call_is_a_span_under_its_session_and_parent(ws: Path, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    events = tmp_path / "events.jsonl"
    await run_session(ws, events, OtelObserver(provider))
    assert verify_file(events).ok  # the file is untouched by the export

    spans = spans_of(exporter)
    session = next(s for s in spans if s.name == "ringfence.session")
    calls = [s for s in spans if s.name.startswith("ringfence.call ")]
    by_tool: dict[str, list[ReadableSpan]] = {}
    for s in calls:
        by_tool.setdefault(s.attributes["ringfence.tool"], []).append(s)
    script = by_tool["run_tool_script"][0]
    nested = next(s for s in by_tool["read_file"] if s.attributes["ringfence.origin"] == "script")
    assert script.parent.span_id == session.context.span_id
    assert nested.parent.span_id == script.context.span_id  # nested under the script
    assert {s.context.trace_id for s in spans} == {session.context.trace_id}
    assert script.attributes["ringfence.decision"] == "ask"
    assert script.attributes["ringfence.approval"] == "once"
    assert script.attributes["ringfence.consequence"] == "irreversible"
    assert nested.attributes["ringfence.decision"] == "allow"
    assert nested.attributes["ringfence.rule"] == "posture:ask"
    assert nested.attributes["ringfence.outcome"] == "finished"
    assert nested.start_time <= nested.end_time

    write = by_tool["write_file"][0]
    assert write.attributes["ringfence.error.code"] == "denied"
    assert write.status.status_code is StatusCode.ERROR
    missing = [s for s in by_tool["read_file"] if s.attributes["ringfence.origin"] != "script"]
    assert all(s.attributes["ringfence.outcome"] == "failed" for s in missing)
    # Arguments and results stay out unless the operator opts in.
    everything = json.dumps([dict(s.attributes) for s in spans])
    assert "ringfence.arguments" not in everything and "hello" not in everything
    assert SECRET not in everything


async def test_payloads_are_opt_in_redacted_and_capped(ws: Path, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run_session(ws, tmp_path / "events.jsonl", OtelObserver(provider, payloads=True))
    spans = spans_of(exporter)
    attrs = [dict(s.attributes) for s in spans]
    assert any("hello" in str(a.get("ringfence.result", "")) for a in attrs)
    everything = json.dumps(attrs)
    assert SECRET not in everything  # the record was redacted before export
    longest = max(len(str(a.get("ringfence.arguments", ""))) for a in attrs)
    assert 0 < longest <= 1100 and "characters)" in everything


class Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        Receiver.bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.bodies = []
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_exports_over_otlp_to_a_loopback_receiver(
    ws: Path, receiver: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver)
    code = main(["call", "read_file", "--args", '{"path": "notes.txt"}', "--workspace", str(ws),
                 "--backend", "local", "--otel", "--json"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    spans = []
    for body in Receiver.bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
    names = sorted(s.name for s in spans)
    assert names == ["ringfence.call read_file", "ringfence.session"], names
    call = next(s for s in spans if s.name == "ringfence.call read_file")
    attrs = {a.key: a.value.string_value for a in call.attributes}
    assert attrs["ringfence.decision"] == "allow" and attrs["ringfence.outcome"] == "finished"
    assert attrs["ringfence.consequence"] == "read" and "ringfence.arguments" not in attrs
