"""Run ``moto_server`` with its object writes made atomic, as S3's are.

moto answers a ``PutObject`` with ``If-None-Match: *`` by looking the key up and then storing the body, in
one of its server's request threads, with nothing holding the two together. Two racing writers can both
find the key absent and both be told they created it; AWS S3, MinIO and LocalStack give exactly one of
them 412. Under a loaded CI machine moto lost that race about once in 150 rounds of six writers, so the
contract suite's race test failed on moto's behaviour rather than the store's.

This launcher serialises moto's ``PutObject`` handler (conditional or not) behind one lock and then runs
moto's own server entry point with the arguments it was given. Only the test servers run it; the store
under test talks to it over HTTP as it would to any S3 service.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

# moto's handler of a plain PutObject, then (older 5.x releases) its handler of every PUT on a key.
_HANDLERS = ("put_object", "_key_response_put")


def make_puts_atomic() -> None:
    """Wrap the first of ``_HANDLERS`` that moto's ``S3Response`` has in one lock. Idempotent.

    Raises:
        RuntimeError: this moto has none of them (the race test would be flaky again: say so at start-up).
    """
    from moto.s3.responses import S3Response

    name = next((n for n in _HANDLERS if hasattr(S3Response, n)), None)
    if name is None:
        raise RuntimeError(f"moto's S3Response has none of {_HANDLERS}: update tests' moto_atomic.py")
    original = getattr(S3Response, name)
    if getattr(original, "tierlog_atomic", False):
        return
    lock = threading.Lock()

    @functools.wraps(original)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    locked.tierlog_atomic = True  # type: ignore[attr-defined]
    setattr(S3Response, name, locked)


if __name__ == "__main__":
    from moto.server import main

    make_puts_atomic()
    main()
