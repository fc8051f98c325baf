"""p2pBandwidthLatencyTest pastes that stop before, or inside, the matrices: read as far as they go.

The sample prints its device list, then `Device=i CAN|CANNOT Access Peer Device=j` for every ordered
pair, device by device, then the connectivity matrix, then the measured matrices (cuda-samples
`p2pBandwidthLatencyTest.cu`: `checkP2Paccess`, `printf("P2P Connectivity Matrix\\n")`); its
failure line is `Cuda failure FILE:LINE: 'reason'`. The real pastes are cut at each of those
points (the fixtures' sources: a V100 connectivity-only paste, a cut 4-GPU A100 output).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.node.p2p_access import access_notes
from ncclprobe.evidence.node.p2p_test_output import looks_like_p2p_test, parse_p2p_test
from ncclprobe.importing import ImportOptions, import_text
from ncclprobe.verdict import Verdict

A100 = (
    Path(__file__).parent
    / "fixtures"
    / "p2p"
    / "p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt"
).read_text()


def _access_lines(n: int, can) -> str:
    return "".join(
        f"Device={i} {'CAN' if can(i, j) else 'CANNOT'} Access Peer Device={j}\n"
        for i in range(n)
        for j in range(n)
        if i != j
    )


def test_a_connectivity_only_paste_reads_every_pair_and_says_nothing_was_measured():
    lines = A100.splitlines()
    head = "\n".join(lines[: lines.index("P2P Connectivity Matrix") + 6])
    report = import_text(head, ImportOptions("f"))
    notes = report.document["notes"]
    assert report.document["matrices"] == [] and report.verdict() is Verdict.FINE
    assert (
        "no bandwidth or latency matrix in the file: no bandwidth measured (the output ends "
        "before the first matrix)"
    ) in notes
    refused = [f for f in report.document["findings"] if f["code"] == "peer-access-refused"]
    assert refused and refused[0]["pairs"] == [[0, 2], [0, 3], [1, 2], [1, 3]]
    assert "peer access (the driver's answer per GPU pair): can: 0<->1, 2<->3; refused: " in (
        " ".join(notes)
    )


def test_every_pair_can_is_said_only_when_every_ordered_pair_was_answered():
    every = {(i, j): True for i in range(4) for j in range(4) if i != j}
    assert access_notes(every, 4) == [
        "peer access: every GPU pair can access its peer (12 of 12 ordered pairs)"
    ]
    del every[(3, 2)]  # one answer missing: no "every", and the pair named as one way only
    [said] = access_notes(every, 4)
    assert "every" not in said and "2-3" in said and "one direction only" in said


def test_a_paste_cut_in_the_access_lines_names_the_pairs_it_does_not_answer():
    text = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n" + "".join(
        _access_lines(4, lambda i, j: {i, j} in ({0, 1}, {2, 3})).splitlines(keepends=True)[:6]
    )
    out = parse_p2p_test(text)
    assert out.matrices == [] and out.peer_access[2][3] is None and out.peer_access[0][1] is True
    assert (
        "peer access not in the file for 1 GPU pair(s): 2<->3 (the CAN/CANNOT lines end after "
        "Device=1's)"
    ) in out.notes


def test_one_way_access_is_named_with_its_direction():
    access = {(0, 1): True, (1, 0): False}
    assert access_notes(access, 2) == [
        "peer access (the driver's answer per GPU pair): one way only: 0->1"
    ]


def test_a_matrix_ended_by_the_samples_failure_line_says_the_test_stopped():
    lines = A100.splitlines()
    at = lines.index("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)")
    failure = "Cuda failure p2pBandwidthLatencyTest.cu:234: 'peer mapping resources exhausted'"
    text = "\n".join([*lines[: at + 3], failure, "$ "])
    report = import_text(text, ImportOptions("f"))
    notes = report.document["notes"]
    assert any(
        n.startswith(
            "the test stopped inside 'Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)'"
        )
        and failure in n
        for n in notes
    )
    assert report.verdict() is Verdict.FINDINGS  # the failure line fails the verdict
    assert len(report.document["matrices"]) == 1


def test_access_lines_alone_are_recognised_and_a_text_without_any_is_not():
    assert looks_like_p2p_test(_access_lines(2, lambda i, j: True))
    assert not looks_like_p2p_test("Device=0 can access peer device 1\n")
    with pytest.raises(UsageProblem, match="no p2pBandwidthLatencyTest matrix, device list"):
        parse_p2p_test("P2P (Peer-to-Peer) test output\n")


def test_a_test_that_failed_right_after_a_title_says_so_and_advises_nothing():
    """tinygrad/open-gpu-kernel-modules#33's shape: the sample's failure line where the enabled
    matrix's header should be; the matrices before it read, no "nothing to change"."""
    lines = A100.splitlines()
    at = lines.index("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)")
    failure = "Cuda failure p2pBandwidthLatencyTest.cu:189: 'mapping of buffer object failed'"
    report = import_text("\n".join([*lines[: at + 1], failure]), ImportOptions("f"))
    assert (
        "the test stopped right after the title 'Unidirectional P2P=Enabled Bandwidth (P2P Writes) "
        f"Matrix (GB/s)': it ends with `{failure}`"
    ) in report.document["notes"]
    assert len(report.document["matrices"]) == 1 and report.verdict() is Verdict.FINDINGS
    assert all(a["action"] != "nothing to change" for a in report.document["advice"])
