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
from ncclprobe.evidence.node.collect_env import load_collect_env

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
    # the same GPU model is no proof of one box: not ruled out where no host name is compared
    assert "machines" not in [r.rule for r in same.ruled_out]
    [unproven] = [n for n in same.not_checked if n.rule == "machines"]
    assert unproven.missing == (
        "the NCCL logs: GeForce RTX 5090, compute capability 12.0, host GENOA-06; the vllm "
        "collect-env text: GeForce RTX 5090, compute capability 12.0, 8 GPU(s): no disagreement "
        "found between the inputs (nothing here identifies the host; a host name in each input "
        "would)"
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


# ---- what each source says (evidence.machines) ---------------------------------------------------

L40S_4 = FIXTURES / "nccl_logs" / "nccl_2.27.3_4x_l40s_g6e48xlarge_1pod_shm.log"
TWO_NODES = FIXTURES / "nccl_logs" / "nccl_2.22.3_2node_16x_h100_p5_efa_ofi_tuner_mpirun_tagged.log"
TWO_GPU_ENV = (
    FIXTURES / "collect_env" / "vllm_0.8.5_collect_env_2x_nv12_8nic_sectioned_issue19607.txt"
)
H200_PROFILE = (
    FIXTURES / "profiles" / "nccl_2.28.9_h200_2ranks_1gpu_hostid_allreduce_eager_then_graph.json.gz"
)


def test_the_views_of_the_readme_bundle_are_each_sources_own():
    ev = load_evidence(server_logs=[VLLM_LOG], collect_env=H100_ENV, nccl_logs=[RTX5090_LOG])
    assert ev.machines == [
        MachineView(
            source="the NCCL logs",
            gpu_models=("GeForce RTX 5090",),
            capabilities=(120,),
            gpus_at_least=2,  # cudaDev 0 and 1
            hosts=("GENOA-06",),
            nccl="2.25.1",
        ),
        MachineView(
            source="the vllm collect-env text",
            gpu_models=("H100 80GB HBM3",),
            capabilities=(90,),
            gpus=8,
            nccl="2.21.5",
        ),
    ]
    assert load_evidence(nccl_logs=[RTX5090_LOG]).machines == []  # one source: nothing to compare


def test_a_gpu_beyond_the_other_machines_count_disagrees():
    """4 ranks on cudaDev 0-3 of one host against a collect-env of 2 GPUs (its GPUs unnamed)."""
    result = diagnose(load_evidence(collect_env=TWO_GPU_ENV, nccl_logs=[L40S_4]))
    assert result.findings[0].title == (
        "the inputs describe different machines: GPU 3 used (the NCCL logs) on a machine of 2 "
        "GPU(s) (the vllm collect-env text)"
    )
    assert "Their NCCL differs too" not in result.findings[0].detail  # collect-env names none


def test_a_log_of_several_hosts_says_no_count_of_one_machine():
    """mpirun's tagged output of two nodes: which host a cudaDev is on is not read, so no count."""
    ev = load_evidence(collect_env=TWO_GPU_ENV, nccl_logs=[TWO_NODES])
    [logs] = [v for v in ev.machines if v.source == "the NCCL logs"] or [None]
    assert logs is None or logs.gpus_at_least is None
    result = diagnose(ev)
    assert "machines" not in [x.rule for x in result.findings + result.not_checked]


def test_the_profiles_gpus_and_the_runs_own_record_are_views_too():
    from ncclprobe.evidence.bundle import RUN_NODE, Evidence
    from ncclprobe.evidence.machines import machine_views
    from ncclprobe.nccl.node import NodeFacts

    ev = load_evidence(profiles=[H200_PROFILE], collect_env=TWO_GPU_ENV)
    assert ev.machines[-1] == MachineView(
        source="the profiles", gpu_models=("H200",), capabilities=(90,)
    )
    assert load_evidence(profiles=[H200_PROFILE]).machines == []
    record = NodeFacts(compute_capabilities=(86, 86))
    both = Evidence(node=record, node_source=RUN_NODE, collect_env=ev.collect_env)
    assert machine_views(both) == [
        MachineView(source="the vllm collect-env text", gpus=2),
        MachineView(source="the run's own record", capabilities=(86,)),
    ]
    # a node that is the collect-env's own topology is no second source
    assert (
        machine_views(Evidence(node=record, node_source="collect-env", collect_env=ev.collect_env))
        == []
    )


def test_capabilities_are_said_major_dot_minor_and_equal_releases_are_not_named():
    found = disagreements([_view("A", capabilities=(86,)), _view("B", capabilities=(90,))])
    assert found == ["GPU compute capability 8.6 (A) against 9.0 (B)"]
    from ncclprobe.diagnose.rules_machines import machines
    from ncclprobe.evidence.bundle import Evidence

    views = [_view("A", capabilities=(86,), nccl="2.27.3"), _view("B", capabilities=(90,))]
    [alone] = machines(Evidence(machines=views))
    assert "Their NCCL differs too" not in alone.detail  # one release named: nothing differs
    views.append(_view("C", capabilities=(90,), nccl="2.27.3"))
    assert "Their NCCL differs too" not in machines(Evidence(machines=views))[0].detail
    views.append(_view("D", capabilities=(90,), nccl="2.28.9"))
    assert "Their NCCL differs too: 2.27.3 (A), 2.27.3 (C), 2.28.9 (D)." in (
        machines(Evidence(machines=views))[0].detail
    )


# ---- NCCL logs of several machines (one view per host) ----------------------------------------

H200_LOG = FIXTURES / "nccl_logs" / "nccl_2.28.9_h200_2ranks_1gpu_hostid_p2p_level_lowercase.log"
H200_LOG_2 = FIXTURES / "nccl_logs" / "nccl_2.28.9_h200_2ranks_1gpu_hostid_proto_excl_ll_tuning.log"


def test_nccl_logs_of_two_hosts_are_two_machines_and_no_row_joins_them():
    """GENOA-06's 2x RTX 5090 on 2.25.1 and vm's H200 on 2.28.9: two machines, and 2.28.9 is not
    matched against the 5090s' sm120 (the H200 log names no GPU of its own)."""
    result = diagnose(load_evidence(nccl_logs=[RTX5090_LOG, H200_LOG]))
    first = result.findings[0]
    assert first.rule == "machines" and first.title == (
        "the inputs describe different machines: NCCL 2.25.1 (the NCCL logs of GENOA-06) against "
        "2.28.9 (the NCCL logs of vm)"
    )
    assert "NCCL differs too" not in first.detail  # the disagreement itself, said once
    bad = [f for f in result.findings if f.rule == "known-bad-nccl"]
    assert [f.evidence["version"] for f in bad] == ["2.25.1"]


def test_healthy_twin_logs_of_one_host_are_one_machine():
    result = diagnose(load_evidence(nccl_logs=[H200_LOG, H200_LOG_2]))
    assert "machines" not in [f.rule for f in result.findings]
    assert "machines" not in [n.rule for n in result.not_checked + result.ruled_out]


def test_healthy_twin_one_jobs_logs_of_two_hosts_are_not_different_machines(tmp_path):
    """The two-node job's log, split by host into one file per host: same release, no GPUs that
    differ; a job may span hosts, so the hosts alone are no disagreement."""
    lines = TWO_NODES.read_text().splitlines(keepends=True)
    hosts = sorted({h for h in (load_evidence(nccl_logs=[TWO_NODES]).nccl_logs[0].log.hosts)})
    assert len(hosts) == 2
    paths = []
    for host in hosts:
        path = tmp_path / f"{host}.log"
        path.write_text("".join(x for x in lines if host in x or x.startswith("#")))
        paths.append(path)
    ev = load_evidence(nccl_logs=paths)
    assert len(ev.machines) == 0 or disagreements(ev.machines) == []
    result = diagnose(ev)
    assert "machines" not in [x.rule for x in result.findings + result.not_checked]


def _one_h200_collect_env(path: Path) -> Path:
    """The dstack 8x H100 collect-env cut to one H200 (its GPU lines and topology matrix): a
    collect-env whose topology names no compute capability, only its GPU's name does."""
    lines = H100_ENV.read_text().splitlines()
    out, matrix = [], False
    for line in lines:
        if line.strip().startswith("GPU ") and ": NVIDIA H100" in line:
            if line.strip().startswith("GPU 0:"):
                out.append(line.replace("H100 80GB HBM3", "H200"))
            continue
        if line.strip().startswith("GPU0\tGPU1"):
            matrix = True
            out.append("    GPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
            continue
        if matrix and line.strip().startswith("GPU"):
            if line.strip().startswith("GPU0"):
                out.append("    GPU0\t X \tSYS\t0-103\t0\t\tN/A")
            continue
        matrix = False
        out.append(line)
    path.write_text("\n".join(out) + "\n")
    return path


def test_the_ll128_rule_takes_the_capability_another_source_of_one_machine_read(tmp_path):
    """One machine (an H200 collect-env, the H200 job's log and profile): the LL128 rule does not
    say the capability is unknown while the known-bad rule reads 9.0 from the same inputs."""
    env = _one_h200_collect_env(tmp_path / "ce_h200.txt")
    result = diagnose(
        load_evidence(collect_env=env, nccl_logs=[H200_LOG_2], profiles=[H200_PROFILE])
    )
    said = [f.title for f in result.findings] + [n.missing for n in result.not_checked]
    assert not [t for t in said if "compute capability is not known" in t], said
    [known_bad] = [r for r in result.ruled_out if r.rule == "known-bad-nccl"]
    assert "compute capability 9.0" in known_bad.reason


# ---- a ROCm collect-env's GPU on its key's own line ---------------------------------------------

MI300X_ENV = (
    FIXTURES / "collect_env" / "vllm_0.6.4_collect_env_8x_mi300x_rocm_smi_topology_dstack.txt"
)
MI300X_RCCL_LOG = FIXTURES / "nccl_logs" / "rccl_2.20.5_hip6.2_4x_mi300x_vf_quoted_rccl1728.log"


def test_a_rocm_collect_envs_gpu_line_is_read_and_an_rccl_job_is_not_asked_for_it():
    """ROCm's torch prints `GPU models and configuration: AMD Instinct MI300X (gfx942:...)` on one
    line; the RCCL job is then not asked for the collect-env it was given: the known-bad rows are
    NVIDIA NCCL's own failures."""
    assert load_collect_env(MI300X_ENV).gpu_names == ("AMD Instinct MI300X",)
    result = diagnose(load_evidence(nccl_logs=[MI300X_RCCL_LOG], collect_env=MI300X_ENV))
    assert "--collect-env" not in " ".join(n.missing for n in result.not_checked)
    [ruled] = [r for r in result.ruled_out if r.rule == "known-bad-nccl"]
    assert "RCCL" in ruled.reason and "NVIDIA NCCL's own failures" in ruled.reason


def test_healthy_twin_a_cuda_collect_envs_gpu_lines_are_read_as_before():
    names = load_collect_env(H100_ENV).gpu_names
    assert names == ("NVIDIA H100 80GB HBM3",)
