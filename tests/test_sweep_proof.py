"""Proof that a setting took effect, read from real NCCL logs (fixtures) and worker environments."""

from pathlib import Path

import pytest

from ncclprobe.sweep.proof import GLOO_VERDICT, prove, verdict_for

pytest.importorskip("ncclprobe.evidence.nccl_log")

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"   # copied from the shared fixtures (INDEX.md)
H200_ONE_RANK = LOGS / "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log"   # PROTO=LL, ALGO=Ring, P2P_LEVEL=SYS set
L40S_NET = LOGS / "nccl_2.27.3_l40s_g6e48xlarge_4pod_net_libfabric_p2plevel_nvl.log"


def _seen(settings):
    return {0: dict(settings), 1: dict(settings)}


def test_one_rank_h200_reads_p2p_level_but_never_the_protocol():
    text = H200_ONE_RANK.read_text()
    settings = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    status, reason, proof = prove(settings, sorted(settings), _seen(settings), "nccl", {0: (text, text)})
    assert proof["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    assert proof["verdicts"]["NCCL_PROTO"].startswith("ignored: NCCL did not report")
    assert status == "ignored" and "NCCL_PROTO=LL" in reason
    assert proof["set_by_environment"]["NCCL_P2P_LEVEL"] == "SYS"


def test_protocol_tokens_compare_case_insensitively_as_nccl_does():
    text = L40S_NET.read_text()
    settings = {"NCCL_P2P_LEVEL": "NVL", "NCCL_PROTO": "Simple"}
    status, reason, proof = prove(settings, sorted(settings), _seen(settings), "nccl", {0: (text, text)})
    assert status == "ok", reason
    assert proof["verdicts"] == {"NCCL_P2P_LEVEL": "applied", "NCCL_PROTO": "applied"}


def test_per_communicator_settings_must_be_read_during_their_own_configuration():
    text = L40S_NET.read_text()
    cut = text.index("NCCL_PROTO set by environment")
    cut = text.rindex("\n", 0, cut) + 1
    # the process read NCCL_PROTO earlier, but not while this configuration's communicator was built
    settings = {"NCCL_P2P_LEVEL": "NVL", "NCCL_PROTO": "Simple"}
    status, _, proof = prove(settings, sorted(settings), _seen(settings), "nccl", {0: (text[:cut], "")})
    assert proof["verdicts"]["NCCL_P2P_LEVEL"] == "applied"      # once per process: the whole log counts
    assert proof["verdicts"]["NCCL_PROTO"].startswith("ignored")
    assert status == "ignored"


def test_a_different_value_is_not_proof():
    assert verdict_for("NCCL_PROTO", "LL", "LL128") == "ignored: NCCL reported 'LL128', not 'LL'"
    assert verdict_for("NCCL_P2P_LEVEL", "2", "PXB") == "applied"      # legacy integer, normalised name
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
    from ncclprobe.records import ResultWriter, read_results
    from ncclprobe.sweep.plan import Config, Pool, SweepSpec
    from ncclprobe.sweep.run import PoolRun, SweepStats

    log_bytes = H200_ONE_RANK.read_bytes()
    rank_log(tmp_path, 0).write_bytes(log_bytes)
    settings = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    spec = SweepSpec(grid={k: (v,) for k, v in settings.items()}, sizes=(4096,), in_place=(True,),
                     nranks=1, backend="nccl")
    messages = [
        {"rank": 0, "kind": "config-start", "config_id": Config(settings).config_id, "log_offset": 0, "t": 1.0,
         "seen_env": {**settings, "NCCL_DEBUG": "INFO"}},
        {"rank": 0, "kind": "result", "config_id": Config(settings).config_id, "collective": "all_reduce", "op": "sum",
         "dtype": "float32", "mode": "eager", "in_place": True, "size_bytes": 4096, "count": 1024, "wrong": 0,
         "trial_us": [20.0, 18.0, 19.0], "iter_us": [20.0, 18.0, 19.0], "issue_us": [5.0, 5.0, 5.0], "t": 2.0},
        {"rank": 0, "kind": "config-end", "config_id": Config(settings).config_id, "log_offset": len(log_bytes),
         "t": 3.0},
    ]
    with ResultWriter(tmp_path / "r.jsonl", {"kind": "sweep"}) as writer:
        PoolRun(spec, Pool(Config(settings).process_settings, [Config(settings)]), 0, tmp_path, writer,
                SweepStats(), None).replay(messages)
    results = read_results(tmp_path / "r.jsonl")
    config, result = results.configs[0], results.results[0]
    assert config["status"] == "ignored" and config["results_expected"] == 1
    assert config["proof"]["verdicts"]["NCCL_P2P_LEVEL"] == "applied"
    assert config["proof"]["nccl_version"] == "2.28.9"
    assert result["status"] == "ignored" and result["time_us"] == 19.0 and result["busbw_gbps"] == 0.0
