"""Drive PyPI ``kafka-rest`` (``kafka_rest.client.KafkaRESTClient``, an asynchronous Avro-only producer for
REST Proxy v1) against a REST Proxy: produce ``--count`` Avro values to ``--topic`` and wait until the library
settles every one of them: sent (``produce_success``), dropped (``drop_message``) or queued for a retry
(``retry_message``, which means it took the answer for a transient failure). Then shut it down.

Prints one JSON object on stdout: the library's events, every HTTP exchange it made (``trace``) and ``error``
(null when every message settled before the deadline). Runs with the compat venv's interpreter.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import traceback
from typing import Any
from urllib.parse import urlsplit

import compat_shims

VALUE_SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "tierlog.compat",
    "fields": [{"name": "n", "type": "int"}, {"name": "label", "type": "string"}],
}


def _text(raw: Any) -> Any:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=60.0)
    args = parser.parse_args()

    compat_shims.patch_kafka_rest()
    from kafka_rest.client import KafkaRESTClient

    url = urlsplit(args.url)
    lock = threading.Lock()
    events: list[dict[str, Any]] = []
    trace: list[dict[str, Any]] = []
    settled: set[int] = set()
    error: str | None = None
    client = KafkaRESTClient(
        f"{url.scheme}://{url.hostname}",
        url.port,
        flush_length_threshold=args.count,  # one request carrying every message
        flush_time_threshold_seconds=1,
        retry_max_attempts=2,
        retry_base_seconds=1,
        retry_period_seconds=1,
        shutdown_timeout_seconds=1,
    )
    handle_response = client.producer._handle_produce_response

    def observe(topic: str, response: Any) -> None:  # every answer, recorded before the library reads it
        request = response.request
        with lock:
            trace.append(
                {
                    "method": request.method,
                    "url": request.url,
                    "headers": dict(request.headers),
                    "body": _text(request.body),
                    "status": response.code,
                    "content_type": response.headers.get("Content-Type"),
                    "response": _text(response.body)[:2000] if response.body else None,
                }
            )
        handle_response(topic, response)

    client.producer._handle_produce_response = observe

    def on(event: str) -> Any:
        def handler(*payload: Any) -> None:
            with lock:
                entry: dict[str, Any] = {"event": event}
                for item in payload:
                    if hasattr(item, "value") and hasattr(item, "attempt_number"):  # a kafka_rest Message
                        entry.setdefault("values", []).append(item.value)
                        if event == "drop_message":  # a retried message settles when sent or dropped
                            settled.add(item.value["n"])
                    elif isinstance(item, str):
                        entry.setdefault("args", []).append(item)
                events.append(entry)

        return handler

    for event in ("drop_message", "retry_message"):
        client.registrar.register(event, on(event))

    def on_success(topic: str, succeeded: list[Any], failed: list[Any]) -> None:
        with lock:
            events.append({"event": "produce_success", "succeeded": len(succeeded), "failed": len(failed)})
            settled.update(message.value["n"] for message, _ in succeeded)

    client.registrar.register("produce_success", on_success)
    try:
        for n in range(args.count):
            client.produce(args.topic, {"n": n, "label": f"reading-{n}"}, VALUE_SCHEMA)
        deadline = time.monotonic() + args.deadline
        while True:
            with lock:
                done = len(settled) >= args.count
            if done:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(settled)} of {args.count} messages settled after {args.deadline} s")
            time.sleep(0.05)  # polling the library's background thread; no assertion on timing
    except Exception as err:
        error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    finally:
        client.shutdown(block=True)
    with lock:
        json.dump({"events": events, "trace": trace, "error": error}, sys.stdout)
    return 0 if error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
