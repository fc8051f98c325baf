"""Values PyTorch prints where it has none, and pastes broken at a terminal's width (issue 36):
never read as numbers, never a group of their own, and the first collective that never completed
read as a hang of NCCL's setup with the transport the log names.

Lines are PyTorch's own (ProcessGroupNCCL.cpp, torch 2.2-2.13, as the unseen corpus' logs print
them); NCCL's are `src/init.cc` (`Using network ...`) and `src/misc/param.cc` (`... set by
environment to ...`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.evidence.hang.job_log import parse_job_log
from ncclprobe.evidence.wrapped import MIN_ROWS, MIN_WIDTH, is_wrapped, unwrap

FIX = Path(__file__).parent / "fixtures"
UNSEEN = FIX / "unseen" / "job_logs"
WORK = (
    "[rank{r}]:[E1001 16:06:04.537131842 ProcessGroupNCCL.cpp:607] {pg}[Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, "
    "Timeout(ms)=600000) ran for 600009 milliseconds before timing out."
)
STATUS = (
    "[rank{r}]:[E1001 16:06:04.537356909 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank {r}] "
    "Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
    "work: {enq}, last completed NCCL work: {done}."
)
UINT64_MAX = 2**64 - 1


def work(r, seq=1, op="ALLREDUCE", n=128, pg=""):
    return WORK.format(r=r, seq=seq, op=op, n=n, pg=pg)


def findings_of(tmp_path, lines: list[str]):
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    return diagnose(load_evidence(logs=[path])).findings


def text(findings) -> str:
    return "\n".join(f"{f.title}\n{f.detail}\n{f.evidence}" for f in findings)


@pytest.mark.parametrize(
    ("done", "read"), [("-1", None), ("0", 0), ("1", 1), ("2", None), ("76280750235782912", None)]
)
def test_last_completed_above_last_enqueued_or_negative_is_none(done, read):
    """Enqueued 1: completed 0 and 1 are numbers; -1 and anything above 1 are not."""
    log = parse_job_log(STATUS.format(r=2, seq=1, enq=1, done=done))
    assert log.statuses[0].last_completed == read


@pytest.mark.parametrize(("n", "read"), [(UINT64_MAX, None), (2**63, None), (2**63 - 1, 2**63 - 1)])
def test_an_unsigned_minus_one_is_no_element_count(n, read):
    log = parse_job_log(work(10, op="COALESCED", n=n))
    assert log.timeouts[0].numel_in == read == log.timeouts[0].numel_out


def test_the_first_collective_with_garbage_status_never_completed(tmp_path):
    """The ALCF log's shape: two ranks in ALLREDUCE #1, rank 2's last completed a garbage value."""
    found = findings_of(
        tmp_path,
        [
            work(1, pg="[PG 0 Rank 1] "),
            work(2, pg="[PG 0 Rank 2] "),
            STATUS.format(r=2, seq=1, enq=1, done="76280750235782912"),
        ],
    )
    [first] = [f for f in found if f.rule == "hang-first-collective"]
    assert first.title.startswith("the first collective of ")
    assert "76280750235782912" not in text(found) and "76,280" not in text(found)
    assert not [f for f in found if f.rule in ("hang-mismatch", "hang-groups")]


def test_a_count_of_two_to_the_64_is_never_printed(tmp_path):
    found = findings_of(tmp_path, [work(10, op="COALESCED", n=UINT64_MAX, pg="[PG 6 Rank 1] ")])
    assert "18,446" not in text(found) and str(UINT64_MAX) not in text(found)
    assert any("COALESCED #1" in f.title for f in found)


@pytest.mark.parametrize(("seq", "done", "first"), [(3, "-1", True), (3, "2", False)])
def test_a_later_collective_is_the_first_only_where_nothing_completed(tmp_path, seq, done, first):
    """#3 with last completed -1 on every rank: the first never completed; with #2 completed, the
    ranks agree on #3 and it is no setup hang."""
    lines = []
    for r in (0, 1):
        lines += [
            work(r, seq=seq, pg=f"[PG 0 Rank {r}] "),
            STATUS.format(r=r, seq=seq, enq=seq, done=done),
        ]
    rules = {f.rule for f in findings_of(tmp_path, lines)}
    assert ("hang-first-collective" in rules) is first


def test_a_rank_whose_line_names_no_group_joins_the_group_with_its_call(tmp_path):
    """The vLLM log's shape: ranks 0, 2 name default_pg, rank 1's line (cut before its status)
    names none; same call at the same number: one collective, never two groups waiting on each other."""
    lines = []
    for r in (2, 0):
        lines += [work(r), STATUS.format(r=r, seq=1, enq=1, done="-1")]
    found = findings_of(tmp_path, [*lines, work(1)])
    [first] = [f for f in found if f.rule == "hang-first-collective"]
    assert first.evidence["timed_out_ranks"] == [0, 1, 2]
    assert not [f for f in found if f.rule == "hang-groups"]


def test_a_rank_with_no_group_and_another_call_is_no_cycle(tmp_path):
    """Its twin: rank 1's unnamed line has another size: it stays apart, and still no cycle."""
    lines = []
    for r in (2, 0):
        lines += [work(r), STATUS.format(r=r, seq=1, enq=1, done="-1")]
    found = findings_of(tmp_path, [*lines, work(1, n=256)])
    assert not [f for f in found if f.rule == "hang-groups"]


NCCL_LINES = [
    "x3200c0s19b1n0:191643:191866 [2] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB",
    "x3200c0s19b1n0:191643:191866 [2] NCCL INFO Using network AWS Libfabric",
]


@pytest.mark.parametrize("nccl", [True, False])
def test_the_first_collective_names_the_transport_the_log_shows(tmp_path, nccl):
    lines = (NCCL_LINES if nccl else []) + [work(r, pg=f"[PG 0 Rank {r}] ") for r in (0, 1)]
    [first] = [f for f in findings_of(tmp_path, lines) if f.rule == "hang-first-collective"]
    if nccl:
        assert "network AWS Libfabric" in first.detail
        assert "NCCL_NET_GDR_LEVEL=PHB" in first.detail
    else:
        assert "no NCCL line naming the network" in first.detail


def test_the_real_first_collective_logs(tmp_path):
    """The corpus' three: none shows a sentinel, each reads as the first collective."""
    for name in (
        "torch_allreduce_8rank_2node_sirius_aws_ofi_first_allreduce_timeout_garbage_seq_alcf.log",
        "megatron_bridge_pp_coalesced_seq1_numel_uint64max_megatronbridge943.log",
        "vllm_tp4_vision_first_allreduce_never_completed_vllm8978.log",
    ):
        found = diagnose(load_evidence(logs=[UNSEEN / name])).findings
        assert [f for f in found if f.rule == "hang-first-collective"], name
        assert not [f for f in found if f.rule in ("hang-mismatch", "hang-groups")], name


# -- a paste broken at a terminal's width

MESSAGE = (
    "[rank1]:[E307 05:29:18.161079108 ProcessGroupNCCL.cpp:1858] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
    "Received a dump signal due to a collective timeout from this local rank and we will try our best "
    "to dump the debug info. Last enqueued NCCL work: 855, last completed NCCL work: 12.This is most "
    "likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order "
    "of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run."
)
FAILED = (
    "[rank0]:[E307 05:30:18.278313932 ProcessGroupNCCL.cpp:744] [Rank 0] Some NCCL operations have "
    "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
    "might run on corrupted/incomplete data."
)


def wrap(line: str, width: int, pad: bool) -> list[str]:
    rows = [line[i : i + width] for i in range(0, len(line), width)]
    return [row.ljust(width) if pad else row for row in rows]


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("width", [MIN_WIDTH, 97, 190])
def test_a_wrapped_paste_is_read_as_its_lines(width, pad):
    """Any width from MIN_WIDTH, cut bare (a terminal) or padded (a multiplexer's pane): rank 1's
    status is read with its rank, the number split at the edge joined back."""
    rows = wrap(MESSAGE, width, pad) + wrap(FAILED, width, pad)
    log = parse_job_log("\n".join(rows))
    [status] = log.statuses
    assert (status.rank, status.last_enqueued, status.last_completed) == (1, 855, 12)
    assert log.ops_failed == {0} and 1 in log.dump_signals


def test_tmux_position_counters_are_removed():
    rows = [row[:-9] + "[7/904]  " for row in wrap(MESSAGE, 120, True)]
    rows[0] = rows[0][:-7] + "[8/904$"  # cut at the edge
    assert "/904" not in " ".join(unwrap(rows))


def test_below_the_shape_nothing_is_joined():
    """Its healthy twins: rows narrower than MIN_WIDTH, or fewer than MIN_ROWS at the width."""
    narrow = wrap(MESSAGE, MIN_WIDTH - 1, True)
    assert not is_wrapped(narrow) and unwrap(narrow) == narrow
    few = ["x" * 100] * (MIN_ROWS - 1) + ["short"] * 2
    assert not is_wrapped(few)
    assert is_wrapped(["x" * 100] * MIN_ROWS + ["short"] * 2)


def test_an_ordinary_log_is_left_as_it_is():
    lines = (UNSEEN / "ddp_timestamped_rank0_allreduce_seq54_enqueued84_pydiff31.log").read_text()
    assert unwrap(lines.splitlines()) == lines.splitlines()


def test_the_real_wrapped_paste_says_a_collective_timed_out(tmp_path):
    """axolotl #3476: rank 1's 855/12 read, no op or number invented, exit 1's severity."""
    path = (
        UNSEEN
        / "axolotl_fsdp2_terminal_wrapped_dump_signal_enqueued855_completed12_axolotl3476.log"
    )
    found = diagnose(load_evidence(logs=[path])).findings
    [timed] = [f for f in found if f.title.startswith("a collective timed out")]
    assert "#855" in timed.title and "#12" in timed.title and timed.severity == "error"
    assert "#13-#855" in timed.title


def test_a_status_alone_with_nothing_completed(tmp_path):
    """`Exception (either an error or timeout) detected by watchdog`: failed or timed out, not
    said to be a timeout (its twin, a rank told to dump on a timeout, is the axolotl log's)."""
    found = findings_of(tmp_path, [STATUS.format(r=3, seq=5, enq=5, done="-1")])
    [timed] = [f for f in found if f.title.startswith("a collective failed or timed out")]
    assert "last completed none" in timed.title and "enqueued, not completed" not in timed.title


COMM = (
    "cuda0003:2949601:2949642 [0] NCCL INFO comm 0x55fb6f3ce680 rank 0 nranks 4 cudaDev 0 nvmlDev 2 "
    "busId 41000 commId 0x795520212f433144 - Init COMPLETE"
)


@pytest.mark.parametrize(("ranks", "absent"), [((0, 1, 2), True), ((0, 1, 2, 3), False)])
def test_the_first_collective_says_what_else_its_lines_allow(tmp_path, ranks, absent):
    """NCCL's Init COMPLETE is named; with 3 of a 4-rank communicator's ranks in the log, a member
    absent from it may not have entered (said, never which one); all 4 shown: not said."""
    lines = [COMM] + [work(r, pg=f"[PG 0 Rank {r}] ") for r in ranks]
    [first] = [f for f in findings_of(tmp_path, lines) if f.rule == "hang-first-collective"]
    assert "init completed (rank 0 of 4)" in first.detail
    assert ("3 of its 4 ranks" in first.detail) is absent
    assert "never entered" not in first.detail and "rank 3 " not in first.detail


@pytest.mark.parametrize(("op", "said"), [("COALESCED", True), ("ALLREDUCE", False)])
def test_a_coalesced_first_operation_names_the_unmatched_peer_too(tmp_path, op, said):
    [first] = [
        f
        for f in findings_of(tmp_path, [work(10, op=op, n=UINT64_MAX, pg="[PG 6 Rank 1] ")])
        if f.rule == "hang-first-collective"
    ]
    assert ("matching receive or send" in first.detail) is said


@pytest.mark.parametrize(
    "name",
    [
        "flight_recorder/nccl/nvidia-smi.txt",
        "unseen/nccl_tests/allreduce_multinode_tail_only_no_header_healthy_nccltests119.txt",
        "p2p/p2p_16x_v100_sxm3_dgx2_p2p_read_gpu_micro.txt",
    ],
)
def test_tables_at_the_width_are_never_joined(name):
    """Real outputs whose rows share the widest length (nvidia-smi's boxes, nccl-tests' rows, a P2P
    matrix followed by its next title): they have the shape, but no row continues a message."""
    lines = (Path(__file__).parent / "fixtures" / name).read_text().splitlines()
    assert is_wrapped(lines) and unwrap(lines) == [line.rstrip() for line in lines]


def test_a_traceback_after_a_full_width_message_stays_its_own():
    rows = [f"[rank0]: {'x' * 91}"] * 3 + [
        '  File "train.py", line 3, in <module>',
        "    what(): boom",
    ]
    assert unwrap(rows) == rows


@pytest.mark.parametrize("pad", [False, True])
def test_unwrapping_gives_back_the_message_at_every_width(pad):
    """Cut at any width from MIN_WIDTH to 200, at a space or in a word, padded or bare: the one
    message comes back exactly (a space at the cut is kept once, a split word is joined)."""
    for width in range(MIN_WIDTH, 201):
        rows = wrap(MESSAGE, width, pad) + wrap(FAILED, width, pad)
        assert unwrap(rows) == [MESSAGE, FAILED], width


def test_nothing_to_unwrap():
    assert not is_wrapped([]) and unwrap([]) == [] and unwrap(["", " "]) == ["", " "]


@pytest.mark.parametrize("plugin", [True, False])
def test_a_missing_network_plugin_is_named_beside_the_first_collective(tmp_path, plugin):
    """NCCL 2.19+'s `NET/Plugin: Could not find: libnccl-net.so` (src/plugin/plugin_open.cc), and its
    twin without it."""
    missing = "gpu1:2:3 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."
    lines = ([missing] if plugin else []) + [work(r, pg=f"[PG 0 Rank {r}] ") for r in (0, 1)]
    [first] = [f for f in findings_of(tmp_path, lines) if f.rule == "hang-first-collective"]
    assert ("no network plugin found" in first.detail) is plugin


def test_communicator_lines_kept_up_to_their_bound():
    from ncclprobe.evidence.hang.job_log import MAX_COMMS

    line = "h:1:2 [0] NCCL INFO comm 0x{c:x} rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x1 - Init COMPLETE"
    log = parse_job_log("\n".join(line.format(c=c + 1) for c in range(1030)))
    assert len(log.nccl_comms) == MAX_COMMS == 1024


def test_read_lines_count_what_was_read():
    """The vLLM paste: five watchdog lines read; NCCL's Init COMPLETE is not a watchdog line. The
    axolotl paste, unwrapped to 3 lines: rank 1's status and rank 0's `Some NCCL operations have
    failed or timed out` read, the dump's preparation line not."""
    log = parse_job_log(
        (UNSEEN / "vllm_tp4_vision_first_allreduce_never_completed_vllm8978.log").read_text()
    )
    assert (log.lines, log.read_lines) == (6, 5)
    name = "axolotl_fsdp2_terminal_wrapped_dump_signal_enqueued855_completed12_axolotl3476.log"
    log = parse_job_log((UNSEEN / name).read_text())
    assert (log.lines, log.read_lines, log.failure_lines.total) == (3, 2, 0)


@pytest.mark.parametrize(("status_seq", "named"), [(5, "3"), (6, None), (4, None)])
def test_an_unnamed_timeout_takes_only_its_own_status_lines_group(status_seq, named):
    timeout = work(0, seq=5).replace("[rank0]:", "")
    status = (
        f"[PG 3 Rank 0] Exception (either an error or timeout) detected by watchdog at work: {status_seq}, "
        f"last enqueued NCCL work: {status_seq}, last completed NCCL work: 4."
    )
    log = parse_job_log(f"{timeout}\n{status}")
    assert [t.group for t in log.timeouts] == [named]


@pytest.mark.parametrize(
    ("path", "rank"), [("run/attempt_0/3/stderr.log", 3), ("run/3/train.log", None)]
)
def test_a_folder_number_is_a_rank_only_for_torchruns_own_files(path, rank):
    gloo = "RuntimeError: [pair.cc:534] Timed out waiting 5000ms for recv operation to complete"
    assert parse_job_log(gloo, path).gloo_timeouts == ({rank: 5000} if rank is not None else {})


@pytest.mark.parametrize(("short", "wrapped"), [(7, True), (8, False)])
def test_the_share_of_full_rows_at_its_boundary(short, wrapped):
    """3 rows at the width among 10 (30 %, MIN_SHARE) is the shape; among 11 it is not."""
    assert is_wrapped(["x" * 100] * 3 + ["short"] * short) is wrapped


@pytest.mark.parametrize(("short", "removed"), [(0, True), (1, False)])
def test_position_counters_only_in_a_padded_pane(short, removed):
    """9 of 10 rows at the width (PADDED_SHARE) is a pane: its `[N/M]` is tmux's; 9 of 11 is not,
    and a trailing `[7/904]` is then the text's own."""
    rows = [f"[rank0]: {'x' * 80}[7/904]"] * 9 + ["[rank0]: end"] + ["[rank1]: x"] * short
    assert ("/904" not in "".join(unwrap(rows))) is removed


def test_the_ranks_own_nccl_logs_name_the_network_too(tmp_path):
    """--nccl-log beside --log: the network NCCL's own log names (a real 2-node EFA run)."""
    job = tmp_path / "job.log"
    job.write_text("\n".join(work(r, pg=f"[PG 0 Rank {r}] ") for r in (0, 1)) + "\n")
    nccl = FIX / "nccl_logs" / "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log"
    found = diagnose(load_evidence(logs=[job], nccl_logs=[nccl])).findings
    [first] = [f for f in found if f.rule == "hang-first-collective"]
    assert "network AWS Libfabric" in first.detail


def test_status_only_words(tmp_path):
    """A group without its description is `PG N`; ranks in order, an unnamed one last; nobody's
    `Some NCCL operations` said where none printed it."""
    status = (
        "[PG 3 Rank {r}] Exception (either an error or timeout) detected by watchdog at work: 5, "
        "last enqueued NCCL work: 5, last completed NCCL work: 4."
    )
    bare = "Exception (either an error or timeout) detected by watchdog at work: 5, last enqueued NCCL work: 5, last completed NCCL work: 4."
    [found] = [
        f
        for f in findings_of(tmp_path, [status.format(r=2), bare, status.format(r=0)])
        if f.title.startswith("a collective")
    ]
    assert (
        found.title.index("rank 0 (PG 3)")
        < found.title.index("rank 2 (PG 3)")
        < found.title.index("rank ?")
    )
    assert "said some NCCL operations" not in found.title


def test_the_first_collective_without_status_lines_says_none_before_it(tmp_path):
    [first] = [
        f
        for f in findings_of(
            tmp_path, [work(10, op="COALESCED", n=UINT64_MAX, pg="[PG 6 Rank 1] ")]
        )
        if f.rule == "hang-first-collective"
    ]
    assert "last completed work none before #1" in first.detail
