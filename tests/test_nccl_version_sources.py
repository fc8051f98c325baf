"""Which NCCL version wins when several pieces of evidence give one (issue 28 §4), pinned at a rule
that changes at 2.24.0 (the per-collective NCCL_PROTO form) so a wrong choice changes a verdict:

  - nccl-tests output: NCCL's own banner (`NCCL version 2.24.3+cuda12.2`) over the nccl-tests header's
    `nccl-library=` code;
  - `knobs --lint --collect-env`: `--nccl-version` over the collect-env text's version;
  - diagnose: each worker's own version, else the run's first worker's; a collect-env text's version
    is used for the collecting shell's settings only, never for the run's (what the code does now)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ncclprobe.evidence.nccl.nccl_tests import parse_nccl_tests
from ncclprobe.evidence.nccl.nccl_tests_run import nccl_version_of_code

COLLECT_ENV = (
    Path(__file__).parent
    / "fixtures"
    / "collect_env"
    / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
)  # says NCCL 2.21.5
# a real all_reduce_perf stdout (H200, NCCL 2.28.9: `nccl-library=22809`, no NCCL banner)
NCCL_TESTS = (
    Path(__file__).parent
    / "fixtures"
    / "nccl_tests"
    / "allreduce_1x_h200_1rank_nccltests2.19.6_eager_same_run.txt"
).read_text()
BANNER = "vm:1:1 [0] NCCL INFO NCCL version 2.24.3+cuda12.2\n"


def test_nccl_tests_take_nccls_banner_over_the_header_code():
    older = NCCL_TESTS.replace("nccl-library=22809", "nccl-library=22304")
    assert parse_nccl_tests(NCCL_TESTS).nccl_version == "2.28.9"
    assert parse_nccl_tests(older).nccl_version == "2.23.4"
    header = older.index("# nccl-tests version")
    with_banner = older[:header] + BANNER + older[header:]
    assert parse_nccl_tests(with_banner).nccl_version == "2.24.3"


def test_the_library_code_changes_form_at_2_9():
    assert nccl_version_of_code(20900) == "2.9.0" and nccl_version_of_code(2804) == "2.8.4"
    assert nccl_version_of_code(20899) is None and nccl_version_of_code(3000) is None


def test_knobs_lint_takes_the_flag_over_the_collect_env_version():
    from ncclprobe.cli import cli

    def lint(*flags):
        args = ["knobs", "--lint", "--collect-env", str(COLLECT_ENV), *flags, "--format", "json"]
        result = CliRunner().invoke(cli, args, env={"NCCL_PROTO": "allreduce:LL"})
        assert result.exit_code in (0, 1), result.output
        return json.loads(result.output)

    assert lint()["nccl_version"] == "2.21.5"
    assert lint("--nccl-version", "2.24.3")["nccl_version"] == "2.24.3"


def _trace(settings: dict, versions: list[str | None]) -> dict:
    run = {
        "label": "untuned",
        "mode": "baseline",
        "settings": settings,
        "workers": [{"rank": r, "nccl_version": v} for r, v in enumerate(versions)],
    }
    return {"config": {"backend": "nccl"}, "runs": [run]}


def _lint_codes(trace: dict, collect_env=None) -> set[str]:
    from ncclprobe.diagnose.settings.rules_safety import unsafe_settings
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.evidence.node.collect_env import parse_collect_env

    ev = Evidence.from_trace(trace)
    if collect_env is not None:
        ev.collect_env = parse_collect_env(collect_env.read_text())
    return {f.evidence.get("lint") for f in unsafe_settings(ev) if hasattr(f, "evidence")}


def test_diagnose_takes_the_runs_own_version_over_collect_env():
    per_collective = {"NCCL_PROTO": "allreduce:LL"}
    assert "per-collective-too-old" in _lint_codes(_trace(per_collective, ["2.23.4", "2.23.4"]))
    assert "per-collective-too-old" not in _lint_codes(_trace(per_collective, ["2.24.0"] * 2))
    # the run says 2.23.4: a collect-env text of another shell (2.21.5) does not change it
    assert "per-collective-too-old" in _lint_codes(
        _trace(per_collective, ["2.23.4", None]), COLLECT_ENV
    )
    # the run says nothing: the collect-env text's 2.21.5 does not stand in for the run's version
    assert "per-collective-too-old" not in _lint_codes(
        _trace(per_collective, [None, None]), COLLECT_ENV
    )
