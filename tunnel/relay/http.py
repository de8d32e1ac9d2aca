"""Plain HTTP routes of the relay and the Origin check of its WebSocket routes (docs/relay.md).

Called from the WebSocket server's `process_request` hook for every request: it answers
`/healthz`, `/metrics` and the web client's paths itself, refuses cross-site WebSocket openings,
and lets `/v1/host` and `/v1/attach` continue to the WebSocket handshake.
"""

from __future__ import annotations

import email.utils
import hmac
import http
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from websockets.datastructures import Headers, MultipleValuesError
from websockets.http11 import Request, Response

from tunnel.relay.cluster_auth import ThrottledWarnings
from tunnel.relay.metrics import CONTENT_TYPE_LATEST, RelayMetrics
from tunnel.relay.node_entry import LINK_CLIENT, NODE_LINK_PATH
from tunnel.relay.node_forward import verified_client
from tunnel.relay.settings import url_origin

if TYPE_CHECKING:
    from tunnel.relay.cluster import Cluster

logger = logging.getLogger("relay.http")

HOST_PATH = "/v1/host"
ATTACH_PATH = "/v1/attach"
WEBSOCKET_PATHS = frozenset({HOST_PATH, ATTACH_PATH})

StaticHandler = Callable[[str], "tuple[int, list[tuple[str, str]], bytes] | None"]


def _load_static_handler() -> StaticHandler | None:
    # The web client ships in the same wheel, but the relay must still route without it.
    try:
        from tunnel.relay.web import static_response
    except ImportError:
        logger.warning("tunnel.relay.web is missing: the web client is not served")
        return None
    return static_response


@dataclass(frozen=True, slots=True, kw_only=True)
class OriginPolicy:
    """Which browser origins may open WebSockets to the relay.

    A request without an Origin header comes from a non-browser client (a host, the Python
    client): browsers always send one, so it cannot be used for cross-site WebSocket hijacking.
    """

    allowed: frozenset[str]
    """Origins (scheme://host[:port], lowercase, default port omitted) that are accepted."""

    @classmethod
    def build(cls, public_url: str, extra: Iterable[str] = ()) -> OriginPolicy:
        """Allow the public URL's own origin plus `extra` origins."""
        return cls(allowed=frozenset({url_origin(public_url), *(url_origin(o) for o in extra)}))

    def allows(self, origin: str | None) -> bool:
        """Tell whether a WebSocket opening with this Origin header value may proceed."""
        if origin is None:
            return True
        try:
            return url_origin(origin) in self.allowed
        except ValueError:
            # "null" (sandboxed frames, file://) and garbage are never a trusted origin.
            return False


def response(
    status: int, body: bytes, content_type: str, extra: Iterable[tuple[str, str]] = ()
) -> Response:
    """Build a complete HTTP response; the connection closes after it."""
    status_obj = http.HTTPStatus(status)
    headers = Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            ("Content-Length", str(len(body))),
            ("Content-Type", content_type),
            ("X-Content-Type-Options", "nosniff"),
        ]
    )
    for name, value in extra:
        if name.lower() not in ("content-length", "content-type", "connection", "date"):
            headers[name] = value
    return Response(status_obj.value, status_obj.phrase, headers, body)


def text_response(status: int, text: str) -> Response:
    """Build a short plain-text response."""
    return response(status, text.encode(), "text/plain; charset=utf-8")


class HttpRouter:
    """Decides, for each incoming request, which response (if any) the relay sends."""

    def __init__(
        self,
        *,
        origins: OriginPolicy,
        metrics: RelayMetrics,
        static: StaticHandler | bool | None = True,
        metrics_token: str | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self._origins = origins
        self._cluster = cluster
        # Anyone who reaches a node can knock on its node path: said once in a while, not per try.
        self._node_warnings = ThrottledWarnings(logger)
        self._metrics = metrics
        self._metrics_token = None if metrics_token is None else metrics_token.encode()
        self._static: StaticHandler | None
        if static is True:
            self._static = _load_static_handler()
        elif static is False:
            self._static = None
        else:
            self._static = static

    def route(self, request: Request) -> Response | None:
        """Return the response to send, or None to continue with the WebSocket handshake."""
        path = urlsplit(request.path).path
        if path in WEBSOCKET_PATHS:
            try:
                origin = request.headers.get("Origin")
            except MultipleValuesError:
                # Which one would the browser mean? Neither is trusted; the client is broken.
                logger.info("refused a WebSocket with more than one Origin header")
                return text_response(400, "More than one Origin header.\n")
            if not self._origins.allows(origin):
                self._metrics.frames_rejected.labels(reason="origin").inc()
                logger.info("refused a WebSocket from origin %.100r", origin)
                return text_response(403, "Forbidden origin.\n")
            return None
        if path == NODE_LINK_PATH and self._cluster is not None:
            if self._node_signed(request):
                return None
            self._metrics.frames_rejected.labels(reason="node_auth").inc()
            self._node_warnings.warning(
                "refused a node-to-node connection with a bad or stale signature"
            )
            return text_response(403, "Forbidden.\n")
        if path == "/healthz":
            return text_response(200, self._health())
        if path == "/metrics":
            if not self._may_read_metrics(request):
                return response(
                    401,
                    b"Unauthorized.\n",
                    "text/plain; charset=utf-8",
                    [("WWW-Authenticate", 'Bearer realm="metrics"')],
                )
            return response(200, self._metrics.render(), CONTENT_TYPE_LATEST)
        if self._static is not None:
            found = self._static(path)
            if found is not None:
                status, headers, body = found
                content_type = "application/octet-stream"
                for name, value in headers:
                    if name.lower() == "content-type":
                        content_type = value
                return response(status, body, content_type, headers)
        return text_response(404, "Not found.\n")

    def _health(self) -> str:
        """The /healthz body: "ok", and on a cluster node whether it is in the cluster.

        Always 200 while the process serves: a node cut off from Redis still serves its own hosts
        and teammates, and taking every node out of a load balancer when Redis is away would
        stop those too."""
        if self._cluster is None:
            return "ok\n"
        return "ok\ncluster: " + ("member\n" if self._cluster.member else "unavailable\n")

    def _node_signed(self, request: Request) -> bool:
        """Tell whether a request to NODE_LINK_PATH carries a valid signature of a node, made
        for a node link (it names `LINK_CLIENT`)."""
        assert self._cluster is not None
        settings = self._cluster.settings
        client = verified_client(
            request.headers,
            settings.secret,
            node_url=settings.node_url,
            run=self._cluster.run_id,
            max_skew=settings.max_clock_skew,
        )
        return client == LINK_CLIENT

    def _may_read_metrics(self, request: Request) -> bool:
        """Tell whether the request may read /metrics: always without a metrics token, else only
        with `Authorization: Bearer <token>`."""
        if self._metrics_token is None:
            return True
        try:
            value = request.headers.get("Authorization")
        except MultipleValuesError:
            return False
        if value is None:
            return False
        scheme, _, credentials = value.strip().partition(" ")
        # Constant time: how long the answer takes must not tell how much of a guess was right.
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self._metrics_token
        )
