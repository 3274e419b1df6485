"""Error kinds of group coordination, each a subclass of one public kind with its own stable code."""

from __future__ import annotations

from tiering.errors import ConflictError, NotFoundError

__all__ = ["UnknownMemberError", "IllegalGenerationError", "RebalanceInProgressError", "UnknownGroupError"]


class UnknownMemberError(NotFoundError):
    """The member id is not (or no longer) in the group: it was evicted or never joined. Rejoin."""

    code = 40410


class UnknownGroupError(NotFoundError):
    """No such consumer group."""

    code = 40411


class IllegalGenerationError(ConflictError):
    """The request carries a generation that is not the group's current one: the member is fenced."""

    code = 40911


class RebalanceInProgressError(ConflictError):
    """The group is rebalancing: the member must join again to get its new assignment."""

    code = 40910
    retriable = True
