"""What one row of the NCCL knowledge table says (`Knob`), when NCCL reads the variable (`Scope`)
and how its values are written (`Kind`), plus the provenance the rows share.

The table (`ncclprobe.nccl.knobs`) is written in two files of rows (`knobs_datapath`,
`knobs_tooling`); the row type lives here, below both, so neither imports the table.

Scope is when NCCL reads the variable:
  COMMUNICATOR  at every communicator creation (ncclGetEnv in the init path): a worker can set it
                in its own environment and build a new communicator to try another value;
  PROCESS       once, cached for the life of the process (NCCL_PARAM's static cache,
                ncclTopoUserP2pLevel, ncclDebugInit): another value needs a new process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Scope(str, Enum):
    COMMUNICATOR = "communicator"
    PROCESS = "process"


class Kind(str, Enum):
    TOKENS = "tokens"  # comma list of names, optional ^ exclusion, optional func:list forms
    LEVEL = "level"  # one path-type name (case-sensitive) or a legacy integer
    INT = "int"
    BOOL = "bool"  # 0 or 1
    CHOICE = "choice"  # one of `values`
    PATH = "path"
    TEXT = "text"


@dataclass(frozen=True, kw_only=True)
class Knob:
    name: str
    scope: Scope
    kind: Kind
    summary: str
    values: tuple[str, ...] = ()  # canonical spellings; for TOKENS the allowed tokens
    case_sensitive: bool = False  # True: a wrong-case value is silently ignored by NCCL
    default: str = "unset"  # what NCCL does when the variable is unset
    syntax: str = ""  # how values are written (exclusion, per-collective forms)
    version_notes: tuple[str, ...] = ()  # behaviour that changed between NCCL versions
    risks: tuple[str, ...] = ()  # what can go wrong when it is set
    log_proof: str = ""  # how NCCL's debug log shows it was read
    source: str = ""  # where the fact comes from
    since: str = ""  # NCCL version that introduced it, when later than 2.8
    unverified: tuple[str, ...] = ()  # facts read from NCCL's source, not yet seen on hardware
    verified: tuple[str, ...] = ()  # facts seen in NCCL's own log on real hardware, and where
    checked_at: tuple[str, ...] = ()  # NCCL release tags whose source these facts were read at
    nccl_param: bool = False  # read through NCCL_PARAM's cache (NCCL_NO_CACHE lifts it, 2.29.7+)
    logged_once: bool = (
        False  # re-read per communicator, but `set by environment` only the first time
    )
    minimum: int | None = None  # INT: the range NCCL uses the value in, and its step
    maximum: int | None = None
    multiple_of: int = 1
    # How NCCL uses the number it reads (strtoll or strtol, base 0: `2abc` is 2, `true` is 0), for a
    # variable whose value is a number: (test, what NCCL then does), the first test that holds wins.
    # A test is an integer ("1", "-2"), ">0", "<0", "!=0" or "else". The lint reads a value outside
    # `values` through it instead of calling the value invalid (`nccl.values.read_number`).
    number_use: tuple[tuple[str, str], ...] = ()
    unset_reads_as: int | None = None  # the number NCCL uses when the variable is unset
    extra: dict = field(default_factory=dict)


# where a variable read through NCCL_PARAM comes from, and the tags that fact was read at
PARAM_CACHE = (
    "NCCL_PARAM static cache (src/include/param.h), read and logged by ncclLoadParam "
    "(src/misc/param.cc): once per process"
)
PARAM_TAGS = ("v2.21.5-1", "v2.28.9-1", "v2.29.7-1")
# the hardware run whose NCCL logs verified several rows' facts
H200_RUN = "NCCL 2.28.9, H200, two ranks on one GPU over NET/Socket, 2026-11-29"
