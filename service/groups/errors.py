"""Error kinds of group coordination. They are shared with the client library, so they live in
:mod:`tierlog.tiering.errors`; this module names them for the group code."""

from __future__ import annotations

from tierlog.tiering.errors import (
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownGroupError,
    UnknownMemberError,
)

__all__ = ["UnknownMemberError", "IllegalGenerationError", "RebalanceInProgressError", "UnknownGroupError"]
