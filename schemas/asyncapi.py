"""The AsyncAPI 3.0 document of the worker's RabbitMQ interface (`schemas/asyncapi.yaml`).

Generated, never edited by hand: message payloads come from the wire-contract models
(`Job`, `OkReply`, `ErrorReply`, the archive's `OkRecord` and `ErrorRecord`) and queue names and arguments from the `Queues` the caller
passes, which `prompt-worker asyncapi` takes from `worker.transport.link.topology`, the same
objects the worker declares. `prompt-worker asyncapi --write` regenerates the file; a
test fails while the committed copy is stale.

Everything is described from the worker's side: it *receives* jobs and *sends* replies.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic.json_schema import models_json_schema

from schemas.archive import ErrorRecord, OkRecord
from schemas.job import Job
from schemas.reply import ErrorReply, OkReply

ASYNCAPI_FILE = "asyncapi.yaml"
# The version of the wire contract (v1, in the title of docs/CONTRACT.md), not of the package: the document
# changes only when the contract does.
CONTRACT_VERSION = "1.0.0"
AMQP_BINDING_VERSION = "0.3.0"

_COMPONENT_SCHEMAS = "#/components/schemas/{model}"
_REPLY_TO = "$message.header#/reply_to"
_CORRELATION_ID = "$message.header#/correlation_id"


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    # Exactly as declared: RabbitMQ refuses a re-declaration whose arguments differ.
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Queues:
    """The queues the document describes, as the worker declares them."""

    requests: Queue
    replies: Queue
    dead_letters: Queue
    # The fanout exchange the request queue dead-letters through, bound to `dead_letters`.
    dead_letter_exchange: str
    # The archive stream every answered job is recorded on (SPEC §12).
    archive: Queue


def _ref(path: str) -> dict[str, str]:
    return {"$ref": path}


def _queue_binding(queue: Queue) -> dict[str, Any]:
    return {
        "amqp": {
            "is": "queue",
            "queue": {
                "name": queue.name,
                "durable": True,
                "exclusive": False,
                "autoDelete": False,
                "vhost": "/",
            },
            # The AMQP binding has no field for queue arguments; RabbitMQ refuses a
            # re-declaration whose arguments differ, so consumers need them exactly.
            "x-queue-arguments": dict(queue.arguments),
            "bindingVersion": AMQP_BINDING_VERSION,
        }
    }


def _payload_schemas() -> dict[str, Any]:
    """JSON Schemas of the payloads, every nested model under components.schemas."""
    _, definitions = models_json_schema(
        [
            (Job, "validation"),
            (OkReply, "validation"),
            (ErrorReply, "validation"),
            (OkRecord, "validation"),
            (ErrorRecord, "validation"),
        ],
        ref_template=_COMPONENT_SCHEMAS,
    )
    schemas: dict[str, Any] = definitions["$defs"]
    return dict(sorted(schemas.items()))


def _reply_messages() -> dict[str, Any]:
    return {
        "okReply": _ref("#/components/messages/okReply"),
        "errorReply": _ref("#/components/messages/errorReply"),
    }


def _messages() -> dict[str, Any]:
    correlation = {
        "description": "The request's AMQP correlation_id property, copied to its reply "
        "(the job_id when the request has none).",
        "location": _CORRELATION_ID,
    }
    amqp = {"amqp": {"bindingVersion": AMQP_BINDING_VERSION}}
    record_headers = {
        "type": "object",
        "description": "AMQP headers a reader can filter on without decompressing; one "
        "whose value is absent is left out (the broker adds x-stream-offset).",
        "properties": {
            "record": {"type": "integer", "const": 1, "description": "The record's version."},
            "kind": {"type": "string", "description": "The job's kind, when it was read."},
            "family": {"type": "string", "description": "The prompt family (ok records)."},
            "session_id": {"type": "string", "description": "The job's session.session_id."},
            "status": {"type": "string", "enum": ["ok", "error"]},
        },
        "required": ["record", "status"],
    }
    record_description = (
        "The body is zstd-compressed (AMQP content_encoding zstd) UTF-8 JSON. Properties: "
        "content_type application/json, timestamp the answer time (seconds), message_id "
        "the job's id (random when it has none), delivery_mode 2, type "
        "build-prompt.archive-record, app_id prompt-worker."
    )
    return {
        "okRecord": {
            "name": "okRecord",
            "title": "Archive record of an ok reply",
            "description": record_description,
            "contentType": "application/json",
            "headers": record_headers,
            "payload": _ref(_COMPONENT_SCHEMAS.format(model="OkRecord")),
            "bindings": amqp,
        },
        "errorRecord": {
            "name": "errorRecord",
            "title": "Archive record of an error reply",
            "description": record_description,
            "contentType": "application/json",
            "headers": record_headers,
            "payload": _ref(_COMPONENT_SCHEMAS.format(model="ErrorRecord")),
            "bindings": amqp,
        },
        "job": {
            "name": "job",
            "title": "Build-prompt job",
            "summary": "Incident-investigation state to turn into an LLM message list.",
            "description": (
                "AMQP properties: reply_to names the queue for the reply (RPC); without it "
                "the reply goes to the default reply queue. correlation_id is copied to "
                "the reply. Unknown fields are ignored."
            ),
            "contentType": "application/json",
            "correlationId": correlation,
            "payload": _ref(_COMPONENT_SCHEMAS.format(model="Job")),
            "bindings": amqp,
        },
        "okReply": {
            "name": "okReply",
            "title": "Rendered messages",
            "contentType": "application/json",
            "correlationId": correlation,
            "payload": _ref(_COMPONENT_SCHEMAS.format(model="OkReply")),
            "bindings": amqp,
        },
        "errorReply": {
            "name": "errorReply",
            "title": "Error reply",
            "summary": "invalid_json, invalid_job, payload_too_large, over_budget, render_timeout or internal.",
            "contentType": "application/json",
            "correlationId": correlation,
            "payload": _ref(_COMPONENT_SCHEMAS.format(model="ErrorReply")),
            "bindings": amqp,
        },
        "deadLetter": {
            "name": "deadLetter",
            "title": "Dead-lettered job",
            "summary": "The original request, unchanged, as RabbitMQ dead-lettered it.",
            "description": (
                "Bad input (unparseable, invalid, too large) is answered with an error "
                "reply and then rejected, and a job redelivered past the delivery limit "
                "is dead-lettered by the broker. The body is the original bytes, which "
                "need not be JSON; RabbitMQ's x-death header says why and from where. "
                "`prompt-worker replay-dead` moves them back to the request queue."
            ),
            "headers": {
                "type": "object",
                "properties": {
                    "x-death": {
                        "type": "array",
                        "description": "Set by RabbitMQ, most recent death first.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "reason": {
                                    "type": "string",
                                    "enum": ["rejected", "expired", "maxlen", "delivery_limit"],
                                },
                                "queue": {"type": "string"},
                                "count": {"type": "integer"},
                                "exchange": {"type": "string"},
                                "routing-keys": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    }
                },
            },
            "payload": {"description": "The original request body (any bytes)."},
        },
    }


def asyncapi_document(queues: Queues) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the worker's `queues`."""
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Build-prompt worker",
            "version": CONTRACT_VERSION,
            "description": (
                "Turns incident-investigation jobs into the exact message lists an LLM is "
                "called with. Producers publish a job to the request queue and receive "
                "the reply on their reply_to queue (RPC), or on the default reply queue. "
                "A request is acknowledged only after its reply is confirmed by the "
                "broker: delivery is at least once, so consumers of replies deduplicate "
                "by correlation_id or job_id. Every queue name is configurable "
                "(PROMPT_WORKER_*_QUEUE); the names here are the defaults."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "rabbitmq": {
                "host": "localhost:5672",
                "protocol": "amqp",
                "protocolVersion": "0.9.1",
                "description": "Any RabbitMQ broker with quorum queues; the worker's "
                "PROMPT_WORKER_AMQP_URL.",
            }
        },
        "channels": {
            "requests": {
                "address": queues.requests.name,
                "title": "Request queue",
                "description": (
                    "Durable quorum queue. Deliveries past the delivery limit and bad "
                    f"input are dead-lettered through the exchange {queues.dead_letter_exchange!r}."
                ),
                "messages": {"job": _ref("#/components/messages/job")},
                "bindings": _queue_binding(queues.requests),
            },
            "replyTo": {
                # The address is only known at run time: the request's reply_to.
                "address": None,
                "title": "The requester's reply queue",
                "description": "Whatever queue the request's reply_to property names, "
                "reached through the default exchange.",
                "messages": _reply_messages(),
            },
            "replies": {
                "address": queues.replies.name,
                "title": "Default reply queue",
                "description": "Replies to jobs published without reply_to.",
                "messages": _reply_messages(),
                "bindings": _queue_binding(queues.replies),
            },
            "deadLetters": {
                "address": queues.dead_letters.name,
                "title": "Dead-letter queue",
                "description": (
                    f"Fanout exchange {queues.dead_letter_exchange!r} bound to the durable "
                    "quorum queue of the same name; holds rejected and poison jobs for "
                    "inspection and replay."
                ),
                "messages": {"deadLetter": _ref("#/components/messages/deadLetter")},
                "bindings": _queue_binding(queues.dead_letters),
            },
            "archive": {
                "address": queues.archive.name,
                "title": "Archive stream",
                "description": (
                    "A RabbitMQ stream holding one record of every answered job, ok or "
                    "error, for rerender --from-archive and report (docs/ARCHIVE.md). "
                    "Read it from an offset or a time (x-stream-offset); records may be "
                    "duplicated (a job answered twice) and a few lost (counted by the "
                    "worker, never at the cost of a job)."
                ),
                "messages": {
                    "okRecord": _ref("#/components/messages/okRecord"),
                    "errorRecord": _ref("#/components/messages/errorRecord"),
                },
                "bindings": _queue_binding(queues.archive),
            },
        },
        "operations": {
            "renderJob": {
                "action": "receive",
                "channel": _ref("#/channels/requests"),
                "title": "Render a job",
                "summary": "Consume a job, publish its reply (with publisher confirms), "
                "then acknowledge the job.",
                "messages": [_ref("#/channels/requests/messages/job")],
                "bindings": {"amqp": {"ack": True, "bindingVersion": AMQP_BINDING_VERSION}},
                "reply": {
                    "address": {
                        "description": "The request's reply_to property.",
                        "location": _REPLY_TO,
                    },
                    "channel": _ref("#/channels/replyTo"),
                    "messages": [
                        _ref("#/channels/replyTo/messages/okReply"),
                        _ref("#/channels/replyTo/messages/errorReply"),
                    ],
                },
            },
            "sendReply": {
                "action": "send",
                "channel": _ref("#/channels/replies"),
                "title": "Reply to a job without reply_to",
                "messages": [
                    _ref("#/channels/replies/messages/okReply"),
                    _ref("#/channels/replies/messages/errorReply"),
                ],
                "bindings": {
                    "amqp": {
                        "deliveryMode": 2,
                        "mandatory": True,
                        "bindingVersion": AMQP_BINDING_VERSION,
                    }
                },
            },
            "recordAnswer": {
                "action": "send",
                "channel": _ref("#/channels/archive"),
                "title": "Record an answered job",
                "summary": "After a job's reply is confirmed and before the job is "
                "acknowledged, its record is published (publisher confirms) and its confirm "
                "awaited for at most the archive's confirm timeout.",
                "messages": [
                    _ref("#/channels/archive/messages/okRecord"),
                    _ref("#/channels/archive/messages/errorRecord"),
                ],
                "bindings": {
                    "amqp": {
                        "deliveryMode": 2,
                        "mandatory": True,
                        "bindingVersion": AMQP_BINDING_VERSION,
                    }
                },
            },
            "deadLetterJob": {
                "action": "send",
                "channel": _ref("#/channels/deadLetters"),
                "title": "Dead-letter bad input",
                "summary": "After its error reply, a bad job is rejected without requeue; "
                "the broker moves it to the dead-letter queue.",
                "messages": [_ref("#/channels/deadLetters/messages/deadLetter")],
            },
        },
        "components": {
            "messages": _messages(),
            "schemas": _payload_schemas(),
        },
    }


class _Dumper(yaml.SafeDumper):
    # No &anchors / *aliases: readers of the file should not have to resolve them.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_asyncapi(queues: Queues) -> str:
    """The document as YAML text, exactly as committed in schemas/asyncapi.yaml."""
    header = (
        "# GENERATED by `prompt-worker asyncapi --write schemas/asyncapi.yaml` from the\n"
        "# wire-contract models and worker/transport/link/topology.py. Do not edit by hand.\n"
    )
    body = yaml.dump(
        asyncapi_document(queues), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )
    return header + body
