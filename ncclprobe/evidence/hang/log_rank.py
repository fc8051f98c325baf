"""Which rank a job log's line belongs to: torch's `[rankN]:` prefix, a launcher's `--tee` prefix, a
watchdog line's own `[PG 0 Rank 7]`, and the rank of a rank's own file by its name.

It lives apart from the line reader (`job_log`) because attribution is its own question, asked of
the whole file before any line is read (is this one rank's file, and is its number global or local?).
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe.evidence.text import clean_line
from ncclprobe.numbers import ascii_re

_TEE = ascii_re(r"^\[[A-Za-z_][\w-]*?(?P<local>\d{1,19})\]:")
_RANK = ascii_re(r"^\[rank(?P<rank>\d{1,19})\]:")
PG_PREFIX = ascii_re(
    r"\[(?:PG ID (?P<pgid>\d{1,19}) PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]{0,256})\))? |PG (?P<pg>\d{1,19}) "
    r"(?:\((?P<desc2>[^)]{0,256})\) )?)?Rank (?P<rank>\d{1,19})\]"
)
# a rank's own file: `rank3.stderr`, `rank_3.log`, `train_rank3.txt`, `job.rank-3.out` (the word
# rank, alone or after a separator, then the number, then nothing but a log's extension)
_NAME_RANK = ascii_re(
    r"(?i)^(?:.*[_.-])?rank[_-]?(?P<rank>\d{1,9})(?:\.(?:log|stderr|stdout|err|out|txt))?$"
)
_OWN_STREAM = ("stderr.log", "stdout.log", "error.log", "stderr", "stdout")


def torchrun_stream(path: str) -> bool:
    """torchrun's own file of one process: `<run>/attempt_0/3/stderr.log` (3: its local rank)."""
    p = Path(path)
    return p.name in _OWN_STREAM and p.parent.name.isdigit() and len(p.parent.name) <= 9


def says_rank(lines: list[str], rank: int) -> bool:
    """A line of the file carries torch's own `[rankN]:` prefix for this rank (the global rank)."""
    for raw in lines:
        own = _RANK.match(clean_line(raw))
        if own is not None and int(own["rank"]) == rank:
            return True
    return False


def _rank_from_name(path: str) -> int | None:
    """`rank3.stderr` -> 3; torchrun's `<run>/attempt_0/3/stderr.log` -> 3 (its local rank: see
    `JobLog.local_file_rank`); else None: only a name that is exactly a rank's file gives a rank
    (`megatron735.log`, `4rank_job.log` give none)."""
    p = Path(path)
    if torchrun_stream(path):
        return int(p.parent.name)
    match = _NAME_RANK.match(p.name)
    return int(match["rank"]) if match else None


def file_rank(path: str, lines: list[str], comms: list[dict]) -> int | None:
    """The rank of lines that carry none: the name's, where the file is that rank's alone. A line
    that names another rank (`[rank2]:`, `[Rank 2]`) or a launcher's tee stream (`[default2]:`, a
    console of several ranks) makes it no rank's file; so does a rank at or above every size of the
    communicators NCCL's lines show. A rank the log does not hold is never made up from its name."""
    rank = _rank_from_name(path)
    if rank is None:
        return None
    for raw in lines:
        line = clean_line(raw)
        if _TEE.match(line) and not line.startswith("[rank"):
            return None
        own = _RANK.match(line)
        prefix = PG_PREFIX.search(line) if own is None and "Rank " in line else None
        named = own or prefix
        if named is not None and int(named["rank"]) != rank:
            return None
    sizes = [c["nranks"] for c in comms if isinstance(c.get("nranks"), int)]
    return None if sizes and rank >= max(sizes) else rank


def line_rank(line: str) -> tuple[int | None, str]:
    """A line's rank from its `[rankN]:` prefix (after a launcher's `--tee` prefix, dropped), and the
    line without them; (None, line) where it carries none."""
    tee = _TEE.match(line)
    if tee and not line.startswith("[rank"):
        line = line[tee.end() :]
    match = _RANK.match(line)
    if match is None:
        return None, line
    rest = line[match.end() :]
    return int(match["rank"]), rest[1:] if rest.startswith(" ") else rest  # `[rank0]: ` + text
