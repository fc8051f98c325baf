"""What a command found, as the library says it; the CLI maps it to the exit code.

Every command's library call returns a `Verdict` (or an object whose `verdict()` gives one), and
the command returns it: `ncclprobe.cli.LazyGroup` turns it into the process's exit code, the only
place that does. Errors are not verdicts: they are raised (`ncclprobe.errors`) and mapped there too.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Verdict(enum.Enum):
    """The outcome of a command that ran to its end. Ordered: the worse one wins when combined."""

    FINE = "fine"  # everything measured or checked is fine
    FINDINGS = "findings"  # wrong results, unmet expectations, lint errors, hangs, crashes
    NOTHING_HERE = "nothing-here"  # nothing could be measured or read here

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]

    @classmethod
    def of(cls, findings: bool) -> Verdict:
        """FINDINGS when there are findings, else FINE."""
        return cls.FINDINGS if findings else cls.FINE


# The exit-code contract of ncclprobe.cli (2 bad input, 4 internal error, 130/143 interrupted are
# raised, not returned). NOTHING_HERE outranks FINDINGS: nothing was measured to find anything in.
EXIT_CODES = {Verdict.FINE: 0, Verdict.FINDINGS: 1, Verdict.NOTHING_HERE: 3}
_RANK = (Verdict.FINE, Verdict.FINDINGS, Verdict.NOTHING_HERE)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The verdict of several checks: the worst of them, FINE for none."""
    return max(verdicts, key=_RANK.index, default=Verdict.FINE)
