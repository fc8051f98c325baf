"""The evidence commands end to end: knobs, topo --from, nccl-log, import; exit codes and one-line errors."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.records import read_results

FIXTURES = Path(__file__).parent / "fixtures"


def _invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="ncclprobe", env=env)


@pytest.mark.parametrize("command", ["knobs", "topo", "nccl-log", "import"])
def test_help_has_examples(command):
    result = _invoke(command, "--help")
    assert result.exit_code == 0 and "Examples:" in result.stdout


def test_knobs_table_and_one_variable():
    table = _invoke("knobs")
    assert (
        table.exit_code == 0
        and "NCCL_P2P_LEVEL" in table.stdout
        and "NCCL_TUNER_CONFIG_FILE" in table.stdout
    )
    doc = json.loads(_invoke("knobs", "p2p_level", "--format", "json").stdout)
    assert (
        doc["name"] == "NCCL_P2P_LEVEL"
        and doc["read"] == "process"
        and doc["case_sensitive"] is True
    )
    assert doc["schema_version"] == 1


def test_knobs_lint_exit_codes():
    pcie = str(Path(__file__).parent / "fixtures" / "topo" / "rtx5090_2gpu_phb_tabs.txt")
    bad = _invoke(
        "knobs",
        "--lint",
        "--topo",
        pcie,
        "--format",
        "json",
        env={"NCCL_PROTO": "^LL", "NCCL_P2P_LEVEL": "sys"},
    )
    assert bad.exit_code == 1
    codes = {f["code"] for f in json.loads(bad.stdout)["findings"]}
    assert codes == {"ll128-without-nvlink", "p2p-level-case"}
    good = _invoke("knobs", "--lint", env={"NCCL_PROTO": "LL,Simple", "NCCL_P2P_LEVEL": "SYS"})
    assert good.exit_code == 0


def test_knobs_lint_refuses_an_unreadable_version():
    result = _invoke(
        "knobs", "--lint", "--nccl-version", "latest"
    )  # would silently lint as "version unknown"
    assert result.exit_code == 2 and "'latest' is not a version" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_topo_from_file_json():
    result = _invoke(
        "topo", "--from", FIXTURES / "topo" / "dgx_a100_80g_8gpu_nv12_4nic.txt", "--format", "json"
    )
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["summary"]["gpu_count"] == 8 and doc["summary"]["nvlink"] is True
    assert doc["gpu_links"][3][6] == "NV12" and doc["nics"] == ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert [g["index"] for g in doc["gpus"]] == list(range(8)) and doc["gpus"][7][
        "numa_affinity"
    ] == "1"


def test_topo_table_groups_equivalent_levels():
    result = _invoke(
        "topo", "--from", FIXTURES / "topo" / "4gpu_pxb_pix_sys_tabs_no_legend_nccl667.txt"
    )
    assert result.exit_code == 0
    assert "# NCCL_P2P_LEVEL PXB/PHB: 2 P2P pair(s) 0-1 2-3" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
def test_live_topo_without_gpu_exits_3_naming_each_source():
    result = _invoke("topo", "--no-p2p-check", env={"PATH": "/nonexistent"})
    assert result.exit_code == 3
    assert "nvidia-smi missing" in result.stderr and "torch" in result.stderr


def test_nccl_log_json():
    log = FIXTURES / "nccl_logs" / "nccl_2.28.9_1x_h200_1rank_debug_subsys_all.log"
    result = _invoke("nccl-log", log, "--format", "json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert (
        doc["nccl_version"] == "2.28.9"
        and doc["env"] == {"NCCL_P2P_LEVEL": "SYS"}
        and doc["nranks"] == 1
    )
    assert doc["transports"] == {} and doc["warnings"] == [] and doc["lint"] == []


def test_nccl_log_several_files_and_warn_exit_1():
    logs = FIXTURES / "nccl_logs"
    result = _invoke(
        "nccl-log",
        logs / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log",
        logs / "nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log",
        "--format",
        "json",
    )
    assert result.exit_code == 1  # the 2.25.1 log has NCCL WARN lines
    doc = json.loads(result.stdout)
    assert doc["versions"] == ["2.25.1", "2.29.7"] and len(doc["tuning"]) == 72
    assert doc["tuning"][0] == {
        "collective": "Broadcast",
        "bytes": 1024,
        "algo": "RING",
        "proto": "LL",
        "channels": [0, 0],
        "predicted_time_us": None,
        "pid": 3038984,
    }


def test_nccl_log_table_summarises_tuning():
    result = _invoke(
        "nccl-log",
        FIXTURES / "nccl_logs" / "nccl_2.29.7dev_tuning_subsys_rtx5090_2ranks_1gpu_socket.log",
    )
    assert result.exit_code == 0
    assert "Broadcast RING/LL 1K..16K (23 calls)" in result.stdout
    assert "Broadcast RING/SIMPLE 32K..128M (49 calls)" in result.stdout


def test_import_json_and_output_file(tmp_path):
    source = FIXTURES / "nccl_tests" / "allreduce_8x_v100_sxm2_oci_bm_gpu3_8_single_size.txt"
    out = tmp_path / "imported.jsonl"
    result = _invoke("import", source, "--output", out, "--format", "json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["nranks"] == 8 and doc["avg_busbw_gbps"] == 135.455
    assert doc["rows"][0]["size_bytes"] == 1073741824
    assert doc["rows"][0]["out_of_place"] == {
        "time_us": 13867.0,
        "algbw_gbps": 77.43,
        "busbw_gbps": 135.5,
        "wrong": 0,
    }
    assert doc["rows"][0]["in_place"]["busbw_gbps"] == 135.41
    back = read_results(out)
    assert back.header["kind"] == "nccl-tests" and len(back.results) == 2
    assert {r.in_place for r in back.results} == {False, True} and back.results[0].settings == {}
    again = _invoke("import", source, "--output", out)
    assert again.exit_code == 2 and "never overwritten" in again.stderr


def test_import_collective_option_names_an_unnamed_run(tmp_path):
    log = FIXTURES / "nccl_logs" / "nccl_2.22.3_2x_a100_sxm64_nvlink_sendrecv_leonardo.log"
    out = tmp_path / "sr.jsonl"
    result = _invoke("import", log, "--collective", "sendrecv", "--output", out)
    assert result.exit_code == 0
    assert {r.collective for r in read_results(out).results} == {"sendrecv"}


@pytest.mark.parametrize("command", [["nccl-log"], ["import"], ["topo", "--from"]])
@pytest.mark.parametrize("content", ["", "just some text\nwith lines\n", "\x00\x01\x02binary"])
def test_malformed_or_empty_input_exits_2_with_one_line(tmp_path, command, content):
    path = tmp_path / "input.txt"
    path.write_bytes(content.encode())
    result = _invoke(*command, path)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncclprobe: error: ") and result.stdout == ""


@pytest.mark.parametrize("command", [["nccl-log"], ["import"], ["topo", "--from"]])
def test_missing_file_exits_2(tmp_path, command):
    result = _invoke(*command, tmp_path / "nope.txt")
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_topo_names_the_default_level_for_a_given_version():
    result = _invoke(
        "topo",
        "--from",
        FIXTURES / "topo" / "aws_g6e12xlarge_4x_l40s_node.txt",
        "--nccl-version",
        "2.27.3",
        "--format",
        "json",
    )
    doc = json.loads(result.stdout)
    assert (
        result.exit_code == 0 and doc["default_p2p_level"] == "PXB"
    )  # 4 GPUs: PXB whatever the CPU
    assert ["LOC", "NVL", "PIX", "PXB"] in doc[
        "equivalent_levels"
    ]  # NODE pairs: the default uses SHM
