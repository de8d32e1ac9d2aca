"""A fake model API on loopback, for running real agents with no key and no network.

It speaks just enough of four APIs for the agents we test: Anthropic Messages (`POST
/v1/messages`, streamed as server-sent events; Claude Code through claude-agent-acp), Gemini
(`POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`; Gemini CLI), OpenAI Responses
(`POST /v1/responses`, streamed; Codex through codex-acp) and OpenAI Chat Completions (`POST
/v1/chat/completions`, streamed or not; Qwen Code). It answers from a script:
each prompt names a scripted turn by a keyword it contains, and the turn lists the replies of its
model rounds in order (text, tool calls). Every request is recorded, so a test can check what the
agent sent back, such as a tool's result after a permission answer.

It is the agents' HTTP(S) proxy too (the tests set HTTPS_PROXY to it): a request for anywhere else
(an update check, a plugin list) ends here with 403 and is recorded in `strays`, so nothing leaves
the machine even if an agent ignores the variables that turn such traffic off.
"""

from __future__ import annotations

import itertools
import json
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RETRIES = 3
"""Requests of a turn beyond its rounds (an agent retrying after an error) still answered from
the script; after that, the turn gets plain text, which ends it."""

HOLD_LIMIT = 60.0
"""Longest a held reply waits for the agent to hang up (a cancel) before it is finished."""


@dataclass(frozen=True, slots=True)
class Text:
    """Streamed text, in a few chunks."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call of one of the agent's tools; `args` as the tool's schema names them."""

    name: str
    args: dict[str, Any]


Part = Text | ToolCall


@dataclass(frozen=True, slots=True)
class Reply:
    """What one model round answers. `hold`: stream the first chunk, then wait until the agent
    hangs up (a turn that is still running, to cancel; at most `HOLD_LIMIT` seconds)."""

    parts: tuple[Part, ...]
    hold: bool = False


def reply(*parts: Part, hold: bool = False) -> Reply:
    return Reply(parts=parts, hold=hold)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's result as the agent sent it back to the model."""

    name: str
    """The tool (Gemini names it; for Anthropic, the name of the matching tool_use)."""
    output: str
    """The result as text (Anthropic's content, Gemini's response serialized as JSON)."""
    is_error: bool


@dataclass(slots=True)
class Recorded:
    """One request the server answered."""

    api: str
    """`anthropic`, `gemini`, `openai` (Responses), `chat` (Chat Completions), or `other` (a
    path none of the APIs has)."""
    method: str
    path: str
    body: dict[str, Any]
    key: str | None = None
    """The scripted turn it belonged to; None for an agent's own side request."""
    round: int = 0
    hung_up: bool = False
    """The agent closed the connection before the reply was complete (a cancel)."""


@dataclass
class ModelServer:
    """The fake model API; `start()` it, `script()` turns, read `requests`, `stop()` it."""

    turns: dict[str, list[Reply]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _held: threading.Event = field(default_factory=threading.Event)
    _http: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> ModelServer:
        server = self

        class Handler(_Handler):
            model = server

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def script(self, key: str, *replies: Reply) -> None:
        """A prompt containing `key` runs these replies, one per model round; rounds past the
        end get a text saying the script ended."""
        with self._lock:
            self.turns[key] = list(replies)

    def holding(self) -> bool:
        """Whether a held reply has started streaming."""
        return self._held.is_set()

    def calls(self, key: str) -> list[Recorded]:
        """The requests of the turn `key`, in order."""
        with self._lock:
            return [r for r in self.requests if r.key == key]

    def tool_results(self, key: str) -> list[ToolResult]:
        """The tool results the agent sent back during the turn `key`, in order, each once."""
        calls = self.calls(key)
        if not calls:
            return []
        last = calls[-1]
        # The last request of the turn carries every earlier round's results in its history.
        return list(_tool_results(last.api, last.body, key))

    def saw_text(self, text: str) -> bool:
        """Whether any request so far carried `text` (in a prompt, a history, a system prompt)."""
        with self._lock:
            return any(text in json.dumps(r.body) for r in self.requests)

    # -- called from the handler threads -------------------------------------------------------

    def _answer(self, api: str, path: str, body: dict[str, Any]) -> tuple[Recorded, Reply]:
        """Record a request of a turn and pick its reply from the script."""
        contents = _conversation(api, body)
        with self._lock:
            key, index = _find_prompt(contents, self.turns)
            rounds = _model_rounds(contents, index) if key is not None else 0
            record = Recorded(api=api, method="POST", path=path, body=body, key=key, round=rounds)
            self.requests.append(record)
            if key is None:
                return record, reply(Text("There is no script for this prompt."))
            replies = self.turns[key]
            asked = sum(1 for r in self.requests if r.key == key)
        if rounds < len(replies) and asked <= len(replies) + RETRIES:
            return record, replies[rounds]
        # Plain text ends the turn: an agent that keeps asking (a script that does not fit what
        # it does) stops instead of looping.
        return record, reply(Text(f"The script of {key} has no round {rounds + 1}."))

    def _record_side(self, api: str, method: str, path: str, body: dict[str, Any]) -> None:
        """Record a request that is no turn's: the agent's own (token counts, titles, checks)."""
        with self._lock:
            self.requests.append(Recorded(api=api, method=method, path=path, body=body))

    def _stray(self, what: str) -> None:
        with self._lock:
            self.strays.append(what)


# -- reading the agents' requests -------------------------------------------------------------


def _conversation(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    key = {"anthropic": "messages", "chat": "messages", "openai": "input"}.get(api, "contents")
    value = body.get(key)
    return value if isinstance(value, list) else []


def _user_text(message: dict[str, Any]) -> str:
    """The text a user message carries, tool results left out."""
    if message.get("role") != "user":
        return ""
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return content
    texts = []
    for block in content or ():
        # Anthropic marks text blocks with a type, OpenAI's Responses input_text; Gemini's parts
        # are bare {"text": ...}.
        is_text = isinstance(block, dict) and block.get("type", "text") in ("text", "input_text")
        if is_text and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "\n".join(texts)


def _find_prompt(
    contents: list[dict[str, Any]], turns: dict[str, list[Reply]]
) -> tuple[str | None, int]:
    """The scripted key of the latest user message naming one, and that message's index."""
    for index in range(len(contents) - 1, -1, -1):
        text = _user_text(contents[index])
        # An agent may send two prompts as one message (Claude Code, after a cancelled turn):
        # the key written last is the prompt being answered.
        found = [(text.rfind(key), key) for key in turns if key in text]
        if found:
            return max(found)[1], index
    return None, -1


def _model_rounds(contents: list[dict[str, Any]], index: int) -> int:
    """How many model replies follow the prompt at `index`: the round now asked for."""
    rounds = 0
    replying = False
    for item in contents[index + 1 :]:
        # A Responses reply is several items (a message, a call): one round until a result.
        mine = item.get("role") in ("assistant", "model") or item.get("type") in _OPENAI_CALLS
        # Anthropic's and Gemini's messages carry no `type`: each reply is one message.
        if mine and (not replying or "type" not in item):
            rounds += 1
        replying = mine
    return rounds


_OPENAI_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "reasoning")


def _tool_results(api: str, body: dict[str, Any], key: str) -> Iterator[ToolResult]:
    contents = _conversation(api, body)
    _, index = _find_prompt(contents, {key: []})
    names: dict[str, str] = {}
    for message in contents[index + 1 :]:
        # Chat Completions: an assistant message's tool_calls, each answered by a "tool" message.
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[call.get("id", "")] = call["function"].get("name", "")
        if message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
            yield ToolResult(
                name=names.get(message.get("tool_call_id", ""), ""),
                output=str(content or ""),
                is_error=False,
            )
            continue
        # OpenAI's Responses input: calls and their outputs are items of their own.
        if message.get("type") in ("function_call", "custom_tool_call"):
            names[message.get("call_id", "")] = message.get("name", "")
        elif message.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = message.get("output")
            if isinstance(output, dict):  # a function's output may be {"content": ...}
                output = output.get("content")
            yield ToolResult(
                name=names.get(message.get("call_id", ""), ""),
                output=str(output or ""),
                is_error=False,
            )
        blocks = message.get("content", message.get("parts"))
        if not isinstance(blocks, list):
            continue
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[block.get("id", "")] = block.get("name", "")
            elif block.get("type") == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
                yield ToolResult(
                    name=names.get(block.get("tool_use_id", ""), ""),
                    output=str(content or ""),
                    is_error=bool(block.get("is_error")),
                )
            elif isinstance(block.get("functionResponse"), dict):
                response = block["functionResponse"]
                payload = response.get("response") or {}
                yield ToolResult(
                    name=response.get("name", ""),
                    output=json.dumps(payload),
                    is_error=isinstance(payload, dict) and "error" in payload,
                )


# -- writing the answers ----------------------------------------------------------------------


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


_ids = itertools.count(1)
"""Ids of messages and tool calls: Claude Code merges assistant messages that share an id."""


def _anthropic_events(model: str, answer: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
    usage = {
        "input_tokens": 10,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message: dict[str, Any] = {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield "message_start", {"type": "message_start", "message": message}
    calls = 0
    for index, part in enumerate(answer.parts):
        if isinstance(part, Text):
            block: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(part.text)]
        else:
            calls += 1
            block = {
                "type": "tool_use",
                "id": f"toolu_fake_{next(_ids)}",
                "name": part.name,
                "input": {},
            }
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(json.dumps(part.args), 40)
            ]
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    stop = "tool_use" if calls else "end_turn"
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _anthropic_message(model: str, text: str) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


def _gemini_chunks(model: str, answer: Reply) -> Iterator[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in answer.parts:
        if isinstance(part, Text):
            parts.extend({"text": c} for c in _chunks(part.text))
        else:
            parts.append({"functionCall": {"name": part.name, "args": part.args}})
    for i, piece in enumerate(parts):
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}],
            "modelVersion": model,
        }
        if i == len(parts) - 1:
            chunk["candidates"][0]["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": 10,
                "candidatesTokenCount": 5,
                "totalTokenCount": 15,
            }
        yield chunk


def _openai_events(model: str, answer: Reply, custom: set[str]) -> Iterator[dict[str, Any]]:
    """A Responses API stream: `response.created`, each part as an output item (a message's text
    in `output_text` deltas first), `response.completed`. A call of a tool in `custom` (a
    freeform tool, such as Codex's apply_patch) is a `custom_tool_call` with `args["input"]`."""
    response_id = f"resp_fake_{next(_ids)}"
    response: dict[str, Any] = {"id": response_id, "object": "response", "model": model}
    yield {"type": "response.created", "response": {**response, "status": "in_progress"}}
    for index, part in enumerate(answer.parts):
        item_id = f"item_fake_{next(_ids)}"
        item: dict[str, Any]
        if isinstance(part, Text):
            empty = {"type": "message", "id": item_id, "role": "assistant", "content": []}
            yield {"type": "response.output_item.added", "output_index": index, "item": empty}
            for chunk in _chunks(part.text):
                yield {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "delta": chunk,
                }
            text = {"type": "output_text", "text": part.text, "annotations": []}
            item = {**empty, "status": "completed", "content": [text]}
        elif part.name in custom:
            item = {
                "type": "custom_tool_call",
                "id": item_id,
                "call_id": f"call_fake_{next(_ids)}",
                "name": part.name,
                "input": str(part.args.get("input", "")),
                "status": "completed",
            }
        else:
            item = {
                "type": "function_call",
                "id": item_id,
                "call_id": f"call_fake_{next(_ids)}",
                "name": part.name,
                "arguments": json.dumps(part.args),
                "status": "completed",
            }
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    completed = {**response, "status": "completed", "usage": usage}
    yield {"type": "response.completed", "response": completed}


def _chat_chunks(model: str, answer: Reply) -> Iterator[dict[str, Any]]:
    """A Chat Completions stream: the text in `content` deltas, each tool call in `tool_calls`
    deltas (its id and name first, then its arguments in pieces), a last chunk with the
    finish_reason, then one with the usage (as `stream_options.include_usage` asks)."""
    chunk_id = f"chatcmpl-fake-{next(_ids)}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [choice],
        }

    yield chunk({"role": "assistant", "content": ""})
    calls = 0
    for part in answer.parts:
        if isinstance(part, Text):
            for piece in _chunks(part.text):
                yield chunk({"content": piece})
            continue
        start = {
            "index": calls,
            "id": f"call_fake_{next(_ids)}",
            "type": "function",
            "function": {"name": part.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [start]})
        for piece in _chunks(json.dumps(part.args), 40):
            yield chunk({"tool_calls": [{"index": calls, "function": {"arguments": piece}}]})
        calls += 1
    yield chunk({}, "tool_calls" if calls else "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield {**chunk({}), "choices": [], "usage": usage}


def _chat_completion(model: str, answer: Reply) -> dict[str, Any]:
    """A Chat Completions answer in one piece, for an agent that does not ask for a stream."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(p.text for p in answer.parts if isinstance(p, Text)) or None,
    }
    calls = [
        {
            "id": f"call_fake_{next(_ids)}",
            "type": "function",
            "function": {"name": p.name, "arguments": json.dumps(p.args)},
        }
        for p in answer.parts
        if isinstance(p, ToolCall)
    ]
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {
        "id": f"chatcmpl-fake-{next(_ids)}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(\w+)")


class _Handler(BaseHTTPRequestHandler):
    """One connection; `model` is set on the subclass `ModelServer.start` makes."""

    model: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the tests read `requests`, not a log

    # -- the proxy: whatever is not for us ends here ------------------------------------------

    def do_CONNECT(self) -> None:
        self.model._stray(f"CONNECT {self.path}")
        self._send_json(403, {"error": "the test model server is the only network there is"})
        self.close_connection = True

    def _is_proxied(self) -> bool:
        return self.path.startswith(("http://", "https://"))

    # -- the APIs ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self._is_proxied():
            self.do_CONNECT()
            return
        self.model._record_side("other", "GET", self.path, {})
        if self.path.startswith("/v1/models"):
            self._send_json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
        elif self.path.startswith("/v1beta/models"):
            self._send_json(200, {"models": []})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        if self._is_proxied():
            self.do_CONNECT()
            return
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        gemini = GEMINI_PATH.match(path)
        if path == "/v1/messages":
            self._anthropic(body)
        elif path == "/v1/messages/count_tokens":
            self.model._record_side("anthropic", "POST", self.path, body)
            self._send_json(200, {"input_tokens": 10})
        elif gemini is not None:
            self._gemini(gemini.group(1), gemini.group(2), body)
        elif path == "/v1/responses":
            self._openai(body)
        elif path == "/v1/chat/completions":
            self._chat(body)
        else:
            self.model._record_side("other", "POST", self.path, body)
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def _anthropic(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "claude-fake"))
        if not body.get("tools"):
            # The agent's own side request (a title, a check): not part of any turn.
            self.model._record_side("anthropic", "POST", self.path, body)
            if body.get("stream"):
                self._stream_anthropic(model, reply(Text("ok")), None)
            else:
                self._send_json(200, _anthropic_message(model, "ok"))
            return
        record, answer = self.model._answer("anthropic", self.path, body)
        if body.get("stream"):
            self._stream_anthropic(model, answer, record)
        else:
            text = "".join(p.text for p in answer.parts if isinstance(p, Text))
            self._send_json(200, _anthropic_message(model, text))

    def _stream_anthropic(self, model: str, answer: Reply, record: Recorded | None) -> None:
        events = (
            f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            for name, data in _anthropic_events(model, answer)
        )
        # Held after message_start, content_block_start and the first delta: a chunk shown.
        self._stream(events, answer.hold, record, hold_after=3)

    def _gemini(self, model: str, method: str, body: dict[str, Any]) -> None:
        if method == "countTokens":
            self.model._record_side("gemini", "POST", self.path, body)
            self._send_json(200, {"totalTokens": 10})
            return
        if method not in ("streamGenerateContent", "generateContent") or not body.get("tools"):
            # A side request (routing, a check) or an API we do not script: a bare answer.
            self.model._record_side("gemini", "POST", self.path, body)
            candidate = {"content": {"role": "model", "parts": [{"text": "{}"}]}, "index": 0}
            answer = {"candidates": [{**candidate, "finishReason": "STOP"}]}
            if method == "streamGenerateContent":
                self._stream(iter([f"data: {json.dumps(answer)}\r\n\r\n".encode()]), False, None)
            else:
                self._send_json(200, answer)
            return
        record, scripted = self.model._answer("gemini", self.path, body)
        chunks = (
            f"data: {json.dumps(c)}\r\n\r\n".encode() for c in _gemini_chunks(model, scripted)
        )
        self._stream(chunks, scripted.hold, record, hold_after=1)

    def _openai(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "gpt-fake"))
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        custom = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") == "custom"}
        if not tools:
            # A side request (a title, a summary): not part of any turn.
            self.model._record_side("openai", "POST", self.path, body)
            answer, record = reply(Text("ok")), None
        else:
            record, answer = self.model._answer("openai", self.path, body)
        events = (
            f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
            for e in _openai_events(model, answer, {str(name) for name in custom})
        )
        # Held after response.created, the message's output_item.added and its first delta.
        self._stream(events, answer.hold, record, hold_after=3)

    def _chat(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", "gpt-fake"))
        if not body.get("tools"):
            # A side request (a title, a check whose JSON answer it parses): no turn's.
            self.model._record_side("chat", "POST", self.path, body)
            answer, record = reply(Text("{}")), None
        else:
            record, answer = self.model._answer("chat", self.path, body)
        if not body.get("stream"):
            self._send_json(200, _chat_completion(model, answer))
            return
        events = itertools.chain(
            (f"data: {json.dumps(c)}\n\n".encode() for c in _chat_chunks(model, answer)),
            [b"data: [DONE]\n\n"],
        )
        # Held after the role chunk and the first piece of text.
        self._stream(events, answer.hold, record, hold_after=2)

    # -- HTTP ----------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self,
        pieces: Iterator[bytes],
        hold: bool,
        record: Recorded | None,
        hold_after: int = 1,
    ) -> None:
        """Send `pieces` as a chunked event stream; when `hold`, pause after `hold_after` of
        them until the agent hangs up."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for sent, piece in enumerate(pieces, start=1):
                self._chunk(piece)
                if hold and sent == hold_after and not self._hold():
                    if record is not None:
                        record.hung_up = True
                    self.close_connection = True
                    return
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            if record is not None:
                record.hung_up = True
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _hold(self) -> bool:
        """Wait until the agent hangs up (False), or the server stops or `HOLD_LIMIT` passes
        (True: finish the reply)."""
        self.model._held.set()
        connection: socket.socket = self.connection
        deadline = time.monotonic() + HOLD_LIMIT
        while time.monotonic() < deadline:
            if self.model._stopping.wait(0.05):
                return True
            readable, _, _ = select.select([connection], [], [], 0)
            if readable:
                try:
                    if connection.recv(1, socket.MSG_PEEK) == b"":
                        return False
                except OSError:
                    return False
        return True
