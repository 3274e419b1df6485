"""Operator tools that read tierlog's files directly, without a broker (``tierlog dump-log``)."""
