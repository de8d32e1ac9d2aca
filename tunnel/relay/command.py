"""`tunnel relay`: options and TUNNEL_RELAY_* variables become `RelaySettings`, then `run`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tunnel.link.framings import FramingName, check_framing
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import LogLevel, configure_logging
from tunnel.relay.limits import DEFAULT_WINDOW, MAX_CAST_BACKLOG, MAX_WINDOW_OPTION

if TYPE_CHECKING:
    from tunnel.proto import Limits
    from tunnel.relay.settings import ClusterSettings

CLUSTER_SECRET_VARIABLE = "TUNNEL_RELAY_CLUSTER_SECRET"  # noqa: S105 (a variable's name)
"""The environment variable that may hold the cluster secret (never a command-line option)."""


def _limit(value: int) -> int | None:
    return None if value <= 0 else value


def _link_limits(window: int, max_channels: int) -> Limits:
    """The limits of every link: `--window` and `--max-channels-per-link` over the protocol's
    defaults; ValueError for a window below the default or over MAX_WINDOW_OPTION. In a cluster
    every node must be given the same (an entry node closes a teammate whose owner advertises
    other limits, docs/cluster.md)."""
    from tunnel.proto import Limits

    if not DEFAULT_WINDOW <= window <= MAX_WINDOW_OPTION:
        # The default holds four of the largest `data` (256 KiB), so a receiver that keeps up
        # grants once per two of them at most; a smaller window would grant after nearly each.
        raise ValueError(f"--window must be {DEFAULT_WINDOW} to {MAX_WINDOW_OPTION} bytes")
    return Limits(max_channels=_limit(max_channels), initial_window=window)


def _metrics_token(token: str | None, path: Path | None) -> str | None:
    """The /metrics token, given itself or in a file that holds only it; ValueError if both."""
    if path is None:
        return token
    if token is not None:
        raise ValueError("give --metrics-token or --metrics-token-file, not both")
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the metrics token from {path}: {exc}") from None


def _cluster_secret(path: Path | None) -> bytes:
    """The cluster secret, from `path` or TUNNEL_RELAY_CLUSTER_SECRET; ValueError if neither or
    both. Surrounding whitespace is ignored."""
    variable = os.environ.get(CLUSTER_SECRET_VARIABLE)
    if path is not None and variable is not None:
        raise ValueError(f"give --cluster-secret-file or {CLUSTER_SECRET_VARIABLE}, not both")
    if path is not None:
        try:
            return path.read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the cluster secret from {path}: {exc}") from None
    if variable is None:
        raise ValueError(
            "--cluster needs the cluster secret: --cluster-secret-file or "
            + CLUSTER_SECRET_VARIABLE
        )
    return variable.strip().encode()


def _cluster(
    redis_url: str | None, node_url: str | None, secret_file: Path | None
) -> ClusterSettings | None:
    """The cluster settings from the options, or None without --cluster."""
    if redis_url is None:
        if node_url is not None or secret_file is not None:
            raise ValueError("--node-url and --cluster-secret-file go with --cluster")
        return None
    if node_url is None:
        raise ValueError("--cluster needs --node-url: the ws:// address other nodes reach this on")
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ValueError(
            "--cluster needs the redis package: pip install 'agent-tunnel[cluster]'"
        ) from None
    from tunnel.relay.settings import ClusterSettings

    return ClusterSettings(
        redis_url=redis_url, node_url=node_url, secret=_cluster_secret(secret_file)
    )


def relay_command(
    host: Annotated[
        str,
        typer.Option(envvar="TUNNEL_RELAY_HOST", metavar="ADDRESS", help="Interface to bind."),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_PORT",
            min=0,
            max=65535,
            metavar="PORT",
            help="TCP port; 0 picks a free one (printed).",
        ),
    ] = 8765,
    certfile: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_RELAY_CERTFILE",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="PEM certificate chain: serve TLS.",
        ),
    ] = None,
    keyfile: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_RELAY_KEYFILE",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="PEM private key for --certfile.",
        ),
    ] = None,
    authorized_keys: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_RELAY_AUTHORIZED_KEYS",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="Only hosts whose public key is in this file may register.",
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_RELAY_PUBLIC_URL",
            metavar="URL",
            help="The https:// URL hosts and browsers use to reach the relay "
            "(default: the bound address).",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            envvar="TUNNEL_RELAY_ALLOWED_ORIGIN",
            metavar="ORIGIN",
            help="Another browser origin allowed to open WebSockets (repeatable).",
        ),
    ] = None,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_RELAY_METRICS_TOKEN",
            metavar="TOKEN",
            show_default=False,
            help="/metrics then requires 'Authorization: Bearer TOKEN' (default: open). Set it"
            " in the variable or use --metrics-token-file: ps shows the command line.",
        ),
    ] = None,
    metrics_token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_RELAY_METRICS_TOKEN_FILE",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="Read the /metrics token from this file, which holds only the token.",
        ),
    ] = None,
    max_hosts: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_HOSTS", metavar="N", help="Hosts online at once (0: no limit)."
        ),
    ] = 1000,
    max_teammates_per_host: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_TEAMMATES_PER_HOST",
            metavar="N",
            help="Teammates attached to one host (0: no limit).",
        ),
    ] = 32,
    drive_seats: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_DRIVE_SEATS",
            metavar="N",
            help="Of --max-teammates-per-host, seats only drive links may take: viewers get at"
            " most the others (0: none kept).",
        ),
    ] = 4,
    channel_timeout: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_RELAY_CHANNEL_TIMEOUT",
            metavar="SECONDS",
            help="Seconds an attached teammate may hold no channel open before it is closed"
            " (0: no limit).",
        ),
    ] = 10.0,
    max_connections_per_ip: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_CONNECTIONS_PER_IP",
            metavar="N",
            help="WebSocket connections from one IP address (0: no limit).",
        ),
    ] = 64,
    max_channels_per_teammate: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_CHANNELS_PER_TEAMMATE",
            metavar="N",
            help="Channels one teammate may hold open (0: no limit).",
        ),
    ] = 8,
    max_cast_backlog: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_CAST_BACKLOG",
            metavar="BYTES",
            min=1,
            help="Bytes of a host's broadcast queued for one slow teammate before it is cut"
            " from it (it then catches up on its own channel).",
        ),
    ] = MAX_CAST_BACKLOG,
    window: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_WINDOW",
            metavar="BYTES",
            help="Each channel's flow-control window, per direction, which hosts and teammates"
            f" adopt; {DEFAULT_WINDOW} to {MAX_WINDOW_OPTION}. Larger moves bulk data faster and"
            " lets a peer that stops reading make the relay and the other end hold that much per"
            " channel (docs/relay.md, 'The channel window').",
        ),
    ] = DEFAULT_WINDOW,
    max_channels_per_link: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_RELAY_MAX_CHANNELS_PER_LINK",
            metavar="N",
            help="Open channels on one connection (0: no limit).",
        ),
    ] = 256,
    hello_timeout: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_RELAY_HELLO_TIMEOUT",
            metavar="SECONDS",
            help="Seconds a new connection has to say hello.",
        ),
    ] = 10.0,
    send_timeout: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_RELAY_SEND_TIMEOUT",
            metavar="SECONDS",
            help="Seconds a peer may stop reading its socket before it is cut off (0: never).",
        ),
    ] = 30.0,
    cluster: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_RELAY_CLUSTER",
            metavar="REDIS_URL",
            show_default=False,
            help="Join a cluster of relay nodes through Redis (redis://HOST:PORT/DB; default: run"
            " alone). A URL with a password belongs in the variable: ps shows the command line.",
        ),
    ] = None,
    node_url: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_RELAY_NODE_URL",
            metavar="URL",
            show_default=False,
            help="With --cluster: ws://ADDRESS:PORT where the other nodes reach this one.",
        ),
    ] = None,
    cluster_secret_file: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_RELAY_CLUSTER_SECRET_FILE",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="With --cluster: the secret every node shares, in a file that holds only it"
            f" (or set {CLUSTER_SECRET_VARIABLE}).",
        ),
    ] = None,
    framing: Annotated[
        FramingName,
        typer.Option(
            envvar="TUNNEL_RELAY_FRAMING",
            help="The WebSocket library to serve with: picows (pip install"
            " 'agent-tunnel[fast]') spends a quarter of websockets' CPU per message relayed"
            " (docs/performance.md); not with --cluster.",
        ),
    ] = FramingName.websockets,
    log_level: Annotated[
        LogLevel, typer.Option(envvar="TUNNEL_RELAY_LOG_LEVEL", help="Log verbosity.")
    ] = LogLevel.info,
) -> None:
    """Run the relay: hosts dial in, teammates attach, and the relay routes what it cannot read."""
    # The relay loads only now, so that `tunnel --help` and the other commands never do.
    import anyio

    from tunnel.e2e.identity import KeyFileError
    from tunnel.process.signals import exit_code_after, run_until_signal
    from tunnel.relay.server import run
    from tunnel.relay.settings import RelaySettings

    try:
        settings = RelaySettings(
            host=host,
            port=port,
            certfile=certfile,
            keyfile=keyfile,
            authorized_keys=authorized_keys,
            public_url=public_url,
            allowed_origins=tuple(allowed_origin or ()),
            metrics_token=_metrics_token(metrics_token, metrics_token_file),
            max_hosts=_limit(max_hosts),
            max_teammates_per_host=_limit(max_teammates_per_host),
            drive_seats=_limit(drive_seats),
            channel_timeout=None if channel_timeout <= 0 else channel_timeout,
            max_connections_per_ip=_limit(max_connections_per_ip),
            max_channels_per_teammate=_limit(max_channels_per_teammate),
            max_cast_backlog=max_cast_backlog,
            hello_timeout=hello_timeout,
            send_timeout=None if send_timeout <= 0 else send_timeout,
            limits=_link_limits(window, max_channels_per_link),
            log_level=log_level.value,
            cluster=_cluster(cluster, node_url, cluster_secret_file),
            framing=check_framing(framing.value),
        )
    except ValueError as exc:
        typer.echo(f"tunnel relay: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    configure_logging(settings.log_level)
    try:
        # Runs until SIGINT or SIGTERM; the relay then closes every connection with 1001.
        stopped_by = anyio.run(run_until_signal, lambda tg: tg.start(run, settings))
    except (KeyFileError, OSError, ValueError) as exc:
        # Unusable key list, certificate or port (in use, not allowed): one line, no traceback.
        typer.echo(f"tunnel relay: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(exit_code_after(stopped_by))
