"""Inputs of different machines (`evidence.machines`, `diagnose.rules_machines`): said first, in
one finding, and never joined. The README's block: a vLLM log, an 8x H100 collect-env and a
2x RTX 5090 NCCL log (nccl-tests#287), three unrelated real files; its twin makes the collect-env
the 5090 box's (its GPU lines renamed), where the joins stand as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.diagnose import diagnose, load_evidence
from ncclprobe.diagnose.rules_machines import disagreements
from ncclprobe.evidence.machines import MachineView

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_LOG = FIXTURES / "server_logs" / "vllm_0.22_mtp_spec_decoding_dgx_spark.log"
H100_ENV = FIXTURES / "collect_env" / "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt"
RTX5090_LOG = FIXTURES / "nccl_logs" / "nccl_2.25.1_2x_rtx5090_pcie_shm_genoa.log"


@pytest.fixture(scope="module")
def mixed():
    return diagnose(
        load_evidence(server_logs=[VLLM_LOG], collect_env=H100_ENV, nccl_logs=[RTX5090_LOG])
    )


@pytest.fixture(scope="module")
def same(tmp_path_factory):
    env = tmp_path_factory.mktemp("env") / "collect_env_5090.txt"
    env.write_text(H100_ENV.read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 5090"))
    return diagnose(load_evidence(server_logs=[VLLM_LOG], collect_env=env, nccl_logs=[RTX5090_LOG]))


def test_different_machines_are_said_first_in_one_finding(mixed):
    first = mixed.findings[0]
    assert first.rule == "machines" and first.severity == "error"
    assert first.title == (
        "the inputs describe different machines: GPU compute capability 12.0 (the NCCL logs) "
        "against 9.0 (the vllm collect-env text)"
    )
    assert (
        "Their NCCL differs too: 2.25.1 (the NCCL logs), 2.21.5 (the vllm collect-env text)."
        in (first.detail)
    )
    assert [f.rule for f in mixed.findings].count("machines") == 1


def test_no_fact_of_one_machine_is_joined_with_anothers(mixed):
    titles = [f.title for f in mixed.findings]
    assert not [t for t in titles if "NVLink" in t]  # the H100s' NVLink is not the 5090s'
    [transport] = [f for f in mixed.findings if f.rule == "nccl-transport"]
    assert transport.severity == "warning" and transport.evidence["node"] is None
    assert not [f for f in mixed.findings if f.rule == "nccl-version"]  # no "another library"
    [bad] = [f for f in mixed.findings if f.rule == "known-bad-nccl"]
    assert (bad.evidence["row"], bad.evidence["capabilities"]) == ("sm120-shared-memory", [120])
    [unjoined] = [n for n in mixed.not_checked if n.rule == "nccl-settings-read"] or [None]
    assert unjoined is None or "describes another" in unjoined.missing


def test_a_known_bad_row_applies_to_the_release_the_job_ran_only(mixed, same):
    """collect-env's NCCL 2.21.5 (its shell's) is not the job's 2.25.1: its cuMem row is named for
    neither bundle; alone, the collect-env's release is all there is and its row stands."""
    for result in (mixed, same):
        assert "cumem-graph-memory" not in [
            f.evidence.get("row") for f in result.findings if f.rule == "known-bad-nccl"
        ]
    alone = diagnose(load_evidence(server_logs=[VLLM_LOG], collect_env=H100_ENV))
    assert "cumem-graph-memory" in [
        f.evidence.get("row") for f in alone.findings if f.rule == "known-bad-nccl"
    ]


def test_the_healthy_twin_of_one_machine_joins_as_before(same):
    assert "machines" not in [f.rule for f in same.findings]
    [ruled] = [r for r in same.ruled_out if r.rule == "machines"]
    assert ruled.reason == (
        "the NCCL logs: GeForce RTX 5090, compute capability 12.0; the vllm collect-env text: "
        "GeForce RTX 5090, compute capability 12.0, 8 GPU(s): nothing disagrees"
    )
    [transport] = [f for f in same.findings if f.rule == "nccl-transport"]
    assert transport.title.endswith("although the GPUs have NVLink")  # its own topology, joined
    assert [f.title for f in same.findings if f.rule == "nccl-version"] == [
        "the job's NCCL is 2.25.1, not the 2.21.5 vllm collect-env reports"
    ]


def _view(source, **facts):
    return MachineView(source=source, **facts)


def test_each_disagreement_at_its_boundary():
    a, b = "A", "B"
    assert disagreements([_view(a, capabilities=(90,)), _view(b, capabilities=(90, 120))]) == []
    assert disagreements([_view(a, capabilities=(90,)), _view(b, capabilities=(120,))]) == [
        "GPU compute capability 9.0 (A) against 12.0 (B)"
    ]
    assert disagreements([_view(a, gpu_models=("L40S",)), _view(b, gpu_models=("A100",))]) == [
        "GPUs L40S (A) against A100 (B)"
    ]
    assert disagreements([_view(a, gpu_models=("L40S",)), _view(b, gpu_models=("L40S",))]) == []
    assert disagreements([_view(a, gpus_at_least=8), _view(b, gpus=8)]) == []
    assert disagreements([_view(a, gpus=8), _view(b, gpus_at_least=9)]) == [
        "GPU 8 used (B) on a machine of 8 GPU(s) (A)"
    ]
    assert disagreements([_view(a, hosts=("n1", "n2")), _view(b, hosts=("n2",))]) == []
    assert disagreements([_view(a, hosts=("n1",)), _view(b, hosts=("n3",))]) == [
        "hosts n1 against n3"
    ]
    # NCCL releases alone may differ on one machine (another library): no disagreement
    assert disagreements([_view(a, nccl="2.21.5", gpus=8), _view(b, nccl="2.25.1", gpus=8)]) == []
    # a fact one side does not say is never compared
    assert disagreements([_view(a, capabilities=(90,)), _view(b, gpus=2)]) == []
