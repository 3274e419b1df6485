"""HTTP plumbing every API shares, and nothing API-specific.

* :mod:`.keys`: the typed ``web.AppKey``s through which routes reach the broker, settings and metrics;
* :mod:`.errors`: the one middleware that turns every :class:`~tierlog.wire.errors.TierlogError` into
  its HTTP status and JSON body;
* :mod:`.requests`: path and query parameters, request bodies read within the byte budget;
* :mod:`.media`: ``Accept`` / ``Content-Type`` negotiation and the Kafka media types;
* :mod:`.json_stream`: compact JSON text in and out;
* :mod:`.routing`: trailing slashes and the request size limit; :mod:`.connections`: timeouts and the
  connection cap; :mod:`.budget` and :mod:`.body_buffers`: bounded memory for request bodies;
* :mod:`.health`: ``/health``, ``/ready`` and ``/metrics``.

Nothing here imports an API package (``rest_v2``, ``admin_v3``, ``native_api``) or the app.
"""
