"""Type stub of REST v2's JSON in C (service/rest_v2/_restjson.c)."""

def render_binary_rows(
    offsets: bytes,
    key_offsets: bytes,
    key_data: bytes,
    key_validity: bytes,
    value_offsets: bytes,
    value_data: bytes,
    value_validity: bytes,
    first: int,
    last: int,
    start_offset: int,
    high_watermark: int,
    topic_json: bytes,
    partition: int,
    out: bytearray,
    /,
) -> tuple[int, int]: ...
def parse_binary_records(
    body: bytes, limit: int, /
) -> tuple[list[bytes | None], list[bytes | None], list[int | None]] | None: ...
def append_offsets(out: bytearray, partition: int, low: int, high: int, /) -> None: ...
def use_simd(flag: bool, /) -> bool: ...
