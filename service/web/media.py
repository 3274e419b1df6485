"""Content negotiation for the REST Proxy v2 routes, as Confluent's REST Proxy does it.

Media types follow ``application/vnd.kafka[.embedded_format].[api_version]+[serialization_format]``.
A request body's ``Content-Type`` picks the embedded format of a produce request; the ``Accept`` header
picks the representation of a response. Server-side weights (``qs``) break ties the way the proxy does:
for metadata the most specific type ``application/vnd.kafka.v2+json`` wins over
``application/vnd.kafka+json`` and plain ``application/json`` when the client accepts several.
When a client names no embedded format on a records fetch, binary is assumed (Confluent's rule).

The v1 API's types (``application/vnd.kafka[.format].v1+json``) are accepted and answered wherever the v2
ones are: the v1 and v2 APIs share their paths and this broker serves both from the same handlers.
Format-specific types (``application/vnd.kafka.binary.v2+json`` ...) are acceptable on every route with a
low server weight, as Confluent's consumer resource declares them, so a client that sends one header set
for all its requests is answered.

Everything here is pure: parsing never raises; callers turn ``None`` into 406 or 415.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "EmbeddedFormat",
    "MediaRange",
    "Offer",
    "KAFKA_V2_JSON",
    "KAFKA_V1_JSON",
    "KAFKA_DEFAULT_JSON",
    "JSON",
    "KAFKA_V2_BINARY",
    "KAFKA_V2_JSON_JSON",
    "METADATA_OFFERS",
    "METADATA_OFFERS_V1",
    "RECORDS_OFFERS",
    "MESSAGES_V1_OFFERS",
    "response_offers",
    "KafkaMediaType",
    "parse_kafka_type",
    "consumer_records_offers",
    "parse_accept",
    "negotiate",
    "produce_format",
]

KAFKA_V2_JSON = "application/vnd.kafka.v2+json"
KAFKA_V1_JSON = "application/vnd.kafka.v1+json"
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


_KAFKA_TYPE = re.compile(
    r"application/vnd\.kafka(?:\.(binary|json|avro|protobuf|jsonschema))?(?:\.(v1|v2))?\+json"
)


@dataclass(frozen=True, slots=True)
class KafkaMediaType:
    """A parsed REST Proxy media type: its embedded format and API version, either of which may be absent
    (``application/vnd.kafka+json`` names neither, nor does plain ``application/json``)."""

    embedded: EmbeddedFormat | None
    version: str | None


# The header parsers are memoized: a client sends the same few header values request after request.
_PARSED_HEADERS = 256


@functools.lru_cache(maxsize=_PARSED_HEADERS)
def parse_kafka_type(content_type: str | None) -> KafkaMediaType | None:
    """The REST Proxy media type ``content_type`` names, or ``None`` for anything else (415). Pure
    (memoized).

    Accepts ``application/vnd.kafka[.binary|.json|.avro|.protobuf|.jsonschema][.v1|.v2]+json`` and
    ``application/json``, parameters (``; charset=utf-8``) ignored, case-insensitively.
    """
    if content_type is None:
        return None
    kind, _ = _media_type(content_type)
    if kind == JSON:
        return KafkaMediaType(None, None)
    match = _KAFKA_TYPE.fullmatch(kind)
    if match is None:
        return None
    embedded = EmbeddedFormat(match.group(1)) if match.group(1) else None
    return KafkaMediaType(embedded, match.group(2))


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


def _typed(fmt: EmbeddedFormat, version: str) -> str:
    return f"application/vnd.kafka.{fmt.value}.{version}+json"


METADATA_OFFERS: tuple[Offer, ...] = (
    Offer(KAFKA_V2_JSON, 1.0),
    Offer(KAFKA_V1_JSON, 0.9),
    Offer(KAFKA_DEFAULT_JSON, 0.8),
    *(Offer(_typed(fmt, version), 0.6) for version in ("v2", "v1") for fmt in EmbeddedFormat),
    Offer(JSON, 0.5),
)

# The same representations, the v1 type first: what answers a request whose body came as a v1 type.
METADATA_OFFERS_V1: tuple[Offer, ...] = (
    Offer(KAFKA_V1_JSON, 1.0),
    Offer(KAFKA_V2_JSON, 0.9),
    *METADATA_OFFERS[2:],
)


def response_offers(content_type: str | None) -> tuple[Offer, ...]:
    """The offers of a JSON answer: v1 preferred when the request body came as a v1 type, v2 otherwise (an
    ``Accept: */*`` is then answered in the API version the client spoke). Pure."""
    parsed = parse_kafka_type(content_type)
    return METADATA_OFFERS_V1 if parsed is not None and parsed.version == "v1" else METADATA_OFFERS


RECORDS_OFFERS: tuple[Offer, ...] = (
    Offer(KAFKA_V2_BINARY, 1.0, EmbeddedFormat.BINARY),
    Offer(KAFKA_V2_JSON_JSON, 1.0, EmbeddedFormat.JSON),
    Offer(KAFKA_V2_JSON, 0.9, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    Offer(KAFKA_DEFAULT_JSON, 0.8, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    Offer(JSON, 0.5, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
)


# The v1 API's partition read (``GET .../messages``) answers in the v1 types; v2 types are served too.
MESSAGES_V1_OFFERS: tuple[Offer, ...] = (
    Offer(_typed(EmbeddedFormat.BINARY, "v1"), 1.0, EmbeddedFormat.BINARY),
    Offer(_typed(EmbeddedFormat.JSON, "v1"), 1.0, EmbeddedFormat.JSON),
    Offer(KAFKA_V2_BINARY, 0.95, EmbeddedFormat.BINARY),
    Offer(KAFKA_V2_JSON_JSON, 0.95, EmbeddedFormat.JSON),
    Offer(KAFKA_V1_JSON, 0.9, EmbeddedFormat.BINARY, _typed(EmbeddedFormat.BINARY, "v1")),
    Offer(KAFKA_V2_JSON, 0.85, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    Offer(KAFKA_DEFAULT_JSON, 0.8, EmbeddedFormat.BINARY, _typed(EmbeddedFormat.BINARY, "v1")),
    Offer(JSON, 0.5, EmbeddedFormat.BINARY, _typed(EmbeddedFormat.BINARY, "v1")),
)


def consumer_records_offers(fmt: EmbeddedFormat) -> tuple[Offer, ...]:
    """What a consumer instance of format ``fmt`` can answer a records read with: its own format's v2 and
    v1 types, and the format-free types (answered as the v2 type of ``fmt``). Pure."""
    own = _typed(fmt, "v2")
    return (
        Offer(own, 1.0, fmt),
        Offer(_typed(fmt, "v1"), 0.9, fmt),
        Offer(KAFKA_V2_JSON, 0.9, fmt, own),
        Offer(KAFKA_V1_JSON, 0.85, fmt, _typed(fmt, "v1")),
        Offer(KAFKA_DEFAULT_JSON, 0.8, fmt, own),
        Offer(JSON, 0.5, fmt, own),
    )


def _media_type(raw: str) -> tuple[str, dict[str, str]]:
    kind, *params = raw.split(";")
    parsed: dict[str, str] = {}
    for param in params:
        name, sep, value = param.partition("=")
        if sep:
            parsed[name.strip().lower()] = value.strip().strip('"')
    return kind.strip().lower(), parsed


@functools.lru_cache(maxsize=_PARSED_HEADERS)
def parse_accept(header: str | None) -> tuple[MediaRange, ...]:
    """The media ranges of an ``Accept`` header; a missing or empty header accepts everything.

    Malformed entries and unparsable q-values are skipped (a bad q counts as 0). Pure (memoized).
    """
    if header is None or not header.strip():
        return (MediaRange("*", "*", 1.0),)
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
    return tuple(ranges)


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
    """The embedded format a produce body's ``Content-Type`` declares, or ``None`` if unsupported. Pure.

    A type without an embedded format (``application/vnd.kafka.v2+json``, ``application/vnd.kafka+json``,
    ``application/json``, the v1 ones) means binary, as the v1 API and Karapace read it.
    """
    parsed = parse_kafka_type(content_type)
    if parsed is None:
        return None
    return parsed.embedded or EmbeddedFormat.BINARY
