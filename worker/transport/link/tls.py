"""TLS to the broker: the one place that builds what every broker user connects with.

`serve`, `PromptClient`, `rerender --broker` and `replay-dead` all reach RabbitMQ
through `connect_kwargs`, so they trust the same CA file, present the same client
certificate and refuse the same servers. An `amqps://` URL without a CA file trusts the
system's certificate authorities; with one, only that CA (a private CA is the usual
case). A client certificate and key make it mutual TLS; with `?auth=external` in the URL
RabbitMQ takes the certificate itself as the identity (EXTERNAL mechanism) and the URL
needs no password.

Verification is never switched off here: a server whose certificate does not match the
URL's host, or that another CA signed, is refused, and `refusal` turns the error into
one line that says so.
"""

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from typing import Any

from yarl import URL

TLS_SCHEME = "amqps"


class TlsFilesError(ValueError):
    """A CA, certificate or key file cannot be used; the message names the file."""


class TlsRefused(Exception):
    """The broker's certificate failed verification: retrying cannot help."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the CA bundle, the client certificate and its (unencrypted) key are."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def any(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.key_file)

    def context(self) -> ssl.SSLContext:
        """A client context: hostname checked, certificate required, TLS 1.2 at least."""
        if self.key_file and not self.cert_file:
            raise TlsFilesError("a TLS key file needs its certificate file too")
        try:
            # With a CA file only that CA is trusted, not the system's bundle.
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(f"cannot load the CA file {self.ca_file}: {_reason(exc)}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                where = self.cert_file + (f" and {self.key_file}" if self.key_file else "")
                raise TlsFilesError(
                    f"cannot load the client certificate {where}: {_reason(exc)}"
                ) from None
        return context


def uses_tls(url: str | URL) -> bool:
    return URL(url).scheme == TLS_SCHEME


def connect_kwargs(url: str | URL, tls: TlsFiles | None) -> dict[str, Any]:
    """Keyword arguments for the worker's connections (`ssl_context`, for aiormq's `context`).

    Empty for `amqp://`; for `amqps://` the SSL context built from `tls`. Raises
    `TlsFilesError` for unusable files, and when TLS files are given for a plain URL
    (a deployment that meant TLS must not silently talk in clear).
    """
    tls = tls or TlsFiles()
    if not uses_tls(url):
        if tls.any:
            raise TlsFilesError(
                "TLS files are set but the broker URL is amqp://; use amqps:// for TLS"
            )
        return {}
    return {"ssl_context": tls.context()}


def refusal(exc: BaseException) -> str | None:
    """One line saying why the broker's certificate was refused, or None if it was not.

    aiormq wraps the `ssl` error in its own connection error, so the chain is followed.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            detail = current.verify_message or current.reason or str(current)
            return (
                f"the broker's TLS certificate was refused: {detail} (is it signed by the CA "
                "of --tls-ca-file, and does it name the URL's host?)"
            )
        current = current.__cause__ or current.__context__
    return None


async def check_server(
    url: str | URL,
    kwargs: dict[str, Any],
    timeout: float = 10.0,  # noqa: ASYNC109
) -> None:
    """A TLS handshake with the broker, to refuse a wrong certificate at once.

    The worker's robust connection retries every failure forever; a certificate that
    fails verification will not get better, so it is checked before (the broker logs
    the probe as a client that closed before speaking AMQP). Raises
    `TlsRefused`; an unreachable broker is left to the connection's own retries.
    `kwargs` is what `connect_kwargs` gave; nothing is checked for `amqp://`.
    """
    context = kwargs.get("ssl_context")
    if context is None:
        return
    parsed = URL(url)
    host = parsed.host or "localhost"
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, parsed.port or 5671, ssl=context), timeout
        )
    except ssl.SSLCertVerificationError as exc:
        message = refusal(exc)
        assert message is not None
        raise TlsRefused(message) from None
    except (OSError, TimeoutError):
        return
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), timeout)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
