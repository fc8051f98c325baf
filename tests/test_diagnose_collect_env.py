"""diagnose --collect-env (issue 20): a real `vllm collect-env` text as evidence beside a real server log:
its NCCL settings are linted as the collecting shell's, its topology stands in for the run's GPUs."""

import json
from pathlib import Path

from click.testing import CliRunner

from ncclprobe.cli import cli

FIX = Path(__file__).parent / "fixtures"
LOG = str(FIX / "server_logs/vllm_0.10_v1_specdecoding_throughput_pr24127.log")
COLLECT = FIX / "collect_env/vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"


def _diagnose(*args):
    return CliRunner().invoke(cli, ["diagnose", "--server-log", LOG, *args, "--format", "json"])


def test_a_bad_setting_in_collect_env_is_a_finding_of_the_collecting_shell(tmp_path):
    collected = tmp_path / "collect_env.txt"
    collected.write_text(
        COLLECT.read_text() + "    NCCL_P2P_LEVEL=sys\n"
    )  # as a shell that exported it prints it
    result = _diagnose("--collect-env", str(collected))
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    [finding] = [f for f in doc["findings"] if f["rule"] == "unsafe-settings"]
    assert (
        finding["evidence"]["variable"] == "NCCL_P2P_LEVEL"
        and "collecting shell" in finding["evidence"]["run"]
    )
    assert sum("not of the serving workers" in n for n in doc["notes"]) == 1


def test_a_clean_collect_env_adds_no_finding_and_its_image_version_is_no_setting():
    plain = json.loads(_diagnose().stdout)
    with_env = _diagnose("--collect-env", str(COLLECT))  # NCCL_VERSION=2.19.3 describes the image
    assert with_env.exit_code == 0, with_env.output
    doc = json.loads(with_env.stdout)
    # its NCCL 2.21.5 falls in the cuMem row, which needs CUDA graphs of collectives the text
    # cannot show: said as information (nccl.known_bad), nothing else added
    added = [f for f in doc["findings"] if f["rule"] == "known-bad-nccl"]
    assert [(f["severity"], f["evidence"]["row"]) for f in added] == [
        ("info", "cumem-graph-memory")
    ]
    rest = [f["rule"] for f in doc["findings"] if f["rule"] != "known-bad-nccl"]
    assert rest == [f["rule"] for f in plain["findings"]]
    assert any("not of the serving workers" in n for n in doc["notes"])


def test_collect_env_alone_or_not_collect_env_is_one_line_and_exit_2():
    alone = CliRunner().invoke(cli, ["diagnose", "--collect-env", str(COLLECT)])
    assert alone.exit_code == 2 and "knobs --lint --collect-env" in alone.stderr
    wrong = _diagnose("--collect-env", LOG)
    assert (
        wrong.exit_code == 2
        and len(wrong.stderr.strip().splitlines()) == 1
        and "Traceback" not in wrong.output
    )
