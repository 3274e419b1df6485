"""``POST /native/v1/producers``: a producer id for an idempotent producer, or its epoch bumped.

Any broker answers (producer ids are not bound to a partition leader); the ids come from the broker's
:class:`~tierlog.service.topics.producer_ids.ProducerIdManager` (design note 0011, "Producer ids"). The wire
contract is ``docs/native-api.md``.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tierlog.service.security import authz
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType
from tierlog.service.web.json_stream import dump_json
from tierlog.service.web.keys import BROKER
from tierlog.service.web.media import Offer, negotiate
from tierlog.service.web.requests import read_body
from tierlog.wire.errors import BadRequestError, NotAcceptableError, UnsupportedMediaTypeError
from tierlog.wire.native import PRODUCERS_PATH

__all__ = ["init_producer_id", "setup_routes"]

_JSON_OFFERS = (Offer("application/json", 1.0),)
_FIELDS = frozenset({"producer_id", "producer_epoch"})


def setup_routes(app: web.Application) -> None:
    """Register ``POST /native/v1/producers`` on ``app`` (before it starts). Not idempotent."""
    app.router.add_post(PRODUCERS_PATH, init_producer_id)


async def init_producer_id(request: web.Request) -> web.Response:
    """A new producer id at epoch 0 (no body, or ``{}``), or the epoch bump of ``{"producer_id": N,
    "producer_epoch": E}``: ``E + 1``, or a new id at epoch 0 when ``E`` is 32767. Answers 200
    ``{"producer_id", "producer_epoch"}``.

    Not idempotent: every call hands out a new id or a new epoch (a client whose answer was lost asks
    again and abandons the lost one). Raises NotAcceptableError (406), UnsupportedMediaTypeError (415: a
    body that is not ``application/json``), BadRequestError (40001: not a JSON object, an unknown field,
    only one of the two fields, not integers), InvalidValueError (42202: out of range),
    UnknownProducerIdError (404, 40404: an id this cluster never issued), UnavailableError (503: the
    broker is not open, or its state / the metadata store cannot be written), RecordTooLargeError (413),
    AuthorizationError (40301: neither IdempotentWrite on the Cluster nor Write on any topic, as Kafka's
    InitProducerId needs).
    """
    if negotiate(request.headers.get("Accept"), _JSON_OFFERS) is None:
        raise NotAcceptableError("this route answers application/json only")
    if not authz.allowed(
        request, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not authz.allowed_any(request, Operation.WRITE, ResourceType.TOPIC):
        authz.authorize(request, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
    doc = await _body(request)
    broker = request.app[BROKER]
    broker.check_ready()
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise BadRequestError(f"unknown field(s) {', '.join(map(repr, unknown))}; expected {sorted(_FIELDS)}")
    if not doc:
        producer_id, epoch = await broker.producer_ids.new_id()
    elif set(doc) != _FIELDS:
        raise BadRequestError("send both producer_id and producer_epoch to bump an epoch, or neither")
    else:
        producer_id, epoch = await broker.producer_ids.bump(doc["producer_id"], doc["producer_epoch"])
    return web.Response(
        body=dump_json({"producer_id": producer_id, "producer_epoch": epoch}),
        content_type="application/json",
    )


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object body, ``{}`` when there is none. Raises UnsupportedMediaTypeError (415),
    BadRequestError (40001), RecordTooLargeError (413)."""
    raw = await read_body(request)
    if not raw.strip():
        return {}
    content_type = request.content_type
    if content_type != "application/json" and not content_type.endswith("+json"):
        raise UnsupportedMediaTypeError(
            f"Content-Type {content_type} is not supported: send application/json"
        )
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequestError(f"Request body is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise BadRequestError("Request body must be a JSON object")
    return doc
