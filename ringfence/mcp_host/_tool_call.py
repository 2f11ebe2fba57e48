"""``tools/call`` without the SDK's output check; the structured result checked with RE2.

The SDK's ``call_tool`` validates a result's ``structuredContent`` against the
tool's ``outputSchema`` with jsonschema, whose ``pattern`` runs on Python's
backtracking ``re`` in the event loop's thread: a server that declares
``^(a+)+$`` and returns a near miss stalls the whole kernel for as long as it
likes, and no deadline cuts a running regex. So the request goes through the
session's public ``send_request`` (the SDK parses the result's shape, nothing
more) and the structured result is checked here, against the schema ringfence
listed, with :func:`~..runtime._schema.linear_validator` (``pattern`` and
``patternProperties`` by RE2, linear time) in a worker thread, under the call's
deadline. A pattern RE2 cannot compile refuses the result, naming it; so does a
schema that cannot be evaluated. Refusals never quote the server's values: an
error's text is outside the nonce frame.

On a 2026-07-28 connection a server may answer ``InputRequiredResult``
(sampling, elicitation or roots asked inside the call); its requests go
through the session's own callbacks (``dispatch_input_request``, the same
Gate-checked path as a legacy server-initiated request) and the call is sent
again, at most ``Client.input_required_max_rounds`` times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import trio
from mcp import Client, MCPError, types
from mcp.client import ClientRequestContext
from pydantic import TypeAdapter

from ..runtime import _schema
from ..runtime._errors import ToolError

__all__ = ["call_tool", "check_structured"]

_RESULT: TypeAdapter[types.CallToolResult | types.InputRequiredResult] = TypeAdapter(
    types.CallToolResult | types.InputRequiredResult
)
# Keyword evaluations one structured result may cost (in a worker thread, under the deadline).
OUTPUT_STEPS = 200_000
_MAX_REASON = 600  # characters of a reason quoting the server's schema
_STATE_ONLY_DELAY = (0.05, 0.25)  # first and largest wait before a retry without input


async def call_tool(
    client: Client,
    remote: str,
    arguments: dict[str, Any],
    *,
    tool: str,
    output_schema: Mapping[str, Any] | None,
    frame: Callable[[str], str],
) -> types.CallToolResult:
    """Send ``tools/call`` for ``remote``; the result, its structured content checked.

    ``tool`` is ringfence's registered name: the only name an error gives;
    ``frame`` marks the server's text an error quotes (a pattern) as untrusted.
    Raises ToolError when the result breaks the listed ``output_schema``.
    """
    session = client.session
    responses: types.InputResponses | None = None
    state: str | None = None
    rounds = 0
    delay = _STATE_ONLY_DELAY[0]
    while True:
        params = types.CallToolRequestParams(
            name=remote, arguments=arguments, input_responses=responses, request_state=state
        )
        result = await session.send_request(types.CallToolRequest(params=params), _RESULT)
        if isinstance(result, types.CallToolResult):
            break
        rounds += 1
        if rounds > client.input_required_max_rounds:
            raise ToolError(
                f"{tool}: the server asked for input more than "
                f"{client.input_required_max_rounds} times in one call; the call was abandoned",
                tool=tool,
            )
        state = result.request_state
        if result.input_requests:
            delay = _STATE_ONLY_DELAY[0]
            responses = {}
            for key, request in result.input_requests.items():
                context = ClientRequestContext(session=session, request_id=key)
                answer = await session.dispatch_input_request(context, request)
                if isinstance(answer, types.ErrorData):
                    raise MCPError(code=answer.code, message=answer.message)
                responses[key] = answer
        else:
            await trio.sleep(delay)
            delay = min(delay * 2, _STATE_ONLY_DELAY[1])
            responses = None
    if output_schema is not None and not result.is_error:
        await trio.to_thread.run_sync(
            check_structured, tool, dict(output_schema), result, frame, abandon_on_cancel=True
        )
    return result


def check_structured(
    tool: str, schema: dict[str, Any], result: types.CallToolResult, frame: Callable[[str], str]
) -> None:
    """Refuse a result whose structured content the tool's ``outputSchema`` does not accept.

    RE2 matches every pattern (linear time); a pattern RE2 cannot compile (named
    inside ``frame``: the server wrote it), or a schema jsonschema cannot
    evaluate, refuses the result. A mismatch names the failing keyword and its
    depth, never a value or key the server chose.
    """
    where = f"{tool} returned a result its server's own outputSchema"
    if result.structured_content is None:
        raise ToolError(
            f"{tool} declares an outputSchema but returned no structured content; "
            "the result was refused",
            tool=tool,
            field="outputSchema",
        )
    try:
        validator = _schema.linear_validator(schema, OUTPUT_STEPS)
        errors = list(validator.iter_errors(result.structured_content))
    except _schema.Uncheckable as exc:
        raise ToolError(
            f"{where} cannot be checked safely, so the result was refused:\n"
            + frame(str(exc)[:_MAX_REASON]),
            tool=tool,
            field="outputSchema",
        ) from None
    except Exception as exc:  # a bad schema: an unknown $ref, a bad type
        raise ToolError(
            f"{where} cannot be evaluated ({type(exc).__name__}); the result was refused",
            tool=tool,
            field="outputSchema",
        ) from None
    if errors:
        first = errors[0]
        keyword = first.validator if isinstance(first.validator, str) else "?"
        raise ToolError(
            f"{where} refuses (keyword {keyword!r} at depth {len(first.absolute_path)}, "
            f"{len(errors)} problem{'s' if len(errors) != 1 else ''}); the result was refused",
            tool=tool,
            field="outputSchema",
        )
