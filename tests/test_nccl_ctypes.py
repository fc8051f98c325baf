"""The ctypes binding of the raw NCCL path against NCCL's own header facts, and against a real
libnccl where one is installed (the nvidia-nccl wheel loads without a GPU: its version, unique
ids and error strings are real; creating a communicator fails with NCCL's own CUDA error).

The header facts are a hand copy of NVIDIA/nccl v2.28.9-1 src/nccl.h.in
(tests/fixtures/nccl_header/nccl_2.28.9_api_facts.txt), never our own tables.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from ncclprobe.probes import nccl_ctypes as nc
from ncclprobe.probes.collectives import COLLECTIVES

FACTS = Path(__file__).parent / "fixtures" / "nccl_header" / "nccl_2.28.9_api_facts.txt"
C_TYPES = {
    "const void*": ctypes.c_void_p,
    "void*": ctypes.c_void_p,
    "ncclComm_t": ctypes.c_void_p,
    "cudaStream_t": ctypes.c_void_p,
    "size_t": ctypes.c_size_t,
    "int": ctypes.c_int,
    "ncclDataType_t": ctypes.c_int,
    "ncclRedOp_t": ctypes.c_int,
    "ncclUniqueId": nc.UniqueId,
}


def _facts():
    prototypes, enums, defines = {}, {}, {}
    for line in FACTS.read_text().splitlines():
        if line.startswith("# ") or not line.strip():
            continue
        if line.startswith("#define"):
            _, name, value = line.split()
            defines[name] = int(value)
        elif line.startswith("ncclResult_t "):
            name, params = re.fullmatch(r"ncclResult_t (\w+)\((.*)\);", line).groups()
            prototypes[name] = [p.strip() for p in params.split(",") if p.strip()]
        else:
            name, value = (part.strip() for part in line.split("="))
            enums[name] = int(value)
    return prototypes, enums, defines


def _ctype(param: str):
    """'const void* sendbuff' -> c_void_p; 'ncclComm_t* comm' -> POINTER(c_void_p)."""
    kind = param.rsplit(None, 1)[0].replace(" *", "*")
    if param.split()[-1].startswith("*"):  # "int *version"
        kind += "*"
    if kind.endswith("*") and kind not in C_TYPES:
        return ctypes.POINTER(C_TYPES[kind[:-1].strip()])
    return C_TYPES[kind]


def test_every_signature_matches_the_header():
    prototypes, _, _ = _facts()
    assert set(nc.SIGNATURES) == set(prototypes)
    for name, params in prototypes.items():
        expected = tuple(_ctype(p) for p in params)
        got = nc.SIGNATURES[name]
        assert len(got) == len(expected), name
        for ours, theirs in zip(got, expected):
            if hasattr(theirs, "_type_") and isinstance(theirs._type_, type):  # a pointer type
                assert ours._type_ is theirs._type_, name
            else:
                assert ours is theirs, name


def test_the_enums_and_the_id_size_match_the_header():
    _, enums, defines = _facts()
    assert defines["NCCL_UNIQUE_ID_BYTES"] == nc.UNIQUE_ID_BYTES == ctypes.sizeof(nc.UniqueId)
    assert [enums[name] for name in nc.RESULTS] == list(range(len(nc.RESULTS)))
    names = {"sum": "ncclSum", "prod": "ncclProd", "max": "ncclMax", "min": "ncclMin"}
    assert {op: enums[names[op]] for op in names} == {op: nc.RED_OPS[op] for op in names}
    assert nc.RED_OPS["avg"] == enums["ncclAvg"]
    header_type = {
        "int8": "ncclInt8",
        "uint8": "ncclUint8",
        "int32": "ncclInt32",
        "uint32": "ncclUint32",
        "int64": "ncclInt64",
        "uint64": "ncclUint64",
        "float16": "ncclFloat16",
        "float32": "ncclFloat32",
        "float64": "ncclFloat64",
        "bfloat16": "ncclBfloat16",
        "float8_e4m3fn": "ncclFloat8e4m3",
        "float8_e5m2": "ncclFloat8e5m2",
    }
    assert {k: enums[v] for k, v in header_type.items()} == nc.DATA_TYPES


def test_the_functions_enqueued_on_a_stream_are_the_collectives_and_point_to_point():
    assert nc.COMM_STREAM == {
        "ncclAllReduce",
        "ncclAllGather",
        "ncclReduceScatter",
        "ncclBroadcast",
        "ncclReduce",
        "ncclAlltoAll",
        "ncclSend",
        "ncclRecv",
    }


def test_arguments_are_converted_once_with_the_header_types():
    args = nc.convert("ncclReduce", (0x1000, 0x2000, 3, 7, 4, 1, 0xABC, 0))
    assert [type(a) for a in args] == list(nc.SIGNATURES["ncclReduce"])
    assert [a.value for a in args] == [0x1000, 0x2000, 3, 7, 4, 1, 0xABC, None]
    assert nc.convert("ncclAllReduce", (0, 0, (1 << 63) - 1, 7, 0, 1, 2))[2].value == (1 << 63) - 1


@pytest.mark.parametrize(
    "values, message",
    [
        ((1, 2, 3, 7, 0, 5), "takes 7 arguments, got 6"),
        ((-1, 2, 3, 7, 0, 5, 0), "a pointer must be a non-negative int"),
        ((1, 2, -3, 7, 0, 5, 0), "a count must be a non-negative int"),
        ((1, 2, 1 << 63, 7, 0, 5, 0), "a count must be a non-negative int"),
        ((1, 2, 3.0, 7, 0, 5, 0), "a count must be a non-negative int"),
        ((1, 2, 3, 1 << 31, 0, 5, 0), "an int argument out of range"),
        ((1, 2, 3, 7, -(1 << 31) - 1, 5, 0), "an int argument out of range"),
        (("0x1", 2, 3, 7, 0, 5, 0), "a pointer must be a non-negative int"),
    ],
)
def test_a_bad_argument_fails_when_the_call_is_built_with_the_call_named(values, message):
    with pytest.raises(TypeError, match=message) as info:
        nc.convert("ncclAllReduce", values)
    assert str(info.value).startswith("ncclAllReduce")


def test_the_int_bounds_are_the_c_int_bounds():
    low, high = -(1 << 31), (1 << 31) - 1
    assert [a.value for a in nc.convert("ncclSend", (0, 0, low, high, 0, 0))[2:4]] == [low, high]


def _shape(name, size=1024, nranks=2):
    return COLLECTIVES[name].shape(size, "float32", nranks)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("all_reduce", [("ncclAllReduce", (10, 20, 256, 7, 0))]),
        ("all_gather", [("ncclAllGather", (10, 20, 128, 7))]),  # sendcount: one rank's piece
        ("reduce_scatter", [("ncclReduceScatter", (10, 20, 128, 7, 0))]),  # recvcount
        ("broadcast", [("ncclBroadcast", (10, 20, 256, 7, 0))]),
        ("reduce", [("ncclReduce", (10, 20, 256, 7, 0, 0))]),  # op, then root
        ("alltoall", [("ncclAlltoAll", (10, 20, 128, 7))]),  # count per peer
        (
            "sendrecv",  # rank 1 of 2 sends to 0 and receives from 0, inside one group
            [
                ("ncclGroupStart", ()),
                ("ncclSend", (10, 256, 7, 0)),
                ("ncclRecv", (20, 256, 7, 0)),
                ("ncclGroupEnd", ()),
            ],
        ),
    ],
)
def test_each_collective_makes_the_call_nccl_tests_makes(name, expected):
    calls = COLLECTIVES[name].nccl_calls(10, 20, _shape(name), "float32", "sum", 1, 2, 22809)
    assert calls == expected
    for fn, values in calls:  # every call fits its prototype once comm and stream are appended
        extra = (1, 2) if fn in nc.COMM_STREAM else ()
        nc.convert(fn, (*values, *extra))


def test_sendrecv_peers_follow_the_ring_of_nccl_tests():
    calls = COLLECTIVES["sendrecv"].nccl_calls(
        1, 2, _shape("sendrecv", nranks=4), "float32", "sum", 3, 4, 22809
    )
    assert calls[1] == ("ncclSend", (1, 256, 7, 0)) and calls[2] == ("ncclRecv", (2, 256, 7, 2))


def test_alltoall_before_nccl_2_28_is_grouped_sends_and_receives_at_each_peer_offset():
    shape = _shape("alltoall", size=1024, nranks=2)  # 128 float32 per peer: 512 bytes apart
    calls = COLLECTIVES["alltoall"].nccl_calls(1000, 5000, shape, "float32", "sum", 0, 2, 22799)
    assert calls == [
        ("ncclGroupStart", ()),
        ("ncclSend", (1000, 128, 7, 0)),
        ("ncclRecv", (5000, 128, 7, 0)),
        ("ncclSend", (1512, 128, 7, 1)),
        ("ncclRecv", (5512, 128, 7, 1)),
        ("ncclGroupEnd", ()),
    ]
    assert (
        COLLECTIVES["alltoall"].nccl_calls(1000, 5000, shape, "float32", "sum", 0, 2, 22800)[0][0]
        == "ncclAlltoAll"
    )


def test_reductions_pass_the_op_and_types_their_dtype():
    shape = COLLECTIVES["all_reduce"].shape(64, "bfloat16", 1)
    assert COLLECTIVES["all_reduce"].nccl_calls(1, 2, shape, "bfloat16", "max", 0, 1, 22809) == [
        ("ncclAllReduce", (1, 2, 32, 9, 2))
    ]


def test_the_library_is_the_one_this_process_mapped(tmp_path):
    lib = tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 /usr/lib/libc.so.6\n"
        "7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n"
        f"7f0000004000-7f0000005000 r-xp 00000000 08:01 99 {lib}\n"
    )
    assert nc.library_path(str(maps)) == str(lib)
    assert nc.mapped("libcudart.so", str(maps)) is None


def test_a_mapped_path_that_no_longer_exists_is_not_taken(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0-7f1 r-xp 0 08:01 9 /gone/libnccl.so.2 (deleted)\n7f2-7f3 r-xp 0 0:0 0 /gone/libnccl.so.2\n"
    )
    assert nc.mapped("libnccl.so", str(maps)) is None


def test_version_text():
    assert nc.version_text(22809) == "2.28.9"
    assert nc.version_text(22400) == "2.24.0"


def _real_library():
    try:
        return nc.Library()
    except (nc.NcclError, OSError) as exc:
        pytest.skip(f"no loadable libnccl here ({exc})")


def test_a_real_libnccl_answers_its_version_and_unique_ids():
    lib = _real_library()
    assert lib.version >= 21800 and lib.has("ncclAllReduce")
    first, second = lib.unique_id(), lib.unique_id()
    assert len(first) == len(second) == nc.UNIQUE_ID_BYTES and first != second


def test_a_real_libnccl_refuses_a_bad_id_length_before_calling_nccl():
    lib = _real_library()
    with pytest.raises(ValueError, match="128 bytes, got 5"):
        nc.Communicator(lib, 1, b"short", 0)


def test_a_real_nccl_error_is_named_with_nccls_own_words():
    lib = _real_library()
    with pytest.raises(nc.NcclError, match=r"^ncclGroupEnd returned ncclInvalidUsage"):
        lib.check("ncclGroupEnd", 5)
    with pytest.raises(nc.NcclError, match="ncclResult_t 99"):
        lib.check("ncclGroupEnd", 99)
    lib.check("ncclGroupEnd", 0)


def test_the_unique_id_reaches_every_rank_through_the_launchers_store_as_raw_bytes():
    _real_library()
    from ncclprobe.launch import PoolSpec, run_pool

    outcome = run_pool(
        PoolSpec(nranks=3, backend="gloo", entry="tests.pool_entries:raw_nccl_ids", timeout_s=60)
    )
    assert outcome.status == "ok", outcome.reason
    views = {m["rank"]: m["ids"] for m in outcome.of_kind("ids")}
    assert sorted(views) == [0, 1, 2]
    assert views[0] == views[1] == views[2]  # every rank holds rank 0's ids
    first, second = views[0]
    assert len(bytes.fromhex(first)) == nc.UNIQUE_ID_BYTES and first != second


@pytest.mark.gpu
@pytest.mark.parametrize("loop", ["c", "ctypes"])
def test_real_nccl_calls_through_each_issue_loop_and_a_refusal_stops_the_batch(monkeypatch, loop):
    """One rank on the GPU, each loop asked for by name (`c` fails here where the C loop is not
    built): NCCL calls of 6, 7 and 8 parameters (ncclReduce's last two go on the stack on x86-64)
    and a group land with every argument (each result is checked); NCCL's refusal of a bad
    datatype comes back as the call's name and NCCL's words, and the call after it is not made."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from ncclprobe.probes import issue_loop

    monkeypatch.setenv("NCCLPROBE_ISSUE_LOOP", loop)
    lib = _real_library()
    comm = nc.Communicator(lib, 1, lib.unique_id(), 0)
    try:
        send = torch.arange(1, 9, device="cuda", dtype=torch.float32)
        out = [torch.zeros(8, device="cuda") for _ in range(4)]
        stream = torch.cuda.current_stream().cuda_stream
        F32, MAX = nc.DATA_TYPES["float32"], nc.RED_OPS["max"]

        def all_reduce(recv, count, dtype=F32):
            return comm.call(
                "ncclAllReduce", send.data_ptr(), recv.data_ptr(), count, dtype, MAX, stream=stream
            )

        calls = [
            all_reduce(out[0], 8),
            comm.call("ncclGroupStart"),
            comm.call("ncclAllGather", send.data_ptr(), out[1].data_ptr(), 5, F32, stream=stream),
            comm.call("ncclGroupEnd"),
            comm.call(
                "ncclReduce", send.data_ptr(), out[2].data_ptr(), 3, F32, MAX, 0, stream=stream
            ),
        ]
        issuer = comm.batch(calls * 10)
        issuer.run()
        torch.cuda.synchronize()
        expected = {issue_loop.C: issue_loop.C_LOOP, "ctypes": issue_loop.CTYPES}[loop]
        assert issuer.issued_by == expected
        zeros = torch.zeros(8, device="cuda")
        assert torch.equal(out[0], send)
        assert torch.equal(out[1], torch.cat([send[:5], zeros[:3]]))
        assert torch.equal(out[2], torch.cat([send[:3], zeros[:5]]))
        stopped = comm.batch(
            [all_reduce(out[3], 2), all_reduce(out[3], 8, dtype=99), all_reduce(out[3], 8)]
        )
        with pytest.raises(nc.NcclError, match=r"^ncclAllReduce returned ncclInvalidArgument"):
            stopped.run()
        torch.cuda.synchronize()
        assert torch.equal(out[3], torch.cat([send[:2], zeros[:6]]))  # the third call was not made
    finally:
        comm.destroy()
