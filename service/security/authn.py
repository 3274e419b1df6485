"""Authentication: who a request acts as (``docs/design/0012-security.md``).

The request keys the rest of the broker reads (:data:`PRINCIPAL`, :data:`CLIENT_HOST`) and the headers a
broker forwarding a client's request to another broker sets (:data:`FORWARDED_PRINCIPAL`,
:data:`FORWARDED_HOST`).
"""

from __future__ import annotations

from aiohttp import web

from tierlog.service.security.model import Principal

__all__ = ["CLIENT_HOST", "FORWARDED_HOST", "FORWARDED_PRINCIPAL", "PRINCIPAL"]

#: The authenticated principal of a request (``User:ANONYMOUS`` when authentication is off).
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("tierlog.principal", Principal)
#: The host the request comes from, as ACLs name it (the forwarding broker's client's, when forwarded).
CLIENT_HOST: web.RequestKey[str] = web.RequestKey("tierlog.client_host", str)
#: Set by a broker that forwards a client's request: the client's principal (``User:alice``).
FORWARDED_PRINCIPAL = "Tierlog-Forwarded-Principal"
#: Set by a broker that forwards a client's request: the client's host.
FORWARDED_HOST = "Tierlog-Forwarded-Host"
