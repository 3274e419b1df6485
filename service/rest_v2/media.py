"""Content negotiation for the REST Proxy v2 routes, as Confluent's REST Proxy does it.

Media types follow ``application/vnd.kafka[.embedded_format].[api_version]+[serialization_format]``.
A request body's ``Content-Type`` picks the embedded format of a produce request; the ``Accept`` header
picks the representation of a response. Server-side weights (``qs``) break ties the way the proxy does:
for metadata the most specific type ``application/vnd.kafka.v2+json`` wins over
``application/vnd.kafka+json`` and plain ``application/json`` when the client accepts several.
When a client names no embedded format on a records fetch, binary is assumed (Confluent's rule).

Everything here is pure: parsing never raises; callers turn ``None`` into 406 or 415.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "EmbeddedFormat",
    "MediaRange",
    "Offer",
    "KAFKA_V2_JSON",
    "KAFKA_V2_BINARY",
    "KAFKA_V2_JSON_JSON",
    "METADATA_OFFERS",
    "RECORDS_OFFERS",
    "parse_accept",
    "negotiate",
    "produce_format",
]

KAFKA_V2_JSON = "application/vnd.kafka.v2+json"
KAFKA_DEFAULT_JSON = "application/vnd.kafka+json"
JSON = "application/json"
KAFKA_V2_BINARY = "application/vnd.kafka.binary.v2+json"
KAFKA_V2_JSON_JSON = "application/vnd.kafka.json.v2+json"


class EmbeddedFormat(enum.Enum):
    """How record keys and values are embedded in the JSON of a request or response."""

    BINARY = "binary"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSONSCHEMA = "jsonschema"

    @property
    def needs_schema(self) -> bool:
        return self in (EmbeddedFormat.AVRO, EmbeddedFormat.PROTOBUF, EmbeddedFormat.JSONSCHEMA)


_PRODUCE_TYPES: dict[str, EmbeddedFormat] = {
    KAFKA_V2_BINARY: EmbeddedFormat.BINARY,
    KAFKA_V2_JSON: EmbeddedFormat.BINARY,
    KAFKA_V2_JSON_JSON: EmbeddedFormat.JSON,
    "application/vnd.kafka.avro.v2+json": EmbeddedFormat.AVRO,
    "application/vnd.kafka.protobuf.v2+json": EmbeddedFormat.PROTOBUF,
    "application/vnd.kafka.jsonschema.v2+json": EmbeddedFormat.JSONSCHEMA,
}


@dataclass(frozen=True, slots=True)
class MediaRange:
    """One entry of an ``Accept`` header: ``type/subtype`` (either may be ``*``) and its quality."""

    type: str
    subtype: str
    q: float

    def specificity(self, media_type: str) -> int:
        """How precisely this range names ``media_type``: 2 exact, 1 ``type/*``, 0 ``*/*``, -1 no match."""
        offered_type, _, offered_subtype = media_type.partition("/")
        if self.type == "*":
            return 0
        if self.type != offered_type:
            return -1
        if self.subtype == "*":
            return 1
        return 2 if self.subtype == offered_subtype else -1


@dataclass(frozen=True, slots=True)
class Offer:
    """A representation a route can answer with: its media type, server weight, and embedded format."""

    media_type: str
    qs: float
    embedded: EmbeddedFormat | None = None
    content_type: str | None = None

    @property
    def response_type(self) -> str:
        """The ``Content-Type`` the response carries when this offer is chosen."""
        return self.content_type or self.media_type


METADATA_OFFERS: tuple[Offer, ...] = (
    Offer(KAFKA_V2_JSON, 1.0),
    Offer(KAFKA_DEFAULT_JSON, 0.8),
    Offer(JSON, 0.5),
)

RECORDS_OFFERS: tuple[Offer, ...] = (
    Offer(KAFKA_V2_BINARY, 1.0, EmbeddedFormat.BINARY),
    Offer(KAFKA_V2_JSON_JSON, 1.0, EmbeddedFormat.JSON),
    Offer(KAFKA_V2_JSON, 0.9, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    Offer(KAFKA_DEFAULT_JSON, 0.8, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    Offer(JSON, 0.5, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
)


def _media_type(raw: str) -> tuple[str, dict[str, str]]:
    kind, *params = raw.split(";")
    parsed: dict[str, str] = {}
    for param in params:
        name, sep, value = param.partition("=")
        if sep:
            parsed[name.strip().lower()] = value.strip().strip('"')
    return kind.strip().lower(), parsed


def parse_accept(header: str | None) -> list[MediaRange]:
    """The media ranges of an ``Accept`` header; a missing or empty header accepts everything.

    Malformed entries and unparsable q-values are skipped (a bad q counts as 0). Pure.
    """
    if header is None or not header.strip():
        return [MediaRange("*", "*", 1.0)]
    ranges: list[MediaRange] = []
    for item in header.split(","):
        kind, params = _media_type(item)
        main, sep, sub = kind.partition("/")
        if not sep or not main or not sub or (main == "*" and sub != "*"):
            continue
        try:
            q = float(params.get("q", "1"))
        except ValueError:
            q = 0.0
        ranges.append(MediaRange(main, sub, min(max(q, 0.0), 1.0)))
    return ranges


def _client_quality(ranges: Sequence[MediaRange], media_type: str) -> float:
    best_specificity = -1
    quality = 0.0
    for media_range in ranges:
        specificity = media_range.specificity(media_type)
        if specificity > best_specificity:
            best_specificity = specificity
            quality = media_range.q
    return quality if best_specificity >= 0 else 0.0


def negotiate(accept: str | None, offers: Sequence[Offer]) -> Offer | None:
    """The offer with the highest client quality times server weight, or ``None`` when none is acceptable.

    Ties go to the earlier offer. Pure and idempotent.
    """
    ranges = parse_accept(accept)
    best: Offer | None = None
    best_score = 0.0
    for offer in offers:
        score = _client_quality(ranges, offer.media_type) * offer.qs
        if score > best_score:
            best, best_score = offer, score
    return best


def produce_format(content_type: str | None) -> EmbeddedFormat | None:
    """The embedded format a produce body's ``Content-Type`` declares, or ``None`` if unsupported. Pure."""
    if content_type is None:
        return None
    kind, _ = _media_type(content_type)
    return _PRODUCE_TYPES.get(kind)
