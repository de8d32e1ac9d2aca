"""Teammate -> host requests (docs/application.md, "Teammate to host"): typed, decoded, encoded.

Requests from teammates are untrusted plaintext (they decrypted fine, but a driver's link may be
in anyone's hands), so `decode_request` accepts only the whitelisted ops with exact field types
and raises nothing but `BadRequest`, whatever the bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
from cryptography.hazmat.primitives.asymmetric import ec

from tunnel.app.errors import BadRequest
from tunnel.app.file_view import MAX_FILE_FIND_LENGTH, MAX_FILE_PATH_LENGTH
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH

# One request fits one `d` (256 KiB); prompts are text, so this is generous and keeps a hostile
# driver from handing the agent megabytes at once.
MAX_REQUEST_SIZE = 256 * 1024
MAX_PROMPT_LENGTH = 64 * 1024
"""Longest prompt, in characters. Agent sessions refuse a longer one too (tunnel.agents.errors),
so a prompt typed at the host console meets the same limit as one sent by a teammate."""
MAX_ID_LENGTH = 256
MAX_INPUT_SIZE = 16 * 1024
"""Bytes one `input` request may carry; terminal sessions refuse more (tunnel.agents.pty_agent)."""
MAX_TERMINAL_SIDE = 1000
"""Largest terminal width or height, in cells; terminal sessions refuse more as well."""
DEFAULT_HISTORY_ITEMS = 200
"""Most recent items a fresh `subscribe` (no `after`, no `tail`) replays: a joiner of a long
conversation gets its end at once, and fetches what came before with `history` when asked to."""
MAX_HISTORY_ITEMS = 200
"""Most items one `history` request may ask for (its `limit`), and the default limit."""
MAX_SEQ = 2**63 - 1
"""Largest seq a cursor may name: the log's seqs are msgpack's signed 64-bit integers."""
MAX_PUSH_ENDPOINT_LENGTH = 2048
"""Longest push endpoint a `push_on` may name: the browsers' are a few hundred characters."""
PUSH_KEY_SIZE = 65
"""A subscription's `p256dh`: an uncompressed P-256 point (RFC 8291 section 3.2)."""
PUSH_AUTH_SIZE = 16
"""A subscription's `auth` secret (RFC 8291 section 3.2)."""
MIN_BROWSER_ID_LENGTH = 16
MAX_BROWSER_ID_LENGTH = 64
"""A `browser` id: random url-safe characters the page keeps per host (docs/application.md)."""
MAX_PROMPT_IMAGES = 4
"""Images one prompt may carry."""
MAX_PROMPT_IMAGE_BYTES = 192 * 1024
"""Bytes of all the images of one prompt together: they travel in the prompt's one request
(`MAX_REQUEST_SIZE`); the page scales a larger picture down to fit."""
PROMPT_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types a prompt may carry."""
MAX_PATH_PREFIX_LENGTH = 1024
"""Longest path a `paths` request may ask to complete."""
MAX_AGENT_NAME_LENGTH = 32
"""Longest agent name a `new_conversation` may name (`tunnel host --agent NAME=SPEC`)."""
MAX_ELICITATION_FIELDS = 16
"""Fields of one question an agent asks (`elicitation/create`), and so of one answer's content: a
request's maps hold at most 16 entries (`decode_request`)."""
MAX_ELICITATION_CHOICES = 16
"""Choices one field of a question may offer, as an answer's lists hold at most 16 items."""
MAX_ELICITATION_NAME_LENGTH = 64
"""Longest field name of a question."""
MAX_ELICITATION_TEXT_LENGTH = 16 * 1024
"""Longest text answer to one field, and longest choice value."""
_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """Send a snapshot, then the live tail.

    With `after` (a resume, or -1 for the whole log) the snapshot is every stored item after it.
    Without (a fresh join) it is the last `tail` items, or with `tail` None the host's default:
    at most `DEFAULT_HISTORY_ITEMS`, and no more than one snapshot page. `tail` goes only with
    `after` None.
    """

    after: int | None
    tail: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """Send the newest page of stored items before seq `before`, at most `limit` of them.

    Read-only, so viewers may ask too. The answer is one `history` message (a
    `HistoryPage`); the items a client already holds are never in it.
    """

    before: int
    limit: int = MAX_HISTORY_ITEMS


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptImage:
    """An image that goes with a prompt (pasted or dropped in the page)."""

    mime_type: str
    """One of `PROMPT_IMAGE_TYPES`."""
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """Ask the agent something; drivers only. `images` go with the text to an agent that
    takes images (at most `MAX_PROMPT_IMAGES`, `MAX_PROMPT_IMAGE_BYTES` together)."""

    text: str
    images: tuple[PromptImage, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionAnswer:
    """Answer a pending permission request with one of its options; drivers only."""

    request_id: str
    option_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListPaths:
    """Send the workspace paths that complete `prefix` (an `@path` being typed) as a `paths`
    message; read-only, so any role (docs/application.md, "Teammate to host")."""

    prefix: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ElicitationAnswer:
    """Answer a question the agent asked (`elicitation_request`); drivers only.

    `action` is accept, decline or cancel; `content` (accept only) maps field names to a string,
    number, boolean or list of strings, which the host checks against the question's fields."""

    request_id: str
    action: str
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel:
    """Cancel the running turn; drivers only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetMode:
    """Switch the agent's session mode (one of the modes it offers); drivers only."""

    mode_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetModel:
    """Switch the agent's model (one of the models it offers); drivers only."""

    model_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetConfig:
    """Set one of the agent's session config options; drivers only.

    `value` is one of the option's values (a `select` option) or a boolean (a `boolean` one).
    """

    config_id: str
    value: str | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """Keystrokes for a terminal agent; drivers only."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Resize:
    """New terminal size for a terminal agent; drivers only."""

    cols: int
    rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PushOn:
    """Send this browser approval notifications through Web Push (docs/application.md,
    "Notifications"); any role. `endpoint`, `p256dh` and `auth` are the browser's
    PushSubscription; `browser` the page's own id for it."""

    endpoint: str
    p256dh: bytes
    """The uncompressed P-256 point, decoded from base64url."""
    auth: bytes
    """The 16-byte auth secret, decoded from base64url."""
    browser: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PushOff:
    """Stop pushing to `endpoint`; any role."""

    endpoint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Focus:
    """Whether this page is in front of its person now (no push while one is); any role."""

    focused: bool
    browser: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadFile:
    """Send a window of lines of a workspace file around `line` (1-based; None: its start), as
    a `file` message; read-only, so any role (docs/application.md, "Reading a file"). With
    `find`, the window is around the first line where that text begins (a diff's new text),
    if the file holds it."""

    path: str
    line: int | None = None
    find: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Authenticate:
    """Have the host log the agent in with one of the login methods it offers; drivers only."""

    method_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListConversations:
    """Send the host's list of conversations again (a `conversations` message); anyone."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewConversation:
    """Start a conversation with the declared agent `agent`; drivers only."""

    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseConversation:
    """Stop `conversation`'s agent and close it (its log stays); drivers only."""

    conversation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Fork:
    """Start a conversation from `conversation`'s items up to seq `upto` (its log copied up to
    there), with the same agent; drivers only."""

    conversation: str
    upto: int


Request = (
    Subscribe
    | History
    | Prompt
    | PermissionAnswer
    | ElicitationAnswer
    | ListPaths
    | Cancel
    | SetMode
    | SetModel
    | SetConfig
    | Input
    | Resize
    | PushOn
    | PushOff
    | Focus
    | ReadFile
    | Authenticate
    | ListConversations
    | NewConversation
    | CloseConversation
    | Fork
)

# Ops that change the session: a viewer sending one is refused with `forbidden`.
DRIVING_REQUESTS = (
    Prompt,
    PermissionAnswer,
    ElicitationAnswer,
    Cancel,
    SetMode,
    SetModel,
    SetConfig,
    Input,
    Resize,
    Authenticate,
    NewConversation,
    CloseConversation,
    Fork,
)


def _field(message: Mapping[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = message.get(name)
    if value is None and optional:
        return None
    # bool is an int subclass; a boolean where a number belongs is a client bug, not a number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be {kind.__name__}")
    return value


def _bounded_str(message: Mapping[str, Any], name: str, limit: int) -> str:
    value: str = _field(message, name, str)
    if len(value) > limit:
        raise BadRequest(f"field {name!r} is longer than {limit}")
    return value


def _expect_keys(message: Mapping[str, Any], allowed: set[str]) -> None:
    extra = set(message) - allowed
    if extra:
        raise BadRequest(f"unexpected field(s): {', '.join(sorted(map(str, extra)))}")


def _push_key(message: Mapping[str, Any], name: str, size: int) -> bytes:
    """A base64url field (padded or not) that decodes to exactly `size` bytes."""
    text = _bounded_str(message, name, 4 * size // 3 + 4)
    stripped = text.rstrip("=")
    if not stripped or any(c not in _URL_SAFE for c in stripped):
        raise BadRequest(f"field {name!r} must be base64url")
    try:
        value = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except ValueError:
        raise BadRequest(f"field {name!r} must be base64url") from None
    if len(value) != size:
        raise BadRequest(f"field {name!r} must decode to {size} bytes")
    return value


def _images(message: Mapping[str, Any]) -> tuple[PromptImage, ...]:
    listed = _field(message, "images", list, optional=True) or []
    if len(listed) > MAX_PROMPT_IMAGES:
        raise BadRequest(f"a prompt carries at most {MAX_PROMPT_IMAGES} images")
    images = []
    for image in listed:
        if not isinstance(image, dict):
            raise BadRequest("field 'images' holds something that is not an image")
        _expect_keys(image, {"mime_type", "data"})
        mime_type = _bounded_str(image, "mime_type", MAX_ID_LENGTH)
        if mime_type not in PROMPT_IMAGE_TYPES:
            raise BadRequest(f"an image must be one of {', '.join(PROMPT_IMAGE_TYPES)}")
        data: bytes = _field(image, "data", bytes)
        images.append(PromptImage(mime_type=mime_type, data=data))
    if sum(len(image.data) for image in images) > MAX_PROMPT_IMAGE_BYTES:
        raise BadRequest(f"a prompt's images are larger than {MAX_PROMPT_IMAGE_BYTES} bytes")
    return tuple(images)


def _content(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """An answer's `content`: field names to strings, numbers, booleans or lists of strings
    (their fit to the question is the host's to check)."""
    content = _field(message, "content", dict, optional=True)
    if content is None:
        return None
    for name, value in content.items():
        if not isinstance(name, str) or len(name) > MAX_ELICITATION_NAME_LENGTH:
            raise BadRequest("field 'content' has a name that is not a short string")
        values = value if isinstance(value, list) else [value]
        for one in values:
            if isinstance(one, str):
                if len(one) > MAX_ELICITATION_TEXT_LENGTH:
                    raise BadRequest(f"an answer is longer than {MAX_ELICITATION_TEXT_LENGTH}")
            elif isinstance(value, list) or not isinstance(one, int | float | bool):
                raise BadRequest("field 'content' holds a value of a kind no form asks")
    return dict(content)


def _browser(message: Mapping[str, Any]) -> str:
    browser = _bounded_str(message, "browser", MAX_BROWSER_ID_LENGTH)
    if len(browser) < MIN_BROWSER_ID_LENGTH or any(c not in _URL_SAFE for c in browser):
        raise BadRequest(
            f"field 'browser' must be {MIN_BROWSER_ID_LENGTH} to {MAX_BROWSER_ID_LENGTH}"
            " url-safe characters"
        )
    return browser


def _endpoint(message: Mapping[str, Any]) -> str:
    endpoint = _bounded_str(message, "endpoint", MAX_PUSH_ENDPOINT_LENGTH)
    if not endpoint:
        raise BadRequest("field 'endpoint' is empty")
    return endpoint


def decode_request(plaintext: bytes) -> Request:
    """Decode one teammate request; raises `BadRequest` (and nothing else) on any bad input."""
    if len(plaintext) > MAX_REQUEST_SIZE:
        raise BadRequest("request too large")
    try:
        message = msgpack.unpackb(
            plaintext,
            raw=False,
            strict_map_key=True,
            # Requests are flat maps; anything deeper is junk, and a low bound keeps a malicious
            # payload from recursing.
            max_array_len=16,
            max_map_len=16,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises many types (ValueError, ExtraData, ...)
        raise BadRequest("not a msgpack map") from exc
    if not isinstance(message, dict):
        raise BadRequest("not a msgpack map")
    op = message.get("op")
    if op == "subscribe":
        _expect_keys(message, {"op", "after", "tail"})
        after = _field(message, "after", int, optional=True)
        if after is not None and not -1 <= after <= MAX_SEQ:
            raise BadRequest("field 'after' out of range")
        tail = _field(message, "tail", int, optional=True)
        if tail is not None:
            if after is not None:
                # A resume gets everything after its cursor: a bound would leave a gap.
                raise BadRequest("field 'tail' goes only with 'after' nil")
            if not 0 <= tail <= MAX_SEQ:
                raise BadRequest("field 'tail' out of range")
        return Subscribe(after=after, tail=tail)
    if op == "history":
        _expect_keys(message, {"op", "before", "limit"})
        before: int = _field(message, "before", int)
        if not 0 <= before <= MAX_SEQ:
            raise BadRequest("field 'before' out of range")
        limit = _field(message, "limit", int, optional=True)
        if limit is None:
            limit = MAX_HISTORY_ITEMS
        elif not 1 <= limit <= MAX_HISTORY_ITEMS:
            raise BadRequest(f"field 'limit' must be 1 to {MAX_HISTORY_ITEMS}")
        return History(before=before, limit=limit)
    if op == "prompt":
        _expect_keys(message, {"op", "text", "images"})
        text = _bounded_str(message, "text", MAX_PROMPT_LENGTH)
        if not text.strip():
            raise BadRequest("empty prompt")
        return Prompt(text=text, images=_images(message))
    if op == "permission":
        _expect_keys(message, {"op", "request_id", "option_id"})
        return PermissionAnswer(
            request_id=_bounded_str(message, "request_id", MAX_ID_LENGTH),
            option_id=_bounded_str(message, "option_id", MAX_ID_LENGTH),
        )
    if op == "paths":
        _expect_keys(message, {"op", "prefix"})
        return ListPaths(prefix=_bounded_str(message, "prefix", MAX_PATH_PREFIX_LENGTH))
    if op == "elicitation":
        _expect_keys(message, {"op", "request_id", "action", "content"})
        action = _bounded_str(message, "action", MAX_ID_LENGTH)
        if action not in ("accept", "decline", "cancel"):
            raise BadRequest("field 'action' must be accept, decline or cancel")
        return ElicitationAnswer(
            request_id=_bounded_str(message, "request_id", MAX_ID_LENGTH),
            action=action,
            content=_content(message),
        )
    if op == "cancel":
        _expect_keys(message, {"op"})
        return Cancel()
    if op == "set_mode":
        _expect_keys(message, {"op", "mode_id"})
        return SetMode(mode_id=_bounded_str(message, "mode_id", MAX_ID_LENGTH))
    if op == "set_model":
        _expect_keys(message, {"op", "model_id"})
        return SetModel(model_id=_bounded_str(message, "model_id", MAX_ID_LENGTH))
    if op == "set_config":
        _expect_keys(message, {"op", "config_id", "value"})
        config_id = _bounded_str(message, "config_id", MAX_ID_LENGTH)
        value = message.get("value")
        if not isinstance(value, bool):
            value = _bounded_str(message, "value", MAX_ID_LENGTH)
        return SetConfig(config_id=config_id, value=value)
    if op == "input":
        _expect_keys(message, {"op", "data"})
        data: bytes = _field(message, "data", bytes)
        if len(data) > MAX_INPUT_SIZE:
            raise BadRequest(f"input is longer than {MAX_INPUT_SIZE} bytes")
        return Input(data=data)
    if op == "resize":
        _expect_keys(message, {"op", "cols", "rows"})
        cols: int = _field(message, "cols", int)
        rows: int = _field(message, "rows", int)
        if not (1 <= cols <= MAX_TERMINAL_SIDE and 1 <= rows <= MAX_TERMINAL_SIDE):
            raise BadRequest("terminal size out of range")
        return Resize(cols=cols, rows=rows)
    if op == "push_on":
        _expect_keys(message, {"op", "endpoint", "p256dh", "auth", "browser"})
        endpoint = _endpoint(message)
        p256dh = _push_key(message, "p256dh", PUSH_KEY_SIZE)
        if p256dh[0] != 4:
            raise BadRequest("field 'p256dh' must be an uncompressed P-256 point")
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
        except ValueError:
            raise BadRequest("field 'p256dh' is not a point on P-256") from None
        return PushOn(
            endpoint=endpoint,
            p256dh=p256dh,
            auth=_push_key(message, "auth", PUSH_AUTH_SIZE),
            browser=_browser(message),
        )
    if op == "push_off":
        _expect_keys(message, {"op", "endpoint"})
        return PushOff(endpoint=_endpoint(message))
    if op == "focus":
        _expect_keys(message, {"op", "focused", "browser"})
        return Focus(focused=_field(message, "focused", bool), browser=_browser(message))
    if op == "read_file":
        _expect_keys(message, {"op", "path", "line", "find"})
        path = _bounded_str(message, "path", MAX_FILE_PATH_LENGTH)
        line = _field(message, "line", int, optional=True)
        if not path or (line is not None and not 1 <= line <= MAX_SEQ):
            raise BadRequest("read_file needs a path and a line from 1")
        find = None
        if message.get("find") is not None:
            find = _bounded_str(message, "find", MAX_FILE_FIND_LENGTH)
        return ReadFile(path=path, line=line, find=find or None)
    if op == "authenticate":
        _expect_keys(message, {"op", "method_id"})
        return Authenticate(method_id=_bounded_str(message, "method_id", MAX_ID_LENGTH))
    if op == "conversations":
        _expect_keys(message, {"op"})
        return ListConversations()
    if op == "new_conversation":
        _expect_keys(message, {"op", "agent"})
        agent = _bounded_str(message, "agent", MAX_AGENT_NAME_LENGTH)
        if not agent:
            raise BadRequest("new_conversation needs an agent name")
        return NewConversation(agent=agent)
    if op == "close_conversation":
        _expect_keys(message, {"op", "conversation"})
        return CloseConversation(conversation=_conversation(message))
    if op == "fork":
        _expect_keys(message, {"op", "conversation", "upto"})
        upto = _field(message, "upto", int)
        if not 0 <= upto <= MAX_SEQ:
            raise BadRequest("fork needs a seq from 0")
        return Fork(conversation=_conversation(message), upto=upto)
    raise BadRequest("unknown op")


def _conversation(message: Mapping[str, Any]) -> str:
    conversation = _bounded_str(message, "conversation", MAX_CONVERSATION_LENGTH)
    if not conversation:
        raise BadRequest("a conversation id is not empty")
    return conversation


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def encode_request(request: Request) -> bytes:
    """Encode a teammate request (the client side of `decode_request`)."""
    match request:
        case Subscribe(after=after, tail=tail):
            message: dict[str, Any] = {"op": "subscribe", "after": after}
            if tail is not None:
                # Left out when nil, so a host from before `tail` still accepts the request.
                message["tail"] = tail
        case History(before=before, limit=limit):
            message = {"op": "history", "before": before, "limit": limit}
        case Prompt(text=text, images=images):
            message = {"op": "prompt", "text": text}
            if images:
                # Left out when there are none, so a host from before images takes the prompt.
                message["images"] = [
                    {"mime_type": image.mime_type, "data": image.data} for image in images
                ]
        case PermissionAnswer(request_id=request_id, option_id=option_id):
            message = {"op": "permission", "request_id": request_id, "option_id": option_id}
        case ListPaths(prefix=prefix):
            message = {"op": "paths", "prefix": prefix}
        case ElicitationAnswer(request_id=request_id, action=action, content=content):
            message = {
                "op": "elicitation",
                "request_id": request_id,
                "action": action,
                "content": content,
            }
        case Cancel():
            message = {"op": "cancel"}
        case SetMode(mode_id=mode_id):
            message = {"op": "set_mode", "mode_id": mode_id}
        case SetModel(model_id=model_id):
            message = {"op": "set_model", "model_id": model_id}
        case SetConfig(config_id=config_id, value=value):
            message = {"op": "set_config", "config_id": config_id, "value": value}
        case Input(data=data):
            message = {"op": "input", "data": data}
        case Resize(cols=cols, rows=rows):
            message = {"op": "resize", "cols": cols, "rows": rows}
        case PushOn(endpoint=endpoint, p256dh=p256dh, auth=auth, browser=browser):
            message = {
                "op": "push_on",
                "endpoint": endpoint,
                "p256dh": _b64url(p256dh),
                "auth": _b64url(auth),
                "browser": browser,
            }
        case PushOff(endpoint=endpoint):
            message = {"op": "push_off", "endpoint": endpoint}
        case Focus(focused=focused, browser=browser):
            message = {"op": "focus", "focused": focused, "browser": browser}
        case ReadFile(path=path, line=line, find=find):
            message = {"op": "read_file", "path": path, "line": line}
            if find is not None:
                message["find"] = find
        case Authenticate(method_id=method_id):
            message = {"op": "authenticate", "method_id": method_id}
        case ListConversations():
            message = {"op": "conversations"}
        case NewConversation(agent=agent):
            message = {"op": "new_conversation", "agent": agent}
        case CloseConversation(conversation=conversation):
            message = {"op": "close_conversation", "conversation": conversation}
        case Fork(conversation=conversation, upto=upto):
            message = {"op": "fork", "conversation": conversation, "upto": upto}
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed
