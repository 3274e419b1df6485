"""Drive PyPI ``kafka-rest-client`` (``proofpoint.kafka.KafkaRestConsumer``) against a REST Proxy: create a
consumer instance reading from the beginning, poll until ``--count`` values arrived (or the deadline), commit,
close. Prints one JSON object on stdout: the values in the order read, every HTTP exchange the library made
(``trace``), and ``error`` (null on success). Exit status 0 on success, 1 otherwise.

The library insists on OAuth2 client credentials; a token endpoint served here on 127.0.0.1 hands out a
dummy bearer token. Runs with the compat venv's interpreter (tests/compat/install.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import compat_shims

MAX_FETCH_BYTES = 1 << 20  # the library's floor for max_fetch_size


class TokenHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps(
            {"access_token": "compat-test", "token_type": "Bearer", "expires_in": 3600}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _text(raw: Any) -> Any:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def exchange(response: Any) -> dict[str, Any]:
    """One request and its response, as the trace records them."""
    request = response.request
    headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
    return {
        "method": request.method,
        "url": request.url,
        "headers": headers,
        "body": _text(request.body),
        "status": response.status_code,
        "content_type": response.headers.get("Content-Type"),
        "response": response.text[:2000],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--format", choices=("binary", "json"), required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--deadline", type=float, default=60.0)
    args = parser.parse_args()

    compat_shims.patch_kafka_rest_client()
    from proofpoint.kafka.KafkaRestConsumer import KafkaRestConsumer

    os.environ["OAUTHLIB_INSECURE_TRANSPORT"] = "1"  # the token endpoint is plain HTTP on loopback
    tokens = ThreadingHTTPServer(("127.0.0.1", 0), TokenHandler)
    threading.Thread(target=tokens.serve_forever, daemon=True).start()
    trace: list[dict[str, Any]] = []
    values: list[Any] = []
    error: str | None = None
    consumer: Any = None
    try:
        consumer = KafkaRestConsumer(
            group_name=args.group,
            client_name=args.name,
            offset="smallest",
            format=args.format,
            max_fetch_size=MAX_FETCH_BYTES,
            oauth_token_url=f"http://127.0.0.1:{tokens.server_address[1]}/token",
            auth_client_id="compat",
            auth_client_secret="compat",
            kafka_rest_lb=args.url,
            heartbeat_interval=300,  # no heartbeat read (max_bytes=1) between polls
            request_failure_retries=0,
            error_backoff=0,
        )
        session = consumer._KafkaRestConsumer__oauth_session  # observe every exchange; change nothing

        def record(response: Any, *_: Any, **__: Any) -> None:
            trace.append(exchange(response))

        session.hooks["response"].append(record)
        consumer.subscribe(args.topic)
        deadline = time.monotonic() + args.deadline
        while len(values) < args.count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(values)} of {args.count} values after {args.deadline} s")
            values.extend(consumer.poll())
        consumer.commit()
    except Exception as err:
        error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    finally:
        if consumer is not None:
            consumer.close()  # DELETE the instance; the library logs, never raises, here
        tokens.shutdown()
    json.dump({"values": values, "trace": trace, "error": error}, sys.stdout)
    return 0 if error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
