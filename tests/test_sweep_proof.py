"""Proof that a setting took effect, read from real NCCL logs (fixtures) and worker environments."""

from pathlib import Path

import pytest

from ncclprobe.nccl.logged_reads import verdict_for
from ncclprobe.sweep.proof import GLOO_VERDICT, prove

pytest.importorskip("ncclprobe.evidence.nccl.nccl_log")

LOGS = (
    Path(__file__).parent / "fixtures" / "nccl_logs"
)  # copied from the shared fixtures (INDEX.md)
H200_ONE_RANK = (
    LOGS / "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log"
)  # PROTO=LL, ALGO=Ring, P2P_LEVEL=SYS set
L40S_NET = LOGS / "nccl_2.27.3_l40s_g6e48xlarge_4pod_net_libfabric_p2plevel_nvl.log"


def _seen(settings):
    return {0: dict(settings), 1: dict(settings)}


def test_one_rank_h200_reads_p2p_level_but_never_the_protocol():
    text = H200_ONE_RANK.read_text()
    settings = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    status, reason, proof = prove(
        settings, sorted(settings), _seen(settings), "nccl", {0: (text, text)}
    )
    assert proof["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    assert proof["verdicts"]["NCCL_PROTO"].startswith("ignored: NCCL did not report")
    assert status == "ignored" and "NCCL_PROTO=LL" in reason
    assert proof["set_by_environment"]["NCCL_P2P_LEVEL"] == "SYS"


def test_protocol_tokens_compare_case_insensitively_as_nccl_does():
    text = L40S_NET.read_text()
    settings = {"NCCL_P2P_LEVEL": "NVL", "NCCL_PROTO": "Simple"}
    status, reason, proof = prove(
        settings, sorted(settings), _seen(settings), "nccl", {0: (text, text)}
    )
    assert status == "ok", reason
    assert proof["verdicts"] == {"NCCL_P2P_LEVEL": "applied", "NCCL_PROTO": "applied"}


def test_per_communicator_settings_must_be_read_during_their_own_configuration():
    text = L40S_NET.read_text()
    cut = text.index("NCCL_PROTO set by environment")
    cut = text.rindex("\n", 0, cut) + 1
    # the process read NCCL_PROTO earlier, but not while this configuration's communicator was built
    settings = {"NCCL_P2P_LEVEL": "NVL", "NCCL_PROTO": "Simple"}
    status, _, proof = prove(
        settings, sorted(settings), _seen(settings), "nccl", {0: (text[:cut], "")}
    )
    assert (
        proof["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    )  # once per process: the whole log counts
    assert proof["verdicts"]["NCCL_PROTO"].startswith("ignored")
    assert status == "ignored"


def test_a_different_value_is_not_proof():
    assert verdict_for("NCCL_PROTO", "LL", "LL128") == "ignored: NCCL reported 'LL128', not 'LL'"
    assert verdict_for("NCCL_P2P_LEVEL", "2", "PXB") == "applied"  # legacy integer, normalised name
    assert verdict_for("NCCL_BUFFSIZE", "8388608", "8388608") == "applied"
    assert verdict_for("NCCL_ALGO", "Ring", None).startswith("ignored")


def test_gloo_checks_only_the_environment_and_says_nccl_is_not_involved():
    settings = {"NCCL_PROTO": "LL"}
    status, reason, proof = prove(settings, ["NCCL_ALGO", "NCCL_PROTO"], _seen(settings), "gloo")
    assert status == "ok" and reason is None
    assert proof["verdicts"] == {"NCCL_PROTO": GLOO_VERDICT} and proof["env_matches"]


def test_a_worker_with_the_wrong_environment_is_an_error():
    seen = {0: {"NCCL_PROTO": "LL"}, 1: {"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree"}}
    status, reason, proof = prove({"NCCL_PROTO": "LL"}, ["NCCL_ALGO", "NCCL_PROTO"], seen, "gloo")
    assert status == "error"
    assert "rank 1 saw NCCL_ALGO='Tree'" in reason
    assert not proof["env_matches"]


def test_an_nccl_pool_turns_worker_reports_and_its_real_log_into_records(tmp_path):
    """What a one-GPU pool reports, replayed against the real H200 log it would have written."""
    from ncclprobe.nccl.recipes import rank_log
    from ncclprobe.records import read_results
    from ncclprobe.records_writer import ResultWriter
    from ncclprobe.sweep.plan import Config, Pool, SweepSpec
    from ncclprobe.sweep.run import PoolRun, Recorder

    log_bytes = H200_ONE_RANK.read_bytes()
    rank_log(tmp_path, 0).write_bytes(log_bytes)
    settings = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    spec = SweepSpec(
        grid={k: (v,) for k, v in settings.items()},
        sizes=(4096,),
        in_place=(True,),
        nranks=1,
        backend="nccl",
    )
    messages = [
        {
            "rank": 0,
            "kind": "config-start",
            "config_id": Config(settings).config_id,
            "log_offset": 0,
            "t": 1.0,
            "seen_env": {**settings, "NCCL_DEBUG": "INFO"},
        },
        {
            "rank": 0,
            "kind": "result",
            "config_id": Config(settings).config_id,
            "collective": "all_reduce",
            "op": "sum",
            "dtype": "float32",
            "mode": "eager",
            "in_place": True,
            "size_bytes": 4096,
            "count": 1024,
            "wrong": 0,
            "trial_us": [20.0, 18.0, 19.0],
            "iter_us": [20.0, 18.0, 19.0],
            "issue_us": [5.0, 5.0, 5.0],
            "t": 2.0,
        },
        {
            "rank": 0,
            "kind": "config-end",
            "config_id": Config(settings).config_id,
            "log_offset": len(log_bytes),
            "t": 3.0,
        },
    ]
    with ResultWriter(tmp_path / "r.jsonl", {"kind": "sweep"}) as writer:
        PoolRun(
            spec,
            Pool(Config(settings).process_settings, [Config(settings)]),
            index=0,
            log_dir=tmp_path,
            recorder=Recorder(writer),
        ).replay(messages)
    results = read_results(tmp_path / "r.jsonl")
    config, result = results.configs[0], results.results[0]
    assert config["status"] == "ignored" and config["results_expected"] == 1
    assert config["proof"]["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    assert config["proof"]["nccl_version"] == "2.28.9"
    assert result.status == "ignored" and result.time_us == 19.0 and result.busbw_gbps == 0.0


EXCL_LL = (
    LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
)  # NCCL_PROTO=^LL read
DEFAULTS = (
    LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log"
)  # no NCCL_PROTO line
SHM_PAIR = LOGS / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log"  # both ranks via SHM
LINE = "host:7:7 [0] NCCL INFO {} set by environment to {}\n"


def test_a_configuration_is_proven_only_by_its_own_lines():
    """In one pool the configuration before this one read NCCL_PROTO=^LL: that read is no proof for
    this one (the H200 --share-gpu results once showed NCCL_PROTO=LL for a configuration that never
    set it), while a once-per-process variable read earlier still holds."""
    earlier, mine = EXCL_LL.read_text(), DEFAULTS.read_text()
    whole = earlier + mine
    _, _, proof = prove({}, ["NCCL_PROTO"], _seen({}), "nccl", {0: (whole, mine)})
    assert "NCCL_PROTO" not in proof["set_by_environment"]
    assert proof["set_by_environment"]["NCCL_NVLS_ENABLE"] == "0"  # once per process
    status, reason, proof = prove(
        {"NCCL_PROTO": "^LL"},
        ["NCCL_PROTO"],
        _seen({"NCCL_PROTO": "^LL"}),
        "nccl",
        {0: (whole, mine)},
    )
    assert status == "ignored" and proof["proven"]["NCCL_PROTO"].startswith("not read")


def test_every_ranks_log_counts_and_a_rank_that_disagrees_is_named():
    text = EXCL_LL.read_text()
    settings = {"NCCL_PROTO": "^LL"}
    quiet = text.replace("NCCL_PROTO set by environment to ^LL", "NCCL_PROTO was not logged here")
    status, reason, proof = prove(
        settings, ["NCCL_PROTO"], _seen(settings), "nccl", {0: (text, text), 1: (quiet, quiet)}
    )
    assert status == "ignored" and "rank 1" in reason
    assert proof["rank_disagreements"] == [
        "NCCL_PROTO: rank 1: NCCL did not report reading it (no `set by "
        "environment` line), while rank 0 read it"
    ]
    assert (
        proof["read_by_rank"]["0"]["NCCL_PROTO"] == "^LL"
        and "NCCL_PROTO" not in proof["read_by_rank"]["1"]
    )
    status, _, proof = prove(
        settings, ["NCCL_PROTO"], _seen(settings), "nccl", {0: (text, text), 1: (text, text)}
    )
    assert status == "ok" and proof["proven"]["NCCL_PROTO"].startswith(
        "read and chosen: read by ranks 0,1"
    )


@pytest.mark.parametrize(
    "planted,value,status,proven",
    [
        (
            "NCCL_SHM_DISABLE",
            "1",
            "ignored",
            "read, not chosen",
        ),  # read, yet every connection is SHM
        ("NCCL_P2P_DISABLE", "1", "ok", "read and chosen"),  # read, and no connection is P2P
    ],
)
def test_disabled_transports_are_checked_against_every_connection_line(
    planted, value, status, proven
):
    text = LINE.format(planted, value) + SHM_PAIR.read_text()
    settings = {planted: value}
    got, _, proof = prove(settings, [planted], {0: settings}, "nccl", {0: (text, text)})
    assert got == status and proof["proven"][planted].startswith(proven)
    assert "via SHM" in proof["chosen"][planted]["evidence"]


def test_p2p_disable_as_nccl_logs_it_in_each_version():
    version = "host:7:7 [0] NCCL INFO NCCL version {}+cuda12.4\n"
    settings = {"NCCL_P2P_DISABLE": "1"}
    old = version.format("2.22.3") + LINE.format(
        "NCCL_P2P_LEVEL", "LOC"
    )  # before 2.23 it shows as a level
    assert prove(settings, [], {0: settings}, "nccl", {0: (old, old)})[0] == "ok"
    new = version.format("2.28.9") + LINE.format(
        "NCCL_P2P_LEVEL", "LOC"
    )  # 2.23+ prints its own line
    assert prove(settings, [], {0: settings}, "nccl", {0: (new, new)})[0] == "ignored"
    status, reason, proof = prove({"NCCL_P2P_DISABLE": "0"}, [], {0: {}}, "nccl", {0: (new, new)})
    assert (
        status == "ok" and reason is None
    )  # NCCL never logs 0: nothing to confirm, nothing contradicted
    assert proof["proven"]["NCCL_P2P_DISABLE"].startswith(
        "not observable here: NCCL logs NCCL_P2P_DISABLE only when it is 1"
    )


def test_one_rank_reads_the_p2p_level_but_its_choice_is_not_observable():
    text = H200_ONE_RANK.read_text()
    settings = {"NCCL_P2P_LEVEL": "SYS"}
    status, _, proof = prove(settings, sorted(settings), {0: settings}, "nccl", {0: (text, text)})
    assert status == "ok"
    assert proof["proven"]["NCCL_P2P_LEVEL"].startswith(
        "read: read by rank 0; its choice is not observable here"
    )


def test_the_sweeps_notes_word_each_setting_as_proven():
    from ncclprobe.sweep.table import proof_notes

    text, one_rank = EXCL_LL.read_text(), H200_ONE_RANK.read_text()
    configs = []
    for settings, logs in (
        ({"NCCL_PROTO": "^LL"}, {0: (text, text)}),
        ({"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}, {0: (one_rank, one_rank)}),
    ):
        status, _, proof = prove(settings, sorted(settings), {0: settings}, "nccl", logs)
        configs.append({"config_id": "x", "settings": settings, "status": status, "proof": proof})
    assert proof_notes(configs, "nccl") == [
        "proof x: NCCL_PROTO=^LL read and chosen",
        "proof x: NCCL_P2P_LEVEL=SYS read (its choice is not observable here); NCCL_PROTO=LL not read",
    ]
    gloo = [
        {
            "config_id": "x",
            "settings": {"NCCL_PROTO": "LL"},
            "proof": prove({"NCCL_PROTO": "LL"}, ["NCCL_PROTO"], {0: {"NCCL_PROTO": "LL"}}, "gloo")[
                2
            ],
        }
    ]
    assert "nothing NCCL read or chose is observable here" in proof_notes(gloo, "gloo")[0]
