"""diagnose --nccl-log beside a slow run (issue 30): real NCCL debug logs of a job's ranks with a real
SGLang or vLLM server log (or a profile): what each rank's NCCL read, its version, the transports it
connected the ranks with, and its WARN lines placed against the decode steps the server logged.
Every rule has its healthy twin; the time placement is pinned at both ends of the logged span."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.evidence.nccl.nccl_rank_logs import RankNcclLog

FIX = Path(__file__).parent / "fixtures"
LOGS = FIX / "nccl_logs"
SGLANG = FIX / "server_logs/sglang_decode_comma_graph_false_above_capture_pr13023.log"
VLLM = FIX / "server_logs/vllm_0.22_mtp_spec_decoding_dgx_spark.log"
PROFILE = FIX / "profiles/nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
COLLECT = FIX / "collect_env/vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
SHM = LOGS / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log"  # no P2P, 5 WARN lines without times
P2P = LOGS / "nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log"  # P2P, no WARN
NET_4POD = LOGS / "nccl_2.27.3_l40s_g6e48xlarge_4pod_net_libfabric_p2plevel_nvl.log"
BOGUS = LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_unknown_token.log"  # WARN at 09:42:01
EXCL_LL = LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"
LOWER = LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log"


def _diagnose(*args):
    result = CliRunner().invoke(cli, ["diagnose", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _of(doc, rule):
    found = [f for f in doc["findings"] if f["rule"] == rule]
    cleared = [r for r in doc["ruled_out"] if r["rule"] == rule]
    unchecked = [n for n in doc["not_checked"] if n["rule"] == rule]
    return found, cleared, unchecked


def test_the_bundle_holds_each_ranks_log_typed():
    ev = load_evidence(server_logs=[SGLANG], nccl_logs=[SHM, P2P])
    assert all(isinstance(log, RankNcclLog) for log in ev.nccl_logs)
    assert [log.log.nccl_version for log in ev.nccl_logs] == ["2.25.1", "2.22.3"]
    assert ev.nccl_logs[0].log.transports == {"SHM": 4}
    assert ev.inputs["nccl_log"] == [str(SHM), str(P2P)]


def test_shm_between_the_ranks_of_one_node_is_a_finding_and_p2p_its_healthy_twin():
    found, _, _ = _of(
        _diagnose("--server-log", str(SGLANG), "--nccl-log", str(SHM)), "nccl-transport"
    )
    [shm] = found
    assert shm["severity"] == "warning" and shm["confidence"] == "medium"  # P2P possible? not known
    assert "host memory (SHM), not P2P" in shm["title"] and shm["evidence"]["transports"] == {
        "SHM": 4
    }
    _, cleared, _ = _of(
        _diagnose("--server-log", str(SGLANG), "--nccl-log", str(P2P)), "nccl-transport"
    )
    assert cleared and "through P2P" in cleared[0]["reason"]


def _diagnose_the_5090_box(tmp_path) -> dict:
    """VLLM, SHM and COLLECT with its GPU lines the 5090 box's, so that it and SHM describe one
    machine (the real pair describes two, and is never joined: tests/test_machines.py)."""
    path = tmp_path / "collect_env_5090.txt"
    path.write_text(COLLECT.read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 5090"))
    return _diagnose("--server-log", str(VLLM), "--collect-env", str(path), "--nccl-log", str(SHM))


def test_shm_where_the_gpus_have_nvlink_is_an_error(tmp_path):
    """collect-env's topology (8 GPUs, NV18) is what the GPUs have; NCCL's log how it connected."""
    doc = _diagnose_the_5090_box(tmp_path)
    [shm], _, _ = _of(doc, "nccl-transport")
    assert (shm["severity"], shm["confidence"]) == ("error", "high")
    assert shm["title"].endswith("although the GPUs have NVLink")


def test_p2p_turned_off_by_what_nccl_read_is_named_as_the_cause(tmp_path):
    """The real SHM log with one line added in NCCL's own words (`%s set by environment to %lld.`)."""
    lines = SHM.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "NCCL INFO" in line)
    host_pid_tid_dev = lines[at].split(" NCCL INFO")[0]
    lines.insert(at + 1, f"{host_pid_tid_dev} NCCL INFO NCCL_P2P_DISABLE set by environment to 1.")
    edited = tmp_path / "nccl.log"
    edited.write_text("\n".join(lines) + "\n")
    [shm], _, _ = _of(
        _diagnose("--server-log", str(SGLANG), "--nccl-log", str(edited)), "nccl-transport"
    )
    assert shm["confidence"] == "high" and shm["evidence"]["p2p_off_read"] == {
        "NCCL_P2P_DISABLE": "1"
    }
    assert "NCCL read NCCL_P2P_DISABLE=1, which turns P2P off" in shm["detail"]


def test_ranks_on_several_nodes_without_p2p_are_not_judged():
    """The 4-pod log: NCCL counted 4 nodes of one rank each; whether they share a host is not in it."""
    _, _, [unchecked] = _of(
        _diagnose("--server-log", str(SGLANG), "--nccl-log", str(NET_4POD)), "nccl-transport"
    )
    assert "4 nodes" in unchecked["missing"]
    # two ranks sharing the H200 with distinct NCCL_HOSTID: two nodes to NCCL, over NET/Socket
    _, _, [two] = _of(
        _diagnose("--server-log", str(SGLANG), "--nccl-log", str(EXCL_LL)), "nccl-transport"
    )
    assert "2 nodes" in two["missing"] and "NET 4" in two["missing"]


def test_different_nccl_versions_on_the_ranks_are_an_error_and_one_version_is_ruled_out():
    doc = _diagnose("--server-log", str(SGLANG), "--nccl-log", str(SHM), "--nccl-log", str(BOGUS))
    [mixed], _, _ = _of(doc, "nccl-version")
    assert (mixed["severity"], mixed["confidence"]) == ("error", "high")
    assert "2.25.1, 2.28.9" in mixed["title"]
    doc = _diagnose(
        "--server-log", str(SGLANG), "--nccl-log", str(BOGUS), "--nccl-log", str(EXCL_LL)
    )
    found, cleared, _ = _of(doc, "nccl-version")
    assert not found and "reports NCCL 2.28.9" in cleared[0]["reason"]


def test_a_job_nccl_other_than_collect_envs_is_a_warning(tmp_path):
    """collect-env's shell has nvidia-nccl 2.21.5 (pip); the job's log, on the same machine, says
    2.25.1."""
    doc = _diagnose_the_5090_box(tmp_path)
    [other], _, _ = _of(doc, "nccl-version")
    assert (other["severity"], other["confidence"]) == ("warning", "medium")
    assert other["evidence"] == {
        "job": "2.25.1",
        "collect_env": "2.21.5",
    }


def test_a_shell_setting_no_rank_read_is_an_error_and_one_every_rank_read_is_ruled_out(tmp_path):
    """The 4-pod log's NCCL read NCCL_P2P_LEVEL=NVL and NCCL_PROTO=simple (aws-ofi-nccl sets it);
    a shell that exported NCCL_P2P_LEVEL=NVL and NCCL_ALGO=Ring prints them as collect-env does."""
    collected = tmp_path / "collect_env.txt"
    collected.write_text(COLLECT.read_text() + "    NCCL_P2P_LEVEL=NVL\n    NCCL_ALGO=Ring\n")
    doc = _diagnose(
        "--server-log", str(VLLM), "--collect-env", str(collected), "--nccl-log", str(NET_4POD)
    )
    found, _, _ = _of(doc, "nccl-settings-read")
    errors = [f for f in found if f["severity"] == "error"]
    assert [f["evidence"]["variable"] for f in errors] == ["NCCL_ALGO"]
    assert (
        errors[0]["evidence"]["not_read_by"] == ["rank 0"] and errors[0]["confidence"] == "medium"
    )
    assert errors[0]["title"].endswith("but NCCL on rank 0 did not read it")
    [elsewhere] = [f for f in found if f["severity"] == "info"]
    assert elsewhere["confidence"] == "high"  # the logs say what NCCL read
    assert elsewhere["evidence"]["read"] == {
        "NCCL_PROTO": {"rank 0": "simple"},
        "NCCL_SOCKET_IFNAME": {"rank 0": "^docker0,lo"},
    }
    assert doc["findings"][0]["rule"] == "nccl-settings-read"  # the run did not run what was asked
    only_level = tmp_path / "level.txt"
    only_level.write_text(COLLECT.read_text() + "    NCCL_P2P_LEVEL=NVL\n")
    doc = _diagnose(
        "--server-log", str(VLLM), "--collect-env", str(only_level), "--nccl-log", str(NET_4POD)
    )
    found, cleared, _ = _of(doc, "nccl-settings-read")
    assert not [f for f in found if f["severity"] == "error"]
    assert "read NCCL_P2P_LEVEL=NVL" in cleared[0]["reason"]


def test_a_silently_ignored_value_is_caught_by_the_settings_read_rule(tmp_path):
    """NCCL_P2P_LEVEL=sys (lower case) is ignored without a word (recorded on the H200): the shell
    has it, the rank's log lists what NCCL read, and it is not there."""
    collected = tmp_path / "collect_env.txt"
    collected.write_text(COLLECT.read_text() + "    NCCL_P2P_LEVEL=sys\n")
    doc = _diagnose(
        "--server-log", str(VLLM), "--collect-env", str(collected), "--nccl-log", str(LOWER)
    )
    found, _, _ = _of(doc, "nccl-settings-read")
    assert [f["evidence"]["variable"] for f in found if f["severity"] == "error"] == [
        "NCCL_P2P_LEVEL"
    ]


def test_what_each_rank_read_is_linted_with_the_other_environments():
    doc = _diagnose("--server-log", str(SGLANG), "--nccl-log", str(BOGUS))
    [bad] = [
        f
        for f in doc["findings"]
        if f["rule"] == "unsafe-settings" and f["evidence"]["variable"] == "NCCL_PROTO"
    ]
    assert bad["evidence"]["found_in"] == ["NCCL log rank 0"] and bad["severity"] == "error"
    clean = _diagnose("--server-log", str(SGLANG), "--nccl-log", str(P2P))
    assert not [f for f in clean["findings"] if f["rule"] == "unsafe-settings"]


def _shifted(tmp_path, day: str, first: str, last: str) -> Path:
    """The real SGLang log with its decode lines re-stamped (hand-edited: only the times change) so
    that they fall on the day the NCCL log was recorded; `first`/`last` the first and last times."""
    lines = [line for line in SGLANG.read_text().splitlines() if line.startswith("[")]
    stamps = [first] + [first] * (len(lines) - 2) + [last]
    out = tmp_path / "sglang.log"
    out.write_text(
        "\n".join(f"[{day} {t}]" + line.split("]", 1)[1] for t, line in zip(stamps, lines)) + "\n"
    )
    return out


@pytest.mark.parametrize(
    "first,last,where,confidence",
    [
        ("09:42:01", "09:43:00", "while", "medium"),  # the WARN at the first logged step
        ("09:41:00", "09:42:01", "while", "medium"),  # ... at the last one
        ("09:42:02", "09:43:00", "before", "low"),  # a second before the first: start-up
        ("09:41:00", "09:42:00", "after", "low"),
    ],
)
def test_a_timestamped_warn_is_placed_against_the_decode_steps(
    tmp_path, first, last, where, confidence
):
    log = _shifted(tmp_path, "2026-11-29", first, last)
    doc = _diagnose("--server-log", str(log), "--nccl-log", str(BOGUS))
    [warn], _, _ = _of(doc, "nccl-warn")
    assert warn["severity"] == "warning" and warn["evidence"]["times"] == ["2026-11-29 09:42:01"]
    assert warn["evidence"]["relative_to_run"][0].startswith(where)
    assert warn["confidence"] == confidence


def test_warns_without_a_clock_say_so_and_a_log_without_warn_rules_them_out():
    doc = _diagnose("--server-log", str(SGLANG), "--nccl-log", str(SHM))
    [warn], _, _ = _of(doc, "nccl-warn")
    assert len(warn["evidence"]["warnings"]) == 5 and warn["evidence"]["times"] == [None] * 5
    assert "not observable here: NCCL stamps WARN lines from 2.26 on" in warn["detail"]
    real_dates = _diagnose("--server-log", str(SGLANG), "--nccl-log", str(BOGUS))  # 2025 vs 2026
    [warn], _, _ = _of(real_dates, "nccl-warn")
    assert warn["evidence"]["relative_to_run"][0].startswith("after the last decode step")
    _, cleared, _ = _of(_diagnose("--server-log", str(SGLANG), "--nccl-log", str(P2P)), "nccl-warn")
    assert cleared and "has a WARN line" in cleared[0]["reason"]


def test_a_profile_has_no_wall_clock_to_place_a_warn_against():
    result = diagnose(load_evidence(profiles=[PROFILE], nccl_logs=[BOGUS]))
    [warn] = [f for f in result.findings if f.rule == "nccl-warn"]
    assert warn.evidence["relative_to_run"] == [""] and "carries no wall clock" in warn.detail


def test_vllm_times_take_the_year_of_the_warn(tmp_path):
    """vLLM's lines name month and day only: the real log re-stamped (hand-edited, only the times)
    to the NCCL log's day places the WARN inside its span."""
    lines = [line for line in VLLM.read_text().splitlines() if line.startswith("(")]
    restamped = [
        line.replace(" 06-01 ", " 11-29 ").replace("22:00:52", "09:41:00") for line in lines
    ]
    restamped = [line.replace("22:14:32", "09:43:00") for line in restamped]
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(restamped) + "\n")
    ev = load_evidence(server_logs=[log], nccl_logs=[BOGUS])
    assert ev.runs[0].log["logged_span"]["first"] == "11-29 09:41:00"
    [warn] = [f for f in diagnose(ev).findings if f.rule == "nccl-warn"]
    assert warn.evidence["relative_to_run"][0].startswith("while vllm.log logged decode steps")


def test_vllm_times_of_another_day_are_after_the_warn():
    ev = load_evidence(server_logs=[VLLM], nccl_logs=[BOGUS])
    assert ev.runs[0].log["logged_span"] == {
        "first": "06-01 22:00:52",
        "last": "06-01 22:14:32",
        "lines": 5,
    }
    [warn] = [f for f in diagnose(ev).findings if f.rule == "nccl-warn"]
    assert warn.evidence["relative_to_run"][0].startswith("after the last decode step")


def test_nccl_log_alone_is_a_diagnosis_and_not_an_nccl_log_is_one_line_and_exit_2():
    """NCCL's logs alone are evidence of a job (issue 27: init, warnings, settings per rank); their
    warnings are not placed against a hang or a run that was never given."""
    alone = CliRunner().invoke(cli, ["diagnose", "--nccl-log", str(SHM), "--format", "json"])
    assert alone.exit_code == 1, alone.output
    [warn] = [f for f in json.loads(alone.stdout)["findings"] if f["rule"] == "nccl-warn"]
    assert "only NCCL's logs were given" in warn["detail"] and "watchdog" not in warn["detail"]
    wrong = CliRunner().invoke(
        cli, ["diagnose", "--server-log", str(SGLANG), "--nccl-log", str(VLLM)]
    )
    assert wrong.exit_code == 2 and len(wrong.stderr.strip().splitlines()) == 1
    assert "Traceback" not in wrong.output


def test_without_nccl_logs_nothing_changes():
    plain = _diagnose("--server-log", str(SGLANG))
    assert not [f for f in plain["findings"] + plain["ruled_out"] if f["rule"].startswith("nccl-")]
