"""A RabbitMQ node with a TLS listener that demands client certificates, for the tests
that connect over TLS (the worker and its commands, the image).

The certificates are made on the spot (tests/tls_certs.py): a private CA signs the
node's certificate (for 127.0.0.1 and localhost) and a client certificate whose common
name is a user of the node with no password, so only EXTERNAL (the certificate) logs it
in; another CA, which signed nothing the node shows, stands for a wrong trust store.
The node listens with TLS on 127.0.0.1:`tls_port` and, with the same certificate, on
127.0.0.2:`tls_port`, a loopback address the certificate does not name. Its plain
listener (`node.url`, guest) is for the test's own producers and inspection.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.rabbit_nodes import ExtraNode, free_ports
from tests.tls_certs import Authority, Issued, make_authority, shared_directory
from worker.transport.link.tls import TlsFiles

# The CN of the client certificate, and so its RabbitMQ user under EXTERNAL.
CLIENT_IDENTITY = "prompt-worker-tls"
GOOD_HOST = "127.0.0.1"
# Loopback too (Linux routes all of 127/8 to lo), but not in the node's certificate.
UNNAMED_HOST = "127.0.0.2"


@dataclass(frozen=True)
class TlsNode:
    node: ExtraNode
    tls_port: int
    directory: Path  # the certificates and keys, readable by every user (containers too)
    ca: Authority
    other_ca: Authority
    client: Issued

    def url(self, host: str = GOOD_HOST, *, external: bool = False) -> str:
        """amqps:// as guest, or with `external` as the client certificate's user."""
        if external:
            return f"amqps://{host}:{self.tls_port}/?auth=external"
        return f"amqps://guest:guest@{host}:{self.tls_port}/"

    def files(self, *, ca: Authority | None = None, client: bool = True) -> TlsFiles:
        return TlsFiles(
            str((ca or self.ca).cert),
            str(self.client.cert) if client else None,
            str(self.client.key) if client else None,
        )


def tls_env(files: TlsFiles) -> dict[str, str]:
    """The PROMPT_WORKER_TLS_* variables for `files`."""
    env = {"PROMPT_WORKER_TLS_CA_FILE": files.ca_file or ""}
    if files.cert_file and files.key_file:
        env["PROMPT_WORKER_TLS_CERT_FILE"] = files.cert_file
        env["PROMPT_WORKER_TLS_KEY_FILE"] = files.key_file
    return env


def connections(node: ExtraNode) -> list[list[str]]:
    """The node's connections: user, ssl, auth_mechanism, client_properties."""
    listing = node.ctl(
        "list_connections", "user", "ssl", "auth_mechanism", "client_properties", "--quiet"
    ).stdout
    return [line.split("\t") for line in listing.splitlines() if line.strip()]


@contextmanager
def tls_node(label: str) -> Iterator[TlsNode]:
    """Start a node named after `label` and the run (plain AMQP and TLS on free ports);
    stopped on exit."""
    port, tls_port = free_ports(), free_ports()
    directory = shared_directory(Path(f"/tmp/prompt-worker-tls-{uuid.uuid4().hex[:8]}"))
    try:
        ca = make_authority(directory, "test-ca")
        other_ca = make_authority(directory, "other-ca")
        server = ca.issue(directory, "server", "localhost", hosts=(GOOD_HOST, "localhost"))
        client = ca.issue(directory, "client", CLIENT_IDENTITY, client=True)
        conf = f"""
listeners.ssl.1 = {GOOD_HOST}:{tls_port}
listeners.ssl.2 = {UNNAMED_HOST}:{tls_port}
ssl_options.cacertfile = {ca.cert}
ssl_options.certfile = {server.cert}
ssl_options.keyfile = {server.key}
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
"""
        with ExtraNode(label, port, conf=conf, plugins=["rabbitmq_auth_mechanism_ssl"]) as node:
            if CLIENT_IDENTITY not in node.ctl("list_users", "--quiet").stdout.split():
                node.ctl("add_user", CLIENT_IDENTITY, uuid.uuid4().hex)
            # No password at all: only its certificate can log it in.
            node.ctl("clear_password", CLIENT_IDENTITY)
            node.ctl("set_permissions", "-p", "/", CLIENT_IDENTITY, ".*", ".*", ".*")
            yield TlsNode(node, tls_port, directory, ca, other_ca, client)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
