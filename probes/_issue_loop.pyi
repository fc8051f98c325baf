# The interface of the C issue loop (_issue_loop.c), an optional extension built at install: its
# type for the checker, which cannot read the compiled module (and must not need it built).
from typing_extensions import Buffer

def run(records: Buffer, count: int, /) -> int:
    """Issue `count` packed records; the number of calls that returned 0 (see _issue_loop.c)."""
