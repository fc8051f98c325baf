"""`TextEnum`: names that travel as text (JSON records, command lines, file names).

A member is its value wherever text is expected: it compares equal to it, JSON writes it as it,
and `str()`/f-strings give the value (as 3.11's `enum.StrEnum`, which Python 3.10 lacks), so a
record written with members reads back as the same strings an older file holds.
"""

from __future__ import annotations

import enum


class TextEnum(str, enum.Enum):
    __hash__ = str.__hash__  # a member finds the entry its text keys, and the other way round

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)
