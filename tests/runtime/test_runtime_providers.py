"""Tools in the shapes model APIs take, and model tool calls answered through the Gate (issue 31).

The formats are checked against the providers' own published types, offline: the
``openai``, ``anthropic`` and ``google-genai`` packages' TypedDicts and pydantic models, and a real
round trip through each SDK's client whose HTTP transport is an in-process
``httpx.MockTransport`` playing a scripted model (the request the SDK builds from our
definitions is what a provider would receive; its recorded reply carries a tool call
the SDK parses into its own type, which we answer). Bedrock's Converse API goes through
``botocore``'s own client, which checks every request against the service's published model
before sending; its ``before-send`` event plays the model. No network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import botocore.session
import httpx2 as httpx
import mcp_types
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from hypothesis import given, settings, strategies as st
from kernel_helpers import Ledger, event_records, make_tool
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionToolMessageParam
from openai.types.responses import FunctionToolParam
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter

import ringfence
from ringfence.runtime import (
    ApprovalAnswer,
    Consequence,
    InvalidArguments,
    Kernel,
    MemorySink,
    ScriptedApprover,
    ToolSpec,
)
from ringfence.runtime._providers import provider_names

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
LETTER_FIRST_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
FORMATS = ("openai-responses", "openai-chat", "anthropic", "gemini", "bedrock", "mcp")


def exact(adapter_type: Any, value: Any) -> None:
    """``value`` validates as ``adapter_type`` and nothing of it is dropped as unknown."""
    validated = TypeAdapter(adapter_type).validate_python(value)
    assert json.loads(json.dumps(validated, default=list)) == json.loads(json.dumps(value))


def native_kernel(tmp_path: Path, **kw: Any) -> Any:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("line one\nline two\n")
    return ringfence.create_kernel(roots=[root], **kw)


# -- the SDKs' own types --------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
async def test_definitions_are_the_sdks_own_types(tmp_path: Path, strict: bool) -> None:
    async with native_kernel(tmp_path) as kernel:
        responses = kernel.tool_definitions("openai-responses", strict=strict)
        chat = kernel.tool_definitions("openai-chat", strict=strict)
        messages = kernel.tool_definitions("anthropic")
        gemini = kernel.tool_definitions("gemini")
        mcp = kernel.tool_definitions("mcp")
    assert len(responses) == len(chat) == len(messages) == len(gemini) == len(mcp) == 10
    for d in responses:
        exact(FunctionToolParam, d)
        assert PROVIDER_NAME.match(d["name"]) and d["strict"] is (
            strict and d["name"] != "run_shell"
        )
    for d in chat:
        exact(ChatCompletionFunctionToolParam, d)
    for d in messages:
        exact(anthropic.types.ToolParam, d)
        assert d["input_schema"]["type"] == "object"
    for d in gemini:
        declaration = genai_types.FunctionDeclaration.model_validate(d)
        assert declaration.model_dump(mode="json", by_alias=True, exclude_none=True) == d
        assert LETTER_FIRST_NAME.match(d["name"]) and d["parametersJsonSchema"]["type"] == "object"
    for d in mcp:
        tool = mcp_types.Tool.model_validate(d)
        assert tool.name == d["name"] and tool.input_schema == d["inputSchema"]
    if strict:  # what strict could not take is said, not hidden
        assert set(responses.loose) == {"run_shell"}
        assert (
            "open object" in responses.loose["run_shell"]
            or "propertyNames" in (responses.loose["run_shell"])
        )


STRICT_KEYWORDS = {
    "type", "description", "enum", "const", "anyOf", "$ref", "$defs", "definitions",
    "properties", "required", "additionalProperties", "items", "pattern", "format",
    "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "minItems",
    "maxItems",
}  # fmt: skip
REFUSED_AT_ROOT = {"anyOf", "oneOf", "allOf", "enum", "not"}


def assert_strict(schema: dict[str, Any], path: str = "") -> None:
    """OpenAI Structured Outputs' documented subset, checked on the whole schema."""
    assert set(schema) <= STRICT_KEYWORDS, (path, set(schema) - STRICT_KEYWORDS)
    if "properties" in schema or schema.get("type") == "object":
        assert schema["additionalProperties"] is False, path
        assert sorted(schema["required"]) == sorted(schema["properties"]), path
        for name, sub in schema["properties"].items():
            assert_strict(sub, f"{path}/{name}")
    for sub in schema.get("anyOf", []):
        assert_strict(sub, f"{path}/anyOf")
    if "items" in schema:
        assert_strict(schema["items"], f"{path}/items")
    for container in ("$defs", "definitions"):
        for name, sub in schema.get(container, {}).items():
            assert_strict(sub, f"{path}/{container}/{name}")


async def test_strict_definitions_keep_to_structured_outputs_subset(tmp_path: Path) -> None:
    kernel = Kernel(roots=[str(tmp_path)])
    ledger = Ledger()
    schemas = {
        "nested": {
            "type": "object",
            "properties": {
                "where": {
                    "type": "object",
                    "properties": {"dir": {"type": "string", "minLength": 1}},
                },
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "mode": {"enum": ["a", "b"]},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "ref": {"$ref": "#/$defs/point"},
            },
            "required": ["where"],
            "$defs": {
                "point": {"type": "object", "properties": {"x": {"type": "number"}}},
            },
        },
        "open": {"type": "object", "properties": {"env": {"type": "object"}}},
        "combined": {"type": "object", "allOf": [{"properties": {"a": {"type": "string"}}}]},
    }
    for name, schema in schemas.items():
        kernel.register(
            ToolSpec(
                name=name,
                description=name,
                input_schema=schema,
                executor=make_tool(name, Consequence.READ, ledger).executor,
                consequence=Consequence.READ,
            )
        )
    async with kernel:
        defs = kernel.tool_definitions("openai-responses", strict=True)
        by_name = {d["name"]: d for d in defs}
        assert by_name["nested"]["strict"] is True
        assert_strict(by_name["nested"]["parameters"])
        # an optional property is nullable; a dropped constraint is told to the model
        where = by_name["nested"]["parameters"]["properties"]["where"]
        assert where["properties"]["dir"]["type"] == ["string", "null"]
        assert "minLength 1" in where["properties"]["dir"]["description"]
        assert by_name["open"]["strict"] is False and "open" in defs.loose
        # the root's allOf is refused at the top by both APIs: dropped from the definition
        # (what is left is an open object, which strict mode cannot take)
        assert by_name["combined"]["strict"] is False and "combined" in defs.loose
        assert "allOf" not in by_name["combined"]["parameters"]
        for d in kernel.tool_definitions("anthropic"):
            assert not REFUSED_AT_ROOT & set(d["input_schema"])
        # the model sends null for what it leaves out (strict mode makes it): dropped,
        # and the Gate checks the call against the tool's own schema
        call = {
            "type": "function_call",
            "call_id": "c1",
            "name": "nested",
            "arguments": json.dumps(
                {"where": {"dir": None}, "tags": None, "mode": None, "either": 3, "ref": None}
            ),
        }
        answer = await kernel.answer_tool_call(call, tools=defs)
        assert "error" not in answer["output"]
        assert ledger.runs == [("nested", {"where": {}, "either": 3})]
        # the Gate still refuses what the tool's own schema refuses (minLength, dropped above)
        call["arguments"] = json.dumps({"where": {"dir": ""}})
        answer = await kernel.answer_tool_call(call, tools=defs)
        assert answer["output"].startswith("error invalid_arguments")
        assert len(ledger.runs) == 1


# -- a scripted model behind each SDK's own client -------------------------------------------


class ScriptedModel:
    """An httpx transport answering each request with the next recorded reply; keeps requests."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        return httpx.Response(200, json=self.replies.pop(0))

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def finished_tools(events: Path) -> list[str]:
    return [r["tool"] for r in event_records(events) if r["kind"] == "finished"]


async def test_openai_responses_round_trip_through_the_sdk(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    model = ScriptedModel(
        [
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 0,
                "model": "scripted",
                "output": [
                    {
                        "type": "function_call",
                        "id": "fc_1",
                        "call_id": "call_1",
                        "name": "read_file",
                        "arguments": '{"path": "notes.txt"}',
                        "status": "completed",
                    }
                ],
            },
            {"id": "resp_2", "object": "response", "created_at": 0, "model": "s", "output": []},
        ]
    )
    client = openai.OpenAI(api_key="offline", http_client=model.client(), max_retries=0)
    async with native_kernel(tmp_path, events_path=events) as kernel:
        tools = kernel.tool_definitions("openai-responses", strict=True)
        first = client.responses.create(
            model="scripted", input="read notes", tools=tools.definitions
        )
        assert model.requests[0]["tools"] == tools.definitions
        (call,) = first.output  # the SDK's own ResponseFunctionToolCall
        assert isinstance(call, openai.types.responses.ResponseFunctionToolCall)
        answer = await kernel.answer_tool_call(call, tools=tools)
        exact(FunctionCallOutput, answer)
        assert answer == {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "line one\nline two\n",
        }
        client.responses.create(model="scripted", input=[call, answer], tools=tools.definitions)
        assert model.requests[1]["input"][1] == answer
    assert finished_tools(events) == ["read_file"]


async def test_openai_chat_round_trip_through_the_sdk(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    tool_call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "list_directory", "arguments": '{"path": "."}'},
    }
    model = ScriptedModel(
        [
            {
                "id": "chat_1",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [tool_call],
                        },
                    }
                ],
            },
            {
                "id": "chat_2",
                "object": "chat.completion",
                "created": 0,
                "model": "s",
                "choices": [],
            },
        ]
    )
    client = openai.OpenAI(api_key="offline", http_client=model.client(), max_retries=0)
    async with native_kernel(tmp_path, events_path=events) as kernel:
        tools = kernel.tool_definitions("openai-chat")
        messages: list[Any] = [{"role": "user", "content": "list"}]
        reply = client.chat.completions.create(
            model="scripted", messages=messages, tools=tools.definitions
        )
        assert model.requests[0]["tools"] == tools.definitions
        message = reply.choices[0].message
        (call,) = message.tool_calls or []
        answer = await kernel.answer_tool_call(call, tools=tools)
        exact(ChatCompletionToolMessageParam, answer)
        assert answer["tool_call_id"] == "call_7" and "notes.txt" in answer["content"]
        messages += [message, answer]
        client.chat.completions.create(model="scripted", messages=messages, tools=tools.definitions)
        assert model.requests[1]["messages"][2] == answer
    assert finished_tools(events) == ["list_directory"]


async def test_anthropic_round_trip_and_a_denial_is_a_result_the_model_reads(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    use = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "write_file",
        "input": {"path": "planted.txt", "content": "x"},
    }
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "scripted",
        "content": [use],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    model = ScriptedModel(
        [reply, {**reply, "id": "msg_2", "content": [], "stop_reason": "end_turn"}]
    )
    client = anthropic.Anthropic(api_key="offline", http_client=model.client(), max_retries=0)
    # posture ask, nobody to ask (headless): the write is refused
    async with native_kernel(tmp_path, events_path=events) as kernel:
        tools = kernel.tool_definitions("anthropic")
        first = client.messages.create(
            model="scripted",
            max_tokens=64,
            tools=tools.definitions,
            messages=[{"role": "user", "content": "write"}],
        )
        assert model.requests[0]["tools"] == tools.definitions
        (block,) = first.content
        assert isinstance(block, anthropic.types.ToolUseBlock)
        answer = await kernel.answer_tool_call(block, tools=tools)
        exact(anthropic.types.ToolResultBlockParam, answer)
        assert answer["is_error"] is True and answer["tool_use_id"] == "toolu_1"
        assert answer["content"].startswith("error denied: write_file was refused")
        client.messages.create(
            model="scripted",
            max_tokens=64,
            tools=tools.definitions,
            messages=[
                {"role": "user", "content": "write"},
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": [answer]},
            ],
        )
        assert model.requests[1]["messages"][2]["content"] == [answer]
    assert not (tmp_path / "ws" / "planted.txt").exists()
    records = [r for r in event_records(events) if r.get("tool") == "write_file"]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "proposed" and kinds[-1] == "failed" and "started" not in kinds
    assert records[0]["origin"] == "anthropic"


async def test_mcp_tool_call_is_answered_with_a_call_tool_result(tmp_path: Path) -> None:
    async with native_kernel(tmp_path) as kernel:
        tools = kernel.tool_definitions("mcp")
        ok = await kernel.answer_tool_call(
            {"name": "read_file", "arguments": {"path": "notes.txt"}}, tools=tools
        )
        bad = await kernel.answer_tool_call({"name": "write_file", "arguments": {}}, tools=tools)
    assert mcp_types.CallToolResult.model_validate(ok).content[0].text == "line one\nline two\n"
    refused = mcp_types.CallToolResult.model_validate(bad)
    assert refused.is_error and refused.structured_content["error"]["code"] == "invalid_arguments"


def gemini_reply(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A generateContent response, as the Gemini API sends it."""
    content = {"role": "model", "parts": parts}
    return {
        "candidates": [{"content": content, "finishReason": "STOP", "index": 0}],
        "modelVersion": "scripted",
    }


async def test_gemini_round_trip_through_the_sdk_and_a_denial_is_a_result(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    read = {"functionCall": {"id": "fc_1", "name": "read_file", "args": {"path": "notes.txt"}}}
    write = {
        "functionCall": {
            "id": "fc_2",
            "name": "write_file",
            "args": {"path": "planted.txt", "content": "x"},
        }
    }
    model = ScriptedModel([gemini_reply([read, write]), gemini_reply([{"text": "done"}])])
    client = genai.Client(
        api_key="offline", http_options=genai_types.HttpOptions(httpx_client=model.client())
    )
    # posture ask, nobody to ask (headless): the write is refused
    async with native_kernel(tmp_path, events_path=events) as kernel:
        tools = kernel.tool_definitions("gemini")
        config = genai_types.GenerateContentConfig(
            tools=[genai_types.Tool(function_declarations=tools.definitions)],
            automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
        )
        first = client.models.generate_content(model="scripted", contents="go", config=config)
        sent = model.requests[0]["tools"][0]["functionDeclarations"]
        assert [d["name"] for d in sent] == [d["name"] for d in tools.definitions]
        calls = first.function_calls or []
        assert [type(c) for c in calls] == [genai_types.FunctionCall] * 2
        ok = await kernel.answer_tool_call(calls[0], tools=tools)  # the SDK's FunctionCall
        parts = first.candidates[0].content.parts  # type: ignore[index,union-attr]
        refused = await kernel.answer_tool_call(parts[1], tools=tools)  # the Part holding it
        assert ok == {
            "functionResponse": {
                "id": "fc_1",
                "name": "read_file",
                "response": {"output": "line one\nline two\n"},
            }
        }
        answer = genai_types.Part.model_validate(refused).function_response
        assert answer is not None and answer.id == "fc_2" and answer.name == "write_file"
        assert answer.response is not None and set(answer.response) == {"error"}
        assert answer.response["error"].startswith("error denied: write_file was refused")
        history = [
            {"role": "user", "parts": [{"text": "go"}]},
            first.candidates[0].content,  # type: ignore[index]
            {"role": "user", "parts": [ok, refused]},
        ]
        client.models.generate_content(model="scripted", contents=history, config=config)
        returned = model.requests[1]["contents"][2]["parts"]
        assert [p["functionResponse"]["response"] for p in returned] == [
            ok["functionResponse"]["response"],
            refused["functionResponse"]["response"],
        ]
    assert not (tmp_path / "ws" / "planted.txt").exists()
    records = [r for r in event_records(events) if r.get("tool") in ("read_file", "write_file")]
    assert {r["origin"] for r in records if r["kind"] == "proposed"} == {"gemini"}
    assert finished_tools(events) == ["read_file"]


class ScriptedConverse:
    """Bedrock's Converse API played through botocore's ``before-send`` event: botocore has
    already checked the request against the service model and signed it; the reply is parsed
    by botocore as a real one would be. Keeps the request bodies."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        self.requests.append(json.loads(request.body))
        body = json.dumps(self.replies.pop(0)).encode()

        class Raw:
            def stream(self, **_: Any) -> Any:
                yield body

        return AWSResponse(request.url, 200, {"content-type": "application/json"}, Raw())

    def client(self) -> Any:
        client = botocore.session.get_session().create_client(
            "bedrock-runtime",
            region_name="us-east-1",
            aws_access_key_id="offline",
            aws_secret_access_key="offline",
        )
        client.meta.events.register("before-send.bedrock-runtime.Converse", self)
        return client


def converse_reply(content: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        "metrics": {"latencyMs": 1},
    }


async def test_bedrock_converse_round_trip_through_botocore_and_a_denial_is_a_result(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    read = {"toolUse": {"toolUseId": "tu_1", "name": "read_file", "input": {"path": "notes.txt"}}}
    write = {
        "toolUse": {
            "toolUseId": "tu_2",
            "name": "write_file",
            "input": {"path": "planted.txt", "content": "x"},
        }
    }
    model = ScriptedConverse(
        [converse_reply([read, write]), converse_reply([{"text": "done"}], "end_turn")]
    )
    client = model.client()
    # posture ask, nobody to ask (headless): the write is refused
    async with native_kernel(tmp_path, events_path=events) as kernel:
        tools = kernel.tool_definitions("bedrock")
        assert len(tools) == 10 and all(PROVIDER_NAME.match(d["toolSpec"]["name"]) for d in tools)
        question = {"role": "user", "content": [{"text": "go"}]}
        # every definition passes botocore's check against the published service model
        first = client.converse(
            modelId="scripted", messages=[question], toolConfig={"tools": tools.definitions}
        )
        assert model.requests[0]["toolConfig"]["tools"] == tools.definitions
        blocks = first["output"]["message"]["content"]
        ok = await kernel.answer_tool_call(blocks[0], tools=tools)  # the content block
        refused = await kernel.answer_tool_call(blocks[1]["toolUse"], tools=tools)  # the toolUse
        assert ok == {
            "toolResult": {
                "toolUseId": "tu_1",
                "content": [{"text": "line one\nline two\n"}],
                "status": "success",
            }
        }
        result = refused["toolResult"]
        assert result["toolUseId"] == "tu_2" and result["status"] == "error"
        assert result["content"][0]["text"].startswith("error denied: write_file was refused")
        history = [question, first["output"]["message"], {"role": "user", "content": [ok, refused]}]
        # the answers pass the same check on their way back to the model
        client.converse(
            modelId="scripted", messages=history, toolConfig={"tools": tools.definitions}
        )
        assert model.requests[1]["messages"][2]["content"] == [ok, refused]
    assert not (tmp_path / "ws" / "planted.txt").exists()
    records = [r for r in event_records(events) if r.get("tool") in ("read_file", "write_file")]
    assert {r["origin"] for r in records if r["kind"] == "proposed"} == {"bedrock"}
    assert finished_tools(events) == ["read_file"]


async def test_a_bedrock_tool_use_without_an_id_or_name_is_no_call() -> None:
    """A block botocore would never give: the host's mistake, raised with the field named."""
    kernel = Kernel(posture="unrestricted")
    async with kernel:
        for block, field in (
            ({"toolUse": {"name": "x", "input": {}}}, "toolUseId"),
            ({"toolUseId": "t", "input": {}}, "name"),
        ):
            with pytest.raises(InvalidArguments) as info:
                await kernel.answer_tool_call(block)
            assert info.value.field == field


async def test_a_gemini_call_without_args_is_told_from_mcp_params_by_the_definitions() -> None:
    ledger = Ledger()
    kernel = Kernel(posture="unrestricted")
    kernel.register(make_tool("3d.peek", Consequence.READ, ledger))
    async with kernel:
        gemini = kernel.tool_definitions("gemini")
        (name,) = (d["name"] for d in gemini)
        assert name == "_3d__peek"  # Gemini wants a letter or _ first
        answer = await kernel.answer_tool_call({"name": name}, tools=gemini)
        # without the definitions, "args" says Gemini; the map is made the same way
        again = await kernel.answer_tool_call({"name": name, "args": None})
    output = json.dumps({"tool": "3d.peek", "args": {}})
    assert answer == again == {"functionResponse": {"name": name, "response": {"output": output}}}
    assert ledger.runs == [("3d.peek", {}), ("3d.peek", {})]


# -- names ------------------------------------------------------------------------------------


def test_provider_names_are_safe_one_to_one_and_do_not_depend_on_order() -> None:
    long = "mcp." + "x" * 60 + ".tool"
    names = ["mcp.files.read_text_file", "a.b", "a__b", long, long + "2", "read_file"]
    out = provider_names(names)
    assert out["mcp.files.read_text_file"] == "mcp__files__read_text_file"
    assert out["read_file"] == "read_file"
    assert len(set(out.values())) == len(names)
    assert all(PROVIDER_NAME.match(p) for p in out.values())
    # a.b and a__b would share a__b: both are renamed, whichever came first
    assert out["a.b"] != "a__b" and out["a__b"] != "a__b"
    assert provider_names(reversed(names)) == out


@settings(max_examples=200, deadline=None)
@given(st.sets(st.from_regex(r"[A-Za-z0-9_.\-]{1,128}", fullmatch=True), max_size=30))
def test_provider_names_hold_for_any_set_of_tool_names(names: set[str]) -> None:
    out = provider_names(names)
    assert set(out) == names
    assert len(set(out.values())) == len(names)
    assert all(PROVIDER_NAME.match(p) for p in out.values())
    assert provider_names(sorted(names, reverse=True)) == out


@settings(max_examples=200, deadline=None)
@given(st.sets(st.from_regex(r"[A-Za-z0-9_.\-]{1,128}", fullmatch=True), max_size=30))
def test_gemini_names_start_with_a_letter_or_underscore_and_stay_one_to_one(
    names: set[str],
) -> None:
    out = provider_names(names, letter_first=True)
    assert set(out) == names and len(set(out.values())) == len(names)
    assert all(LETTER_FIRST_NAME.match(p) for p in out.values()), out
    assert provider_names(sorted(names, reverse=True), letter_first=True) == out


async def test_colliding_names_each_reach_their_own_tool(tmp_path: Path) -> None:
    ledger = Ledger()
    kernel = Kernel(posture="unrestricted")
    for name in ("a.b", "a__b", "m." + "y" * 100):
        kernel.register(make_tool(name, Consequence.READ, ledger))
    async with kernel:
        tools = kernel.tool_definitions("anthropic")
        for d in tools:
            await kernel.answer_tool_call(
                {"type": "tool_use", "id": d["name"], "name": d["name"], "input": {}}, tools=tools
            )
    assert sorted(ledger.names()) == sorted(["a.b", "a__b", "m." + "y" * 100])


# -- what the model gets wrong is an answer, not an exception --------------------------------


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ({"type": "tool_use", "id": "t", "name": "rm_rf", "input": {}}, "not_found"),
        (
            {"type": "function_call", "call_id": "c", "name": "peek", "arguments": "{not json"},
            "invalid_arguments",
        ),
        (
            {"id": "c", "type": "function", "function": {"name": "peek", "arguments": "[1]"}},
            "invalid_arguments",
        ),
    ],
)
async def test_a_bad_tool_call_is_an_error_result(call: dict[str, Any], code: str) -> None:
    ledger = Ledger()
    sink = MemorySink()
    kernel = Kernel(posture="unrestricted", events_sink=sink)
    kernel.register(make_tool("peek", Consequence.READ, ledger))
    async with kernel:
        answer = await kernel.answer_tool_call(call)
    text = answer.get("content") or answer.get("output")
    assert text.startswith(f"error {code}"), text
    assert answer.get("is_error", True) is True
    assert ledger.runs == []


async def test_a_tool_not_offered_is_not_found_even_when_registered() -> None:
    ledger = Ledger()
    kernel = Kernel(posture="unrestricted")
    kernel.register(make_tool("peek", Consequence.READ, ledger))
    kernel.register(make_tool("launch", Consequence.IRREVERSIBLE, ledger))
    async with kernel:
        offered = kernel.tool_definitions("anthropic", names=["peek"])
        answer = await kernel.answer_tool_call(
            {"type": "tool_use", "id": "t", "name": "launch", "input": {}}, tools=offered
        )
    assert answer["is_error"] and answer["content"].startswith("error not_found")
    assert ledger.runs == []


@pytest.mark.parametrize(
    "block",
    [{"type": "text", "text": "hi"}, "read_file", {"type": "tool_use", "name": "x", "input": {}}],
)
async def test_what_is_no_tool_call_at_all_is_the_host_s_error(block: Any) -> None:
    async with Kernel() as kernel:
        with pytest.raises(InvalidArguments):
            await kernel.answer_tool_call(block)


async def test_format_and_strict_choices_are_checked() -> None:
    async with Kernel() as kernel:
        with pytest.raises(InvalidArguments, match="openai-responses"):
            kernel.tool_definitions("cohere")
        with pytest.raises(InvalidArguments, match="strict"):
            kernel.tool_definitions("anthropic", strict=True)
        tools = kernel.tool_definitions("anthropic")
        with pytest.raises(InvalidArguments, match="definitions the model was given"):
            await kernel.answer_tool_call(
                {"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"},
                tools=tools,
            )


async def test_an_approved_call_runs_once_through_the_approver() -> None:
    ledger = Ledger()
    approver = ScriptedApprover([ApprovalAnswer.once()])
    kernel = Kernel(approver=approver)
    kernel.register(make_tool("touch", Consequence.REVERSIBLE, ledger))
    async with kernel:
        answer = await kernel.answer_tool_call(
            {"type": "tool_use", "id": "t", "name": "touch", "input": {"x": "1"}}
        )
    assert answer["is_error"] is False
    assert ledger.runs == [("touch", {"x": "1"})]
    assert [r.tool for r in approver.requests] == ["touch"]


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("fmt", "call"),
    [
        (
            "openai-responses",
            {
                "type": "function_call",
                "call_id": "c",
                "name": "write_file",
                "arguments": '{"path": "planted.txt", "content": "x", "extra": '
                + "[" * 100_000
                + "]" * 100_000
                + "}",
            },
        ),
        (
            "anthropic",
            {
                "type": "tool_use",
                "id": "t",
                "name": "write_file",
                "input": {"path": "planted.txt", "content": "x", "extra": _nested(5000)},
            },
        ),
        ("mcp", {"name": "write_file", "arguments": {"path": "planted.txt", "x": _nested(5000)}}),
        ("gemini", {"functionCall": {"name": "write_file", "args": {"x": _nested(5000)}}}),
        (
            "bedrock",
            {"toolUse": {"toolUseId": "t", "name": "write_file", "input": {"x": _nested(5000)}}},
        ),
    ],
)
async def test_arguments_nested_past_the_parser_are_an_error_result_not_a_traceback(
    tmp_path: Path, fmt: str, call: dict[str, Any]
) -> None:
    """A model's call whose arguments nest thousands deep is answered invalid_arguments.

    Before, ``json.loads`` (or the Gate's recursive validation) raised RecursionError
    out of ``answer_tool_call``: the host got a traceback instead of a result block.
    """
    events = tmp_path / "events.jsonl"
    async with native_kernel(tmp_path, events_path=events, posture="unrestricted") as kernel:
        tools = kernel.tool_definitions(fmt)
        answer = await kernel.answer_tool_call(call, tools=tools)
    if "functionResponse" in answer:
        answer = {"content": answer["functionResponse"]["response"].get("error")}
    if "toolResult" in answer:
        result = answer["toolResult"]
        answer = {"content": result["content"], "is_error": result["status"] == "error"}
    text = answer.get("content") or answer.get("output")
    if isinstance(text, list):
        text = text[0]["text"]
    assert text.startswith("error invalid_arguments") and "nest" in text, text
    assert answer.get("is_error", answer.get("isError", True)) is True
    assert not (tmp_path / "ws" / "planted.txt").exists()
    assert not [r for r in event_records(events) if r.get("tool") == "write_file"]
