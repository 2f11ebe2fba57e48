"""OpenTelemetry export of the event stream (the optional extra ``ringfence[otel]``).

:class:`OtelObserver` reads the records the kernel writes (already redacted and
hash-chained; the event file stays the record of truth) and turns them into spans:

- one ``ringfence.session`` span per session (``session_started`` → ``session_sealed``);
- one ``ringfence.call`` span per call (``proposed`` → its outcome), a child of
  its parent call (a script's nested calls, by ``parent_id``) or else of the
  session (``serve``'s and the CLI's calls), with the attributes
  ``ringfence.tool``, ``.origin``, ``.call_id``, ``.trace_id``, ``.decision``,
  ``.rule``, ``.reason``, ``.approval``, ``.consequence``, ``.backend``,
  ``.outcome`` and ``.error.code``; a failed call has status ERROR;
- other records of a call (``approval_asked``, ``output``, tool events) as span
  events carrying only their kind and stream — no text.

Arguments and results leave the process only with ``payloads=True`` (the
operator's opt-in), as the redacted text of the record, capped at
``PAYLOAD_CHARS`` characters (head…tail and size). Span times are the records'
own timestamps. What is not promised: delivery (an unreachable collector loses
spans; the event file does not), and nothing here is signed — verify the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .runtime._events import OUTCOME_KINDS

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["PAYLOAD_CHARS", "OtelObserver", "otlp_tracer_provider"]

PAYLOAD_CHARS = 1024
INSTRUMENTATION = "ringfence"


def _require() -> None:
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        from .runtime._errors import Unavailable

        raise Unavailable(
            "OpenTelemetry export needs the otel extra: pip install 'ringfence[otel]' "
            "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
        ) from None


def _cap(text: str, limit: int = PAYLOAD_CHARS) -> str:
    if len(text) <= limit:
        return text
    keep = limit // 2 - 20
    return f"{text[:keep]}…{text[-keep:]} ({len(text):,} characters)"


def _ns(record: dict[str, Any]) -> int | None:
    ts = record.get("ts")
    return int(float(ts) * 1e9) if isinstance(ts, int | float) else None


class OtelObserver:
    """Feeds event lines (``observer(line)``) into spans of ``tracer_provider``.

    ``consequence_of(tool)`` names a tool's consequence (the records do not
    carry it); ``payloads`` opts in to redacted, capped arguments and results.
    Not thread-safe: the kernel writes records from one trio thread.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        payloads: bool = False,
        consequence_of: Callable[[str], str | None] = lambda _tool: None,
    ) -> None:
        _require()
        from opentelemetry import trace

        self._tracer: Tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
        self.payloads = payloads
        self.consequence_of = consequence_of
        self._session: Span | None = None
        self._calls: dict[str, Span] = {}

    def __call__(self, line: str) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if isinstance(record, dict):
            self.record(record)

    def record(self, r: dict[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        kind = r.get("kind")
        if kind == "session_started":
            self._end_session(_ns(r))
            self._session = self._tracer.start_span(
                "ringfence.session",
                start_time=_ns(r),
                attributes={
                    "ringfence.trace_id": str(r.get("trace_id")),
                    "ringfence.posture": str(r.get("posture")),
                    "ringfence.dry_run": bool(r.get("dry_run")),
                },
            )
            return
        if kind == "session_sealed":
            self._end_session(_ns(r))
            return
        call_id = r.get("call_id")
        if not isinstance(call_id, str):
            return
        if kind == "proposed":
            parent = self._calls.get(str(r.get("parent_id"))) or self._session
            context = trace.set_span_in_context(parent) if parent is not None else None
            tool = str(r.get("tool"))
            attributes: dict[str, Any] = {
                "ringfence.tool": tool,
                "ringfence.call_id": call_id,
                "ringfence.trace_id": str(r.get("trace_id")),
                "ringfence.origin": str(r.get("origin")),
            }
            consequence = self.consequence_of(tool)
            if consequence:
                attributes["ringfence.consequence"] = consequence
            if self.payloads:
                attributes["ringfence.arguments"] = _cap(
                    json.dumps(r.get("arguments"), ensure_ascii=False, sort_keys=True)
                )
            self._calls[call_id] = self._tracer.start_span(
                f"ringfence.call {tool}",
                context=context,
                start_time=_ns(r),
                attributes=attributes,
            )
            return
        span = self._calls.get(call_id)
        if span is None:
            return
        if kind == "decided":
            for key in ("verdict", "rule", "reason", "layer", "source"):
                if r.get(key) is not None:
                    name = "decision" if key == "verdict" else key
                    span.set_attribute(f"ringfence.{name}", str(r[key]))
        elif kind == "approval_answered":
            span.set_attribute("ringfence.approval", str(r.get("choice")))
        elif kind == "backend_started" and r.get("backend") is not None:
            span.set_attribute("ringfence.backend", str(r["backend"]))
        elif kind in OUTCOME_KINDS:
            span.set_attribute("ringfence.outcome", str(kind))
            error = r.get("error")
            if isinstance(error, dict):
                code = str(error.get("code"))
                span.set_attribute("ringfence.error.code", code)
                span.set_status(Status(StatusCode.ERROR, code))
            if self.payloads and "output" in r:
                span.set_attribute("ringfence.result", _cap(str(r["output"])))
            span.end(end_time=_ns(r))
            del self._calls[call_id]
        else:
            attributes = {"ringfence.stream": str(r["stream"])} if "stream" in r else {}
            span.add_event(str(kind), attributes=attributes, timestamp=_ns(r))

    def _end_session(self, end_ns: int | None) -> None:
        for span in self._calls.values():  # calls the log never closed (a crash, a cut)
            span.set_attribute("ringfence.outcome", "unfinished")
            span.end(end_time=end_ns)
        self._calls.clear()
        if self._session is not None:
            self._session.end(end_time=end_ns)
            self._session = None

    def close(self) -> None:
        """End whatever is still open (the kernel closed without sealing)."""
        self._end_session(None)


def otlp_tracer_provider(service_name: str = "ringfence") -> TracerProvider:
    """A provider exporting over OTLP/HTTP to ``$OTEL_EXPORTER_OTLP_ENDPOINT``
    (default ``http://localhost:4318``); call ``shutdown()`` to flush it."""
    _require()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        from .runtime._errors import Unavailable

        raise Unavailable(
            "--otel needs the OTLP exporter: pip install 'ringfence[otel]' "
            "(opentelemetry-exporter-otlp-proto-http)"
        ) from None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = SdkProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
