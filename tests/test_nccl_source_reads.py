"""How NCCL reads and uses a number, and what its list grammar accepts, read in NCCL's own source
(the pinned excerpts of tests/fixtures/nccl_source/): the facts the lint follows as a class
(issue 36 §4), each with the lint's answer on its boundary and on its healthy twin."""

from __future__ import annotations

import re

import pytest

from ncclprobe.nccl.knobs import KNOBS
from ncclprobe.nccl.lint import lint_env
from ncclprobe.nccl.names import FUNCTION_ALGORITHMS
from ncclprobe.nccl.p2p import legacy_level
from ncclprobe.nccl.values import read_number, strtoll_rest
from tests.nccl_source import cited_paths, load

NUMBER_ROWS = sorted(name for name, row in KNOBS.items() if row.number_use)


@pytest.mark.parametrize("name", NUMBER_ROWS)
def test_every_comparison_a_row_quotes_is_in_nccl_source(name):
    """Each `code` a `number_use` meaning quotes is a line of a file the row cites, at v2.28.9."""
    row = KNOBS[name]
    files = [load("v2.28.9-1", path).text for path in sorted(cited_paths(row.source))]
    quoted = [q for _, meaning in row.number_use for q in re.findall(r"`([^`]+)`", meaning)]
    assert quoted, f"{name}: no meaning quotes NCCL's comparison"
    for code in quoted:
        assert any(code in text for text in files), (name, code)


@pytest.mark.parametrize("name", [n for n in NUMBER_ROWS if KNOBS[n].nccl_param])
def test_unset_reads_as_the_nccl_param_default(name):
    row = KNOBS[name]
    env = name.removeprefix("NCCL_")
    for path in sorted(cited_paths(row.source)):
        text = load("v2.28.9-1", path).text
        found = re.search(rf'NCCL_PARAM\(\w+, "{env}", (-?\d+)\);', text)
        if found:
            assert int(found[1]) == row.unset_reads_as
            return
    pytest.fail(f"{name}: no NCCL_PARAM line in its excerpts")


def test_nccl_param_reads_with_strtoll_base_0():
    param = load("v2.28.9-1", "src/misc/param.cc").text
    assert "value = strtoll(str, nullptr, 0);" in param
    assert strtoll_rest("4M") == (4, "M") and strtoll_rest("0x10") == (16, "")
    assert strtoll_rest("010") == (8, "") and strtoll_rest("09") == (0, "9")
    assert strtoll_rest("true") == (0, "true") and strtoll_rest("-2") == (-2, "")


def test_p2p_level_reads_a_leading_number_when_no_name_matches():
    paths = load("v2.28.9-1", "src/graph/paths.cc").text
    assert "if (l == -1 && str[0] >= '0' && str[0] <= '9') {" in paths
    assert "int oldLevel = strtol(str, NULL, 0);" in paths
    assert [legacy_level(v) for v in ("2abc", "2", "08", "010", "0x1")] == [
        "PXB",
        "PXB",
        "LOC",
        "SYS",
        "PIX",
    ]


def test_which_algorithms_each_function_runs():
    """FUNCTION_ALGORITHMS is ncclTopoTuneModel's `continue`s, the same at 2.23, 2.24 and 2.28."""
    for tag in ("v2.24.3-1", "v2.28.9-1"):
        tuning = load(tag, "src/graph/tuning.cc").text
        assert (
            "(coll == ncclFuncBroadcast || coll == ncclFuncReduce) && a != NCCL_ALGO_RING" in tuning
        )
        assert "&& a != NCCL_ALGO_PAT && a != NCCL_ALGO_RING" in tuning
        assert "&& a != NCCL_ALGO_NVLS && a != NCCL_ALGO_COLLNET_DIRECT) continue;" in tuning
        assert "if (coll == ncclFuncAllReduce && a == NCCL_ALGO_PAT) continue;" in tuning
    assert FUNCTION_ALGORITHMS["broadcast"] == FUNCTION_ALGORITHMS["reduce"] == {"ring"}
    assert FUNCTION_ALGORITHMS["allgather"] == {"ring", "pat", "nvls", "collnetdirect"}
    assert (
        "pat" not in FUNCTION_ALGORITHMS["allreduce"] and "tree" in FUNCTION_ALGORITHMS["allreduce"]
    )


def test_only_the_first_clause_may_lack_a_function_from_2_24():
    assert (
        "All entries except the first must have a prefix"
        in load("v2.24.3-1", "src/graph/tuning.cc").text
    )
    assert "prefix" not in load("v2.23.4-1", "src/graph/tuning.cc").block(
        r"^ncclResult_t parseList"
    )


def _codes(env, version="2.28.9"):
    return {(f.severity, f.code) for f in lint_env(env, nccl_version=version)}


# the five rows of issue 36 §4, each with its boundary and its healthy twin
@pytest.mark.parametrize(
    "env, version, expected",
    [
        ({"NCCL_PROTO": "LL;Simple"}, "2.28.9", {("error", "unknown-token")}),
        ({"NCCL_PROTO": "LL;Simple"}, "2.24.3", {("error", "unknown-token")}),
        ({"NCCL_PROTO": "LL,Simple"}, "2.28.9", set()),
        ({"NCCL_PROTO": "LL;allreduce:Simple"}, "2.28.9", set()),
        ({"NCCL_PROTO": "LL;"}, "2.28.9", set()),  # strtok drops the empty clause
        ({"NCCL_PROTO": ";LL"}, "2.28.9", {("error", "unknown-token")}),  # not at the start
        ({"NCCL_ALGO": "Tree"}, "2.28.9", {("warning", "algo-leaves-function-nothing")}),
        ({"NCCL_ALGO": "Tree"}, "2.24.3", {("warning", "algo-leaves-function-nothing")}),
        ({"NCCL_ALGO": "Tree"}, "2.23.4", set()),  # falls back to Ring before 2.24
        ({"NCCL_ALGO": "Tree"}, None, {("warning", "algo-leaves-function-nothing")}),
        ({"NCCL_ALGO": "Tree,Ring"}, "2.28.9", set()),
        ({"NCCL_ALGO": "allreduce:Tree"}, "2.28.9", set()),
        ({"NCCL_ALGO": "^Ring"}, "2.28.9", {("warning", "algo-leaves-function-nothing")}),
        ({"NCCL_ALGO": "Ring,PAT"}, "2.28.9", set()),
        ({"NCCL_P2P_LEVEL": "2abc"}, "2.28.9", {("warning", "p2p-level-legacy-prefix")}),
        ({"NCCL_P2P_LEVEL": "2"}, "2.28.9", {("info", "p2p-level-legacy-int")}),
        ({"NCCL_P2P_LEVEL": "PXB"}, "2.28.9", set()),
        ({"NCCL_P2P_LEVEL": "abc2"}, "2.28.9", {("error", "p2p-level-unknown")}),
        ({"NCCL_CUMEM_ENABLE": "2"}, "2.28.9", {("info", "number-as-read")}),
        ({"NCCL_CUMEM_ENABLE": "-1"}, "2.28.9", {("warning", "number-as-read")}),
        ({"NCCL_CUMEM_ENABLE": "1"}, "2.28.9", set()),
        ({"NCCL_CUMEM_ENABLE": "-2"}, "2.28.9", {("info", "number-as-read")}),
        ({"NCCL_NVLS_ENABLE": "3"}, "2.28.9", {("warning", "number-as-read")}),
        ({"NCCL_NVLS_ENABLE": "2"}, "2.28.9", set()),
        ({"NCCL_SHM_DISABLE": "2"}, "2.28.9", {("error", "number-as-read")}),
        ({"NCCL_SHM_DISABLE": "true"}, "2.28.9", {("error", "invalid-value")}),
        ({"NCCL_SHM_DISABLE": "01"}, "2.28.9", {("info", "number-as-read")}),
        ({"NCCL_SHM_DISABLE": "1"}, "2.28.9", set()),
        ({"NCCL_P2P_DISABLE": "2"}, "2.28.9", {("error", "number-as-read")}),
        ({"NCCL_LL128_C2C": "yes"}, "2.28.9", {("error", "invalid-value")}),
        ({"NCCL_LL128_C2C": "5"}, "2.28.9", {("info", "number-as-read")}),
        ({"NCCL_BUFFSIZE": "4M"}, "2.28.9", {("error", "number-as-read")}),
        ({"NCCL_BUFFSIZE": "4194304"}, "2.28.9", set()),
    ],
)
def test_the_lint_reads_values_as_nccl_does(env, version, expected):
    assert _codes(env, version) == expected


def test_the_messages_say_what_nccl_does():
    [cumem] = lint_env({"NCCL_CUMEM_ENABLE": "2"}, nccl_version="2.28.9")
    assert "reads it as 2" in cumem.message and "cuMem on" in cumem.message
    assert "invalid" not in cumem.message and "ignore" not in cumem.message
    [nvls] = lint_env({"NCCL_NVLS_ENABLE": "3"}, nccl_version="2.28.9")
    assert "without checking multicast support" in nvls.message
    [level] = lint_env({"NCCL_P2P_LEVEL": "2abc"}, nccl_version="2.28.9")
    assert level.message.endswith(": PXB") and "ignores it" not in level.message
    assert level.fix == "export NCCL_P2P_LEVEL=PXB"
    [tree] = lint_env({"NCCL_ALGO": "Tree"}, nccl_version="2.28.9")
    assert "broadcast, reduce, allgather, reducescatter" in tree.message
    assert "allreduce," not in tree.message and "allreduce no" not in tree.message
    [proto] = lint_env({"NCCL_PROTO": "LL;Simple"}, nccl_version="2.28.9")
    assert (
        "'Simple' names no function" in proto.message and "communicator creation" in proto.message
    )
    [shm] = lint_env({"NCCL_SHM_DISABLE": "2"}, nccl_version="2.28.9")
    assert "SHM stays on" in shm.message and shm.message.endswith("as 0 does")


def test_a_number_beyond_64_bits_keeps_the_default():
    assert read_number("NCCL_CUMEM_ENABLE", "9" * 30).number is None
    assert _codes({"NCCL_CUMEM_ENABLE": "9" * 30}) == {("error", "invalid-value")}


def test_a_job_known_to_call_a_stranded_collective_fails_and_one_that_does_not_is_fine():
    """The sweep knows its collectives: NCCL_ALGO=Tree over all_reduce alone says nothing, over
    broadcast it is an error on 2.24+ (the call fails) and a warning where the version is unknown."""
    tree = {"NCCL_ALGO": "Tree"}
    assert lint_env(tree, nccl_version="2.28.9", collectives=["all_reduce"]) == []
    [broadcast] = lint_env(tree, nccl_version="2.28.9", collectives=["all_reduce", "broadcast"])
    assert broadcast.severity == "error" and "leaves broadcast no algorithm" in broadcast.message
    [unknown] = lint_env(tree, collectives=["broadcast"])
    assert unknown.severity == "warning"
    assert lint_env(tree, nccl_version="2.23.4", collectives=["broadcast"]) == []
