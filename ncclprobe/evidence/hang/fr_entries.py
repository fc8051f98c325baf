"""A Flight Recorder entry read from the loaded dump: a fast path for what torch writes, and the
checking path that names file, entry and field when something is off.

The fast path tests each field with plain type checks (`type(x) is int`, ranges) and returns None
at the first unusual value; the checking path (`entry`) then reads the same entry through `Where`
and either accepts it (the fast path was only stricter) or refuses it in one line. So there is one
truth for what is accepted, and the common case costs a few microseconds an entry. Every walk is
charged to the dump's `Budget` (see safe_pickle): at most MAX_FRAMES frames, MAX_TENSORS tensors and
64 dims a tensor are looked at, so no entry can make the reader visit more than the file holds.

Every string a dump holds is shown as the one masking policy shows text (`ncclprobe.secrets`):
frame file names, group descriptions and dtypes may quote paths and URLs, and a token in one is
masked as read (issue 40 §7). The same few strings repeat in every entry of every rank, so each
distinct one is masked once: `masked` remembers them, the table masks its distinct calls and groups
once the dump is read (`EntryTable.show_strings`), and a call site is masked before it is cut.
"""

from __future__ import annotations

import reprlib
from functools import lru_cache

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.hang.fr_table import STATES, Entry, EntryTable
from ncclprobe.evidence.hang.safe_pickle import Budget
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_setting, mask_text
from ncclprobe.sizes import MAX_SIZE
from ncclprobe.validate import Where

MAX_FRAMES = 256  # frames looked at for the user's own call site
MAX_TENSORS = 65_536  # tensors of one entry (a coalesced call of every parameter)
_P2P_NAME = ascii_re(r"^(?P<op>send|recv) (?P<a>\d{1,9})(?P<dir>->|<-)(?P<b>\d{1,9})$")


_STATE = {s: i for i, s in enumerate(STATES)}
_LIMIT = 2**63
masked = lru_cache(maxsize=1 << 16)(mask_text)


@lru_cache(maxsize=1 << 12)
def masked_id(text: str) -> str:
    """A group's name, which ranks are matched by: a digest where the policy would mask it, so two
    masked names stay two groups (`ncclprobe.secrets.mask_setting`'s rule)."""
    return mask_setting("group", text) if masked(text) != text else text


def fast_entry(e, major: int, budget: Budget, table: EntryTable) -> bool:
    """The entry as torch writes it, checked field by field with plain type tests and added to
    `table`; False (nothing added) where anything is unusual: `entry` then reads it."""
    if type(e) is not dict:
        return False
    get = e.get
    name, state = get("profiling_name"), get("state")
    if type(name) is not str or type(state) is not str or state not in _STATE:
        return False
    seq = get("collective_seq_id" if major >= 2 else "seq_id")
    record, pg_id, p2p_seq, op_id = get("record_id"), get("pg_id"), get("p2p_seq_id"), get("op_id")
    created, timeout = get("time_created_ns"), get("timeout_ms")
    started, completed = get("time_discovered_started_ns"), get("time_discovered_completed_ns")
    ints = (
        record,
        pg_id,
        seq,
        p2p_seq,
        op_id,
        created,
        started or None,
        completed or None,
        timeout,
    )
    for v in ints:
        if v is not None and (type(v) is not int or not -_LIMIT < v < _LIMIT):
            return False
    is_p2p, retired, duration = get("is_p2p"), get("retired"), get("duration_ms")
    if (is_p2p is not None and type(is_p2p) is not bool) or (
        retired is not None and type(retired) is not bool
    ):
        return False
    if duration is not None and (
        type(duration) not in (int, float) or not -_LIMIT < duration < _LIMIT
    ):
        return False
    pg = get("process_group")
    if major >= 2 and pg is not None:
        if type(pg) not in (tuple, list) or len(pg) != 2:
            return False
        group, desc = pg
        if type(group) is not str or type(desc) is not str:
            return False
    elif pg_id is None:
        return False
    else:
        group, desc = str(pg_id), None
    ins, outs = _shapes(get("input_sizes"), budget), _shapes(get("output_sizes"), budget)
    in_dt, out_dt = _names(get("input_dtypes"), budget), _names(get("output_dtypes"), budget)
    if ins is None or outs is None or in_dt is False or out_dt is False:
        return False
    try:
        site = _where(get("frames"), budget)
    except UsageProblem:
        return False
    backend, op, src, dst = _parsed_name(name)
    if is_p2p is None:
        is_p2p = op in ("send", "recv")
    table.add_row(
        ints,
        duration,
        _STATE[state],
        2 if retired is None else int(retired),
        int(is_p2p),
        ((backend, op, src, dst, ins, outs), in_dt, out_dt),
        (group, desc),
        site,
    )
    return True


_NAMES: dict[str, tuple] = {}


def _parsed_name(name: str) -> tuple[str, str, int | None, int | None]:
    """A profiling name's (backend, op, src, dst), remembered: a job has few distinct names."""
    found = _NAMES.get(name)
    if found is None:
        backend, _, op_text = name.partition(":")
        op, src, dst = _op(op_text[:200] or backend[:200])
        found = (backend if op_text else "", op, src, dst)
        if len(_NAMES) < 4096:
            _NAMES[name] = found
    return found


def _shapes(value, budget: Budget):
    """Tensor shapes as tuples, or None where they are not a list of lists of dims from 0 to
    MAX_SIZE (no tensor has more elements in a dim than bytes fit a size)."""
    if value is None:
        return ()
    if type(value) not in (list, tuple) or len(value) > MAX_TENSORS:
        return None
    budget.spend(len(value))
    out = []
    for dims in value:
        if type(dims) not in (list, tuple) or len(dims) > 64:
            return None
        budget.spend(len(dims))
        for d in dims:
            if type(d) is not int or not 0 <= d <= MAX_SIZE:
                return None
        out.append(tuple(dims))
    return tuple(out)


def _names(value, budget: Budget):
    if value is None:
        return None
    if type(value) not in (list, tuple) or len(value) > MAX_TENSORS:
        return False
    budget.spend(len(value))
    for v in value:
        if type(v) is not str or len(v) > 100:
            return False
    return tuple(value)


def _where(frames, budget: Budget) -> str:
    """The user's own frame that issued it (the first outside torch), e.g. `train.py:42 step`;
    at most MAX_FRAMES frames are looked at. Malformed frames are the checking path's to word."""
    if not frames:
        return ""
    if type(frames) not in (list, tuple):
        raise UsageProblem("frames: must be a list of frames")
    budget.spend(min(len(frames), MAX_FRAMES))
    for i, f in enumerate(frames):
        if i == MAX_FRAMES:
            break
        if type(f) is not dict:
            raise UsageProblem("frames: a frame must be {name, filename, line}")
        filename, name, line = f.get("filename", ""), f.get("name", ""), f.get("line")
        if type(filename) is not str or type(name) is not str:
            raise UsageProblem("frames: a frame's name and filename must be strings")
        if line is not None and (type(line) is not int or not -_LIMIT < line < _LIMIT):
            raise UsageProblem("frames: a frame's line must be a whole number")
        inside = _IN_TORCH.get(filename)
        if inside is None:
            inside = "/torch/" in filename.replace("\\", "/")
            if len(_IN_TORCH) < 4096:
                _IN_TORCH[filename] = inside
        if not inside:
            return f"{masked(filename)[:300]}:{line} {masked(name)[:100]}"
    return ""


_IN_TORCH: dict[str, bool] = {}  # a frame's file: inside torch? (a job has few distinct files)


def entry(raw, where: Where, major: int, budget: Budget) -> Entry:
    """The checking path: every field through `Where`, so a refusal names file, entry and field."""
    e = where.object(raw, "an entry (a dict)")
    name = where.field(e, "profiling_name", "str")
    backend, _, op_text = name.partition(":")
    op, src, dst = _op(op_text[:200] or backend[:200])
    pg = e.get("process_group")
    if major >= 2 and pg is not None:
        if not (
            isinstance(pg, (list, tuple)) and len(pg) == 2 and all(isinstance(p, str) for p in pg)
        ):
            raise where.fail('field "process_group" must be (name, desc)')
        group, desc = pg
    else:
        group, desc = str(where.field(e, "pg_id", "int", required=False, default="?")), None
    seq_name = "collective_seq_id" if major >= 2 else "seq_id"
    opt = lambda n, kind="int": where.field(e, n, kind, required=False, nullable=True)  # noqa: E731
    is_p2p = opt("is_p2p", "bool")
    try:
        site = _where(e.get("frames"), budget)
    except UsageProblem as exc:
        raise where.at("frames").fail(str(exc).partition(": ")[2]) from None
    return Entry(
        record_id=opt("record_id"),
        pg_id=opt("pg_id"),
        group=group,
        group_desc=desc,
        collective_seq=opt(seq_name),
        p2p_seq=opt("p2p_seq_id"),
        op_id=opt("op_id"),
        backend=backend if op_text else "",
        op=op,
        src=src,
        dst=dst,
        is_p2p=bool(is_p2p) if is_p2p is not None else op in ("send", "recv"),
        input_sizes=_sizes(e, "input_sizes", where, budget),
        output_sizes=_sizes(e, "output_sizes", where, budget),
        input_dtypes=_strings(e, "input_dtypes", where, budget),
        output_dtypes=_strings(e, "output_dtypes", where, budget),
        state=where.field(e, "state", "str", choices=STATES),
        retired=opt("retired", "bool"),
        time_created_ns=opt("time_created_ns"),
        time_started_ns=opt("time_discovered_started_ns") or None,  # JSON writes 0 for unset
        time_completed_ns=opt("time_discovered_completed_ns") or None,
        timeout_ms=opt("timeout_ms"),
        duration_ms=opt("duration_ms", "number"),
        where=site,
    )


def _op(text: str) -> tuple[str, int | None, int | None]:
    """`all_reduce` -> (all_reduce, None, None); `send 0->1` -> (send, 0, 1); `recv 1<-0` -> (recv, 0, 1)."""
    p2p = _P2P_NAME.match(text)
    if p2p is None:
        return text.split(" ", 1)[0], None, None
    a, b = int(p2p["a"]), int(p2p["b"])
    return (p2p["op"], a, b) if p2p["dir"] == "->" else (p2p["op"], b, a)


def _sizes(e: dict, name: str, where: Where, budget: Budget) -> tuple[tuple[int, ...], ...]:
    value = e.get(name)
    if value is None:
        return ()
    shapes = _shapes(value, budget)
    if shapes is None:
        raise where.fail(f'field "{name}" must be a list of tensor shapes, got {_brief(value)}')
    return shapes


def _strings(e: dict, name: str, where: Where, budget: Budget) -> tuple[str, ...] | None:
    value = e.get(name)
    names = _names(value, budget)
    if names is False:
        raise where.fail(f'field "{name}" must be a list of strings')
    return names


def _brief(value) -> str:
    """At most 80 characters of a value's text, without building all of it (a list shared through
    the memo would print for ever, an integer of 5,000 digits cannot print at all)."""
    return _Short().repr(value)[:80]


class _Short(reprlib.Repr):
    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxlist, self.maxstring, self.maxother = 3, 4, 40, 40

    def repr_int(self, x, level):
        if abs(x) >= 10**40:
            return f"<a whole number of {int(x.bit_length() * 0.30103) + 1} digits>"
        return repr(x)
