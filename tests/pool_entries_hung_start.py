"""A worker entry whose module hangs while it is imported: the worker never reports `ready`,
as when a rank hangs in its start (a stuck import, a filesystem that does not answer)."""

import time

time.sleep(3600)


def never_reached(ctx):  # pragma: no cover - the import above never returns
    raise AssertionError("unreachable")
