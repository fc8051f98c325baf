"""nccl-log's report on real logs: its title says whose NCCL, which version and from where, the ranks
and processes; the WARN lines no known failure explains are one error; tuning lines merge by choice."""

from pathlib import Path

from ncclprobe.diagnose.settings.nccl_log import nccl_log_report, tuning_summary
from ncclprobe.evidence.bundle import Evidence
from ncclprobe.evidence.nccl.nccl_log import parse_nccl_log, parse_nccl_log_files
from ncclprobe.gather.settings import log_settings

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"


def _report(name: str):
    log = parse_nccl_log_files([LOGS / name])
    return nccl_log_report(Evidence(nccl_log=log, settings=log_settings(log)), [name])


def _title(report) -> str:
    return report.sections[0].title


def test_the_title_names_the_library_its_version_and_where_the_version_came_from():
    rccl = _title(_report("rccl_2.21.5_4x_mi50_socket_rccltests163.log"))
    assert rccl.startswith("RCCL 2.21.5-HEAD:9a0e6a1 (ROCm's NCCL; its number is the NCCL release")
    vllm = _title(_report("vllm_is_using_nccl_2.20.5_lines_run_together_vllm12292.log"))
    assert vllm.startswith("NCCL 2.20.5 (from ") and "(from banner)" not in vllm
    nccl = _title(_report("nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"))
    assert nccl.startswith("NCCL 2.28.9, 2 ranks, 1 process(es)") and "(from" not in nccl


def test_a_log_without_its_version_or_ranks_says_so():
    log = parse_nccl_log("host:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL\n")
    report = nccl_log_report(Evidence(nccl_log=log, settings=log_settings(log)), ["x.log"])
    assert _title(report).startswith("NCCL (version not logged), ? ranks, 1 process(es)")


def test_unexplained_warn_lines_are_one_error_quoting_the_first_three():
    lines = "".join(f"host:1:1 [0] NCCL WARN odd thing {i}\n" for i in range(5))
    log = parse_nccl_log("host:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n" + lines)
    report = nccl_log_report(Evidence(nccl_log=log, settings=log_settings(log)), ["x.log"])
    [warn] = [f for f in report.findings if f.rule == "nccl-warn"]
    assert warn.severity == "error" and warn.title.startswith("NCCL printed 5 WARN line(s)")
    assert warn.detail.count("odd thing") == 3 and "odd thing 2" in warn.detail
    assert report.verdict().name == "FINDINGS"


def test_tuning_lines_merge_by_collective_and_choice():
    log = parse_nccl_log_files(
        [LOGS / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"]
    )
    assert tuning_summary(log) == [
        "AllReduce RING/LL128 1K..64K (2 calls)",
        "AllReduce RING/SIMPLE 4M..64M (2 calls)",
    ]
