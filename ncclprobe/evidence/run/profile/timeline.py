"""One rank's profile reduced to what diagnose needs, kept compact while the file streams past.

Kept: every GPU activity (kernel, memcpy, memset: start, duration, stream, correlation id, and the
NCCL fields of eager collective kernels), every launch call (kind, name, start, duration, by
correlation id), the step annotations the reader knows (names.step_annotation, ProfilerStep#N),
the collective ops' host records (`record_param_comms`: sizes, also during a graph capture), the
token-embedding lookups (`aten::embedding`: where a forward pass starts on the host; with
record_shapes its token ids' shape, batch x tokens), the query/key lengths of attention calls
(`aten::scaled_dot_product_attention` with record_shapes: how the KV cache grows, hence the tokens
a step kept) and the host spans of compiled-function calls (`Torch-Compiled Region`: where the
host began a forward that a graph launch inside it replays). A kernel keeps the thread blocks its
launch grid asked for (the grid grows with the tokens in a step). Dropped: every other CPU op,
Python frame and flow event, which are most of a large trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.run.profile import comm_names, names
from ncclprobe.evidence.run.profile.host import HostCollector
from ncclprobe.evidence.run.profile.stream import read_events
from ncclprobe.numbers import is_digits
from ncclprobe.sizes import MAX_SIZE


@dataclass(slots=True)
class Kernel:
    ts: float
    dur: float
    stream: int
    corr: int | None
    name: str
    ext: int | None
    category: str  # kernel | gpu_memcpy | gpu_memset
    coll: dict | None = None  # comm_names.communication_kernel(name): NCCL's, DeepEP's, a peer copy
    args: dict | None = None  # the eager collective's fields (Collective name, In msg nelems, ...)
    blocks: int = 0  # thread blocks of the launch grid (x*y*z); 0 when the trace has no grid

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)
class Launch:
    kind: str  # kernel | graph | memcpy | sync
    name: str
    ts: float
    dur: float
    tid: int | None


@dataclass(slots=True)
class Annotation:
    name: str
    ts: float
    dur: float
    tid: int | None
    step: dict | None  # names.step_annotation(name)
    profiler_step: int | None


@dataclass(slots=True)
class CommOp:
    ts: float
    dur: float
    ext: int | None
    op: str
    nelems: int | None
    dtype: str | None
    group_size: int | None
    tid: int | None
    group: str | None = None  # the process group's name (`Process Group Name`)
    seq: int | None = (
        None  # the call's sequence number in its group (`Seq`, newer torch), if recorded
    )
    backend: str | None = None  # `gloo`, `nccl`, ... of a `<backend>:<op>` annotation


@dataclass
class Timeline:
    path: str
    header: dict
    kernels: list[Kernel] = field(default_factory=list)
    launches: dict[int, Launch] = field(default_factory=dict)
    annotations: list[Annotation] = field(default_factory=list)
    comm_ops: list[CommOp] = field(default_factory=list)  # record_param_comms (host side)
    backend_ops: list[CommOp] = field(default_factory=list)  # `gloo:all_reduce`-style annotations
    # (ts, dur, [batch, tokens] or None without record_shapes) per token-embedding lookup
    embeddings: list[tuple[float, float, list | None]] = field(default_factory=list)
    # (ts, query tokens, key tokens) per attention call, with record_shapes
    attention: list[tuple[float, int, int]] = field(default_factory=list)
    # (ts, dur) per torch.compile'd call (`Torch-Compiled Region: i/j`), in order of start
    compiled_calls: list[tuple[float, float]] = field(default_factory=list)
    # Python functions and longer CPU ops, for the host work behind an idle GPU (`host.host_time`)
    host_spans: list = field(default_factory=list)
    python: bool = False  # the trace holds Python functions (recorded with with_stack=True)
    events: int = 0
    cpu_ops: int = 0
    malformed: int = 0  # events whose fields had the wrong types: skipped (`bad_field`)
    malformed_first: str = ""  # the first of them: which event, which field, what it held
    # step annotations among them: (skipped, the first), against those kept (`annotations`)
    malformed_steps: int = 0
    malformed_step_first: str = ""

    @property
    def gpu(self) -> bool:
        return bool(self.kernels)

    @property
    def rocm(self) -> bool:
        return (
            "roctracer_version" in self.header
            or "hip_runtime_version" in self.header
            or any(l.name.startswith("hip") for l in list(self.launches.values())[:50])
        )

    @property
    def distributed(self) -> dict:
        info = self.header.get("distributedInfo")
        if isinstance(info, str):  # some exports hold a Python-literal dict as a string
            import ast

            try:
                info = ast.literal_eval(info)
            except (ValueError, SyntaxError):
                info = None
        return info if isinstance(info, dict) else {}

    @property
    def rank(self) -> int | None:
        rank = self.distributed.get("rank")
        return rank if isinstance(rank, int) else None

    @property
    def world_size(self) -> int | None:
        size = self.distributed.get("world_size")
        return size if isinstance(size, int) else None

    @property
    def gpu_names(self) -> list[str]:
        props = self.header.get("deviceProperties")
        return (
            [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")]
            if isinstance(props, list)
            else []
        )

    def time_range(self) -> tuple[float, float] | None:
        """(start, end) in µs of the profiled window, on the trace's own clock."""
        points = [(a.ts, a.ts + a.dur) for a in self.annotations] + [
            (k.ts, k.end) for k in self.kernels[:1] + self.kernels[-1:]
        ]
        if not points:
            return None
        return min(p[0] for p in points), max(p[1] for p in points)


def read_timeline(path: str) -> Timeline:
    """Stream `path` once and keep its Timeline (see the module docstring for what is kept)."""
    kernels, launches, annotations, comm_ops, backend_ops, embeddings = [], {}, [], [], [], []
    attention, compiled_calls = [], []
    counts = {"events": 0, "cpu_ops": 0, "malformed": 0, "malformed_steps": 0}
    first_bad = {"any": "", "step": ""}
    launch_kind, communication_kernel = names.launch_kind, comm_names.communication_kernel
    step_annotation, profiler_step, backend_collective = (
        names.step_annotation,
        names.profiler_step,
        names.backend_collective,
    )
    gpu_cats, api_cats, old_cats = (
        names.GPU_CATEGORIES,
        names.HOST_API_CATEGORIES,
        names.OLD_CATEGORIES,
    )
    seen_steps = set()
    host = HostCollector()

    def on_annotation(ev: dict, name: str, step: dict | None, pstep: int | None) -> None:
        # torch 1.x wrote `ProfilerStep#N` as a cpu_op, 2.x as a user_annotation: one of each is kept
        key = (name, _num(ev, "ts"))
        if key not in seen_steps:
            seen_steps.add(key)
            annotations.append(
                Annotation(name, _num(ev, "ts"), _num(ev, "dur"), ev.get("tid"), step, pstep)
            )

    def on_event(ev: dict) -> None:
        name: str | None  # a cpu_op's may be missing (well_formed lets None through)
        counts["events"] += 1
        if ev.get("ph") != "X":
            return
        bad = bad_field(ev)
        if bad:
            said = f"{_event_words(ev)}: {bad}"
            counts["malformed"] += 1
            first_bad["any"] = first_bad["any"] or said
            name = ev.get("name")
            if isinstance(name, str) and (step_annotation(name) or profiler_step(name) is not None):
                counts["malformed_steps"] += 1
                first_bad["step"] = first_bad["step"] or said
            return
        cat = ev.get("cat")
        cat = old_cats.get(cat, cat) if isinstance(cat, str) else cat
        if cat in gpu_cats:
            args = ev.get("args") or {}
            name = intern(ev.get("name") or "")  # a kernel's name repeats: kept once
            coll = communication_kernel(name, cat)
            kernels.append(
                Kernel(
                    ts=_num(ev, "ts"),
                    dur=_num(ev, "dur"),
                    stream=args.get("stream", ev.get("tid", 0)),
                    corr=args.get("correlation"),
                    name=name,
                    category=cat,
                    ext=args.get("External id", args.get("external id")),
                    coll=coll,
                    args=_coll_args(args) if coll else None,
                    blocks=_blocks(args.get("grid")),
                )
            )
        elif cat in api_cats:
            name = str(ev.get("name", ""))
            kind = launch_kind(name)
            corr = (ev.get("args") or {}).get("correlation")
            if kind and isinstance(corr, int):
                launches[corr] = Launch(kind, name, _num(ev, "ts"), _num(ev, "dur"), ev.get("tid"))
        elif cat == "user_annotation":
            name = str(ev.get("name", ""))
            step, pstep = step_annotation(name), profiler_step(name)
            if step or pstep is not None:
                on_annotation(ev, name, step, pstep)
            elif ":" in name:
                backend_op = backend_collective(name)
                if backend_op:
                    backend_ops.append(_backend_op(ev, backend_op[1], backend_op[0]))
        elif cat == "python_function":
            host.python_function(ev, _num(ev, "ts"), _num(ev, "dur"))
        elif cat == "cpu_op":
            counts["cpu_ops"] += 1
            name = ev.get("name")
            if isinstance(name, str):
                host.cpu_op(ev, name, _num(ev, "ts"), _num(ev, "dur"))
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                on_annotation(ev, name, None, names.profiler_step(name))
            elif name == "record_param_comms":
                op = _comm_op(ev)
                if op:
                    comm_ops.append(op)
            elif name == "aten::embedding":
                dims = (ev.get("args") or {}).get("Input Dims")
                ids = dims[1] if isinstance(dims, list) and len(dims) > 1 else None
                embeddings.append(
                    (_num(ev, "ts"), _num(ev, "dur"), ids if isinstance(ids, list) else None)
                )
            elif isinstance(name, str) and name.startswith("Torch-Compiled Region"):
                compiled_calls.append((_num(ev, "ts"), _num(ev, "dur")))
            elif name == "aten::scaled_dot_product_attention":
                lengths = _attention_lengths((ev.get("args") or {}).get("Input Dims"))
                if lengths:
                    attention.append((_num(ev, "ts"), *lengths))

    header = read_events(path, on_event)
    if counts["events"] == 0:
        raise UsageProblem(f"{path}: a Chrome trace with no events; nothing was profiled")
    if counts["malformed_steps"] and not annotations:
        raise UsageProblem(
            f"{path}: every step annotation is malformed ({counts['malformed_steps']}; the first, "
            f"{first_bad['step']}): the steps cannot be read from it"
        )
    kernels.sort(key=lambda k: k.ts)
    annotations.sort(key=lambda a: a.ts)
    compiled_calls.sort()
    return Timeline(
        path=str(path),
        header=header,
        kernels=kernels,
        launches=launches,
        annotations=annotations,
        comm_ops=comm_ops,
        backend_ops=backend_ops,
        embeddings=embeddings,
        attention=attention,
        compiled_calls=compiled_calls,
        host_spans=host.spans,
        python=host.python,
        events=counts["events"],
        cpu_ops=counts["cpu_ops"],
        malformed=counts["malformed"],
        malformed_first=first_bad["any"],
        malformed_steps=counts["malformed_steps"],
        malformed_step_first=first_bad["step"],
    )


_ID_ARGS = ("correlation", "stream", "External id", "external id", "Seq")
_TEXT_ARGS = ("dtype", "Collective name")


def well_formed(ev: dict) -> bool:
    return bad_field(ev) is None


def bad_field(ev: dict) -> str | None:
    """What is wrong with a complete event's fields, in words, or None: the fields this reader
    keeps have the types Kineto writes: `ts` a finite time, `dur` a finite time not below 0 (or
    absent), `cat` and `name` text, `args` an object, ids whole numbers, `tid` a number or text. An
    event that breaks this is skipped and named in a note, not trusted: a list where an id belongs
    is no id, and `"ts": "a"` no time (read as 0 it would move the event to the trace's start)."""
    for key in ("ts", "dur"):
        if key in ev or key == "ts":
            value = _time(ev.get(key))
            if value is None:
                return f"{_shown(key, ev.get(key))} is no time"
            if key == "dur" and value < 0:
                return f"{_shown(key, ev.get(key))} is a negative duration"
    cat, name, args, tid = ev.get("cat"), ev.get("name"), ev.get("args"), ev.get("tid")
    for key, value, kinds in (
        ("cat", cat, (str, type(None))),
        ("name", name, (str, type(None))),
        ("tid", tid, (int, str, type(None))),
        ("args", args, (dict, type(None))),
    ):
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"{_shown(key, value)} is not what Kineto writes there"
    for key in _ID_ARGS:
        value = args.get(key) if args else None
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64
        ):
            return f"{_shown('args.' + key, value)} is no id"
    for key in _TEXT_ARGS:
        if args and not isinstance(args.get(key), (str, type(None))):
            return f"{_shown('args.' + key, args.get(key))} is no text"
    return None


def _time(value: object) -> float | None:
    """A trace time in µs: a finite JSON number, or a decimal number written as text (some
    exporters write "ts": "123.4"); None for anything else."""
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 40 or any(c not in "0123456789.-+eE" for c in text):
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and not -(2**63) < value < 2**63:
        return None  # a 400-digit number would overflow a float
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _shown(key: str, value: object) -> str:
    text = repr(value)
    return f'"{key}": {text if len(text) <= 40 else text[:37] + "..."}'


def _event_words(ev: dict) -> str:
    """`event 'ProfilerStep#1' (user_annotation)`: which event, as the note names it."""
    name, cat = ev.get("name"), ev.get("cat")
    named = (
        repr(name if len(name) <= 60 else name[:57] + "...")
        if isinstance(name, str)
        else "(unnamed)"
    )
    return f"event {named}" + (f" ({cat})" if isinstance(cat, str) and len(cat) <= 40 else "")


def _num(ev: dict, key: str) -> float:
    """An event's time field as `bad_field` checked it (0 where absent)."""
    value = _time(ev.get(key, 0.0))
    return 0.0 if value is None else value


def _blocks(grid: object) -> int:
    """Thread blocks of a launch grid `[x, y, z]`; 0 for anything else (an old trace without grids)."""
    if not isinstance(grid, list) or not grid or len(grid) > 3:
        return 0
    total = 1
    for dim in grid:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            return 0
        total *= dim
    return total


def _attention_lengths(dims: object) -> tuple[int, int] | None:
    """(query tokens, key tokens) of an attention call: its query and key are [batch, heads,
    tokens, head_dim], so the key's tokens are the cache the step attended to, its own included."""
    if not isinstance(dims, list) or len(dims) < 2:
        return None
    query, key = dims[0], dims[1]
    if not all(
        isinstance(d, list) and len(d) == 4 and all(isinstance(x, int) and x > 0 for x in d)
        for d in (query, key)
    ):
        return None
    return query[2], key[2]


def _coll_args(args: dict) -> dict | None:
    """The NCCL metadata torch attaches to an eagerly launched collective kernel (absent in a replay)."""
    if "Collective name" not in args and "In msg nelems" not in args:
        return None
    return {
        "op": names.ARG_COLLECTIVES.get(
            str(args.get("Collective name")), str(args.get("Collective name"))
        ),
        "nelems": _as_int(args.get("In msg nelems")),
        "out_nelems": _as_int(args.get("Out msg nelems")),
        "dtype": names.TORCH_DTYPES.get(str(args.get("dtype")), args.get("dtype")),
        "group_size": _as_int(args.get("Group size")),
        "ranks": args.get("Process Group Ranks"),
        "group": _as_name(args.get("Process Group Name")),
        "seq": _as_int(args.get("Seq")),
    }


def _comm_op(ev: dict) -> CommOp | None:
    args = ev.get("args") or {}
    name = args.get("Collective name")
    if not name:
        return None
    return CommOp(
        ts=_num(ev, "ts"),
        dur=_num(ev, "dur"),
        ext=args.get("External id"),
        op=names.ARG_COLLECTIVES.get(str(name), str(name)),
        nelems=_as_int(args.get("In msg nelems")),
        dtype=names.TORCH_DTYPES.get(str(args.get("dtype")), args.get("dtype")),
        group_size=_as_int(args.get("Group size")),
        tid=ev.get("tid"),
        group=_as_name(args.get("Process Group Name")),
        seq=_as_int(args.get("Seq")),
    )


def _backend_op(ev: dict, op: str, backend: str) -> CommOp:
    """torch's `<backend>:<op>` annotation: the collective's tensor shape and C++ dtype, and, on gloo,
    the time its work took (on gloo's own thread)."""
    args = ev.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    nelems = None
    if (
        isinstance(dims, list)
        and dims
        and isinstance(dims[0], list)
        and all(isinstance(d, int) for d in dims[0])
    ):
        nelems = 1
        for d in dims[0]:
            nelems = _as_int(nelems * d) if nelems is not None and 0 <= d <= MAX_SIZE else None
    dtype = (
        names.CPP_DTYPES.get(types[0])
        if isinstance(types, list) and types and isinstance(types[0], str)
        else None
    )
    return CommOp(
        ts=_num(ev, "ts"),
        dur=_num(ev, "dur"),
        ext=args.get("External id"),
        op=op,
        nelems=nelems,
        dtype=dtype,
        group_size=None,
        tid=ev.get("tid"),
        backend=backend,
    )


def _as_int(value: object) -> int | None:
    """A count of elements as recorded: whole, from 0 to `MAX_SIZE` (2**48; a 400-digit count is
    no tensor, and a float of it overflows downstream), else None (unknown)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and is_digits(value):  # ASCII, at most 19 digits
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= MAX_SIZE else None


def _as_name(value: object) -> str | None:
    """A process group's name as recorded (a string, or an int in some exports); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)
