"""nginx in front of a relay, configured from relay/nginx.conf, and a test certificate authority.

relay/nginx.conf is what operators install, so it is what the tests run: its listen line becomes a
loopback port, its certificate lines name a certificate made for the test, its upstream's server
lines name the test's relays with the file's options; every other line is used as written. A main
configuration around it keeps nginx in the foreground, in one process, with its pid, logs and
temporary files in the test's directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import stop_process

ROOT = Path(__file__).resolve().parents[3]
SITE = ROOT / "relay" / "nginx.conf"

_LISTEN = re.compile(r"^([ \t]*)listen[ \t]+443[ \t]+ssl;$", re.MULTILINE)
_CERTIFICATE = re.compile(r"^([ \t]*)(ssl_certificate(?:_key)?)([ \t]+)\S+;$", re.MULTILINE)
_SERVER = re.compile(r"^([ \t]*)server[ \t]+\S+:\d+(.*);$", re.MULTILINE)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Certificates:
    """A certificate authority made for one test, and a certificate it signed for 127.0.0.1."""

    ca: Path
    """The authority's certificate (PEM): what a client trusts."""
    certificate: Path
    key: Path


def make_certificates(directory: Path) -> Certificates:
    """A fresh authority and a server certificate for 127.0.0.1 and localhost, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-tunnel test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    found = Certificates(
        ca=directory / "ca.pem",
        certificate=directory / "relay.pem",
        key=directory / "relay.key",
    )
    found.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    found.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    found.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return found


def loopback_site(
    site: str, *, port: int, relay_ports: Sequence[int], certificates: Certificates
) -> str:
    """`site` listening on 127.0.0.1:`port`, with the test's certificate, and one upstream
    server line per port of `relay_ports` (with the file's servers' options) in place of its
    own."""
    assert len(_LISTEN.findall(site)) == 1, "expected one 'listen 443 ssl;' line"
    servers = list(_SERVER.finditer(site))
    assert servers, "expected server lines in the upstream"
    span = site[servers[0].start() : servers[-1].end()]
    assert len(span.splitlines()) == len(servers), "expected the server lines together"
    options = {server.group(2) for server in servers}
    assert len(options) == 1, "expected the same options on every server line"
    indent, (option,) = servers[0].group(1), options
    lines = [f"{indent}server 127.0.0.1:{p}{option};" for p in relay_ports]
    config = site[: servers[0].start()] + "\n".join(lines) + site[servers[-1].end() :]
    config = _LISTEN.sub(lambda m: f"{m.group(1)}listen 127.0.0.1:{port} ssl;", config)
    paths = {
        "ssl_certificate": certificates.certificate,
        "ssl_certificate_key": certificates.key,
    }
    assert len(_CERTIFICATE.findall(config)) == 2, "expected a certificate and its key"
    return _CERTIFICATE.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{paths[m.group(2)]};", config
    )


def main_config(workdir: Path, site: Path) -> str:
    """nginx's main configuration around `site`: in the foreground, one process (no user to
    switch to), every file it writes in `workdir`."""
    temp = {name: workdir / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(parents=True, exist_ok=True)
    return "\n".join(
        [
            "daemon off;",
            "master_process off;",
            f"pid {workdir / 'nginx.pid'};",
            f"error_log {workdir / 'error.log'} info;",
            "events { worker_connections 256; }",
            "http {",
            f"    access_log {workdir / 'access.log'};",
            f"    client_body_temp_path {temp['body']};",
            f"    proxy_temp_path {temp['proxy']};",
            f"    fastcgi_temp_path {temp['fastcgi']};",
            f"    uwsgi_temp_path {temp['uwsgi']};",
            f"    scgi_temp_path {temp['scgi']};",
            f"    include {site};",
            "}",
            "",
        ]
    )


class Nginx:
    """nginx on 127.0.0.1 (TLS), in front of the relays at `relay_ports`."""

    def __init__(
        self,
        workdir: Path,
        relay_ports: Sequence[int],
        executable: str,
        certificates: Certificates,
        port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.executable = executable
        self.relay_ports = list(relay_ports)
        self.certificates = certificates
        self.port = port if port is not None else free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def error_log(self) -> Path:
        return self.workdir / "error.log"

    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        site = self.workdir / "site.conf"
        site.write_text(
            loopback_site(
                SITE.read_text(),
                port=self.port,
                relay_ports=self.relay_ports,
                certificates=self.certificates,
            )
        )
        config = self.workdir / "nginx.conf"
        config.write_text(main_config(self.workdir, site))
        return config

    def argv(self, *extra: str) -> list[str]:
        """nginx with the test's configuration, its prefix and error log in the workdir."""
        config = self.workdir / "nginx.conf"
        prefix = f"{self.workdir}/"
        return [self.executable, "-p", prefix, "-c", str(config), "-e", str(self.error_log), *extra]

    def start(self, timeout: float = 20.0) -> Nginx:
        self.write_config()
        with (self.workdir / "stderr.log").open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError(f"nginx did not start: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        parts = [self.workdir / "stderr.log", self.error_log]
        return "\n".join(p.read_text(errors="replace") for p in parts if p.exists())

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
