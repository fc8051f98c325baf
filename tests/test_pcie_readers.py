"""P2P evidence readers against real published outputs (facts read by eye from each file), and the
findings they lead to; bad input is one UsageProblem naming the line."""

from pathlib import Path

import pytest

from ncclprobe.diagnose.p2p.findings import matrix_findings
from ncclprobe.diagnose.p2p.nccl_model import model_disagreements
from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.nccl.nccl_xml import read_graphs, read_topology
from ncclprobe.evidence.node.collect_env import parse_collect_env
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.evidence.node.nvbandwidth import parse_nvbandwidth
from ncclprobe.evidence.node.p2p_test_output import parse_p2p_test

FIX = Path(__file__).parent / "fixtures"


def text(sub, name, header=False):
    t = (FIX / sub / name).read_text()
    return t.split("\n", 2)[2] if header else t


P2P = {  # file -> (gpus, matrices, refused pairs i<j, (title part, i, j, value))
    "p2p_2x_rtx2080ti_pix_cannot_access_autodl.txt": (
        2,
        8,
        [(0, 1)],
        ("Unidirectional P2P=Disabled", 0, 1, 5.71),
    ),
    "p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt": (
        4,
        8,
        [(0, 2), (0, 3), (1, 2), (1, 3)],
        ("Bidirectional P2P=Enabled", 2, 3, 517.45),
    ),
    "p2p_8x_titan_rtx_p2p_read_cannot_access_gpu_micro.txt": (
        8,
        11,
        "all",
        ("(P2P Reads) Matrix (GB/s)", 4, 5, 10.01),
    ),
    "p2p_16x_v100_sxm3_dgx2_p2p_read_gpu_micro.txt": (
        16,
        11,
        [],
        ("P2P=Disabled Latency Matrix (us) (CPU", 0, 1, 24.71),
    ),
}


@pytest.mark.parametrize("name", sorted(P2P))
def test_p2p_bandwidth_latency_test_outputs(name):
    gpus, count, refused, (title, i, j, value) = P2P[name]
    out = parse_p2p_test(text("p2p", name))
    assert len(out.devices) == gpus and len(out.matrices) == count
    assert all(len(m.rows) == gpus for m in out.matrices)
    cell = next(m for m in out.matrices if title in m.source)
    assert cell.values[i][j] == value
    found = {
        (a, b) for a in range(gpus) for b in range(a + 1, gpus) if out.peer_access[a][b] is False
    }
    assert found == (
        {(a, b) for a in range(gpus) for b in range(a + 1, gpus)}
        if refused == "all"
        else set(refused)
    )
    codes = [f.code for f in matrix_findings(out.matrices, out.peer_access)]
    assert ("peer-access-refused" in codes) == bool(refused)


def test_p2p_read_and_cpu_timer_blocks_are_their_own_matrices():
    out = parse_p2p_test(text("p2p", "p2p_8x_titan_rtx_p2p_read_cannot_access_gpu_micro.txt"))
    labels = [m.label for m in out.matrices]
    assert (
        "bandwidth uni P2P=enabled ce read" in labels
        and "latency uni P2P=enabled ce read gpu timer" in labels
    )
    cpu = next(m for m in out.matrices if m.label == "latency uni P2P=disabled ce cpu timer")
    assert cpu.values[0][1] == 25.82 and out.devices[7]["pci_bus_id"] == "0000:b2:00.0"


def test_p2p_cut_inside_a_matrix_is_read_as_far_as_it_goes():
    """A paste cut at the end of the file inside a matrix: its complete rows read, the rest left
    empty, and a note naming where it ends; a matrix broken in the middle of the file is refused."""
    lines = text("p2p", "p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt").splitlines()
    title = "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"
    cut = lines[: lines.index(title) + 3]
    out = parse_p2p_test("\n".join(cut))
    assert f"the output is cut: it ends at line {len(cut)}, inside '{title}' (1 of 4 rows read" in (
        " ".join(out.notes)
    )
    [partial] = [m for m in out.matrices if m.source.endswith("(cut after row 0)")]
    assert partial.values[0] == [float(v) for v in cut[-1].split()[1:]]
    assert partial.values[1:] == [[None] * 4] * 3 and partial.square
    broken = lines[: lines.index(title) + 3] + lines[lines.index(title) + 4 :]
    with pytest.raises(UsageProblem, match=r"cut short or malformed at line \d+: expected row 1"):
        parse_p2p_test("\n".join(broken))
    complete = parse_p2p_test("\n".join(cut[:-3]))
    assert "no Bidirectional P2P=Disabled Bandwidth;" in complete.notes[0]


def test_p2p_matrix_of_another_size_is_refused():
    t = text("p2p", "p2p_2x_rtx2080ti_pix_cannot_access_autodl.txt")
    t = t.replace(
        "Device: 1, NVIDIA GeForce RTX 2080 Ti", "Device: 1, NVIDIA GeForce RTX 2080 Ti", 1
    )
    t = t.replace(
        "Device=1 CANNOT Access Peer Device=0\n",
        "Device=1 CANNOT Access Peer Device=0\nDevice: 2, X, pciBusID: 1, pciDeviceID: 0, pciDomainID:0\n",
    )
    with pytest.raises(UsageProblem, match="inconsistent sizes"):
        parse_p2p_test(t)
    with pytest.raises(UsageProblem, match="no p2pBandwidthLatencyTest matrix, device list"):
        parse_p2p_test("[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n")
    listed = parse_p2p_test(
        "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\nDevice: 0, X, pciBusID: 1, pciDeviceID: 0, pciDomainID:0\n"
    )  # the device list alone: read, nothing measured
    assert (
        listed.matrices == []
        and (
            "no bandwidth or latency matrix in the file: no bandwidth measured (the output ends "
            "before the first matrix)"
        )
        in listed.notes
    )


def _titan():
    out = parse_p2p_test(text("p2p", "p2p_8x_titan_rtx_p2p_read_cannot_access_gpu_micro.txt"))
    on = next(m for m in out.matrices if m.label == "bandwidth uni P2P=enabled ce write")
    off = next(m for m in out.matrices if m.label == "bandwidth uni P2P=disabled ce")
    return out, on, off


def test_findings_fire_on_their_case_and_not_on_the_healthy_twin():
    out, on, off = _titan()
    can = [[True] * 8 for _ in range(8)]
    assert [f.code for f in matrix_findings([on, off], can)] == []  # the real, healthy matrices
    values = [r[:] for r in on.values]
    values[2][5] = 3.0  # one pair far below, one way only
    sick = Matrix(
        metric="bandwidth",
        rows=on.rows,
        cols=on.cols,
        values=values,
        peer_access="enabled",
        engine="ce",
        access="write",
        source="edited copy",
    )
    found = {
        f.code: f
        for f in matrix_findings(
            [sick, off], can, where=lambda i, j: "PCIe switch above 0000:3d:00.0"
        )
    }
    assert set(found) == {"slow-pair", "asymmetric-pair", "p2p-slower-than-staged"}
    assert "GPU2->GPU5 (crosses PCIe switch above 0000:3d:00.0)" in found["slow-pair"].message
    refused = [[i == j for j in range(8)] for i in range(8)]  # peer refused: no staged comparison
    assert "p2p-slower-than-staged" not in {f.code for f in matrix_findings([sick, off], refused)}


def test_latency_outlier():
    out = parse_p2p_test(text("p2p", "p2p_16x_v100_sxm3_dgx2_p2p_read_gpu_micro.txt"))
    lat = next(m for m in out.matrices if m.label == "latency uni P2P=enabled ce write gpu timer")
    assert not [f for f in matrix_findings([lat]) if f.code == "latency-outlier"]
    values = [r[:] for r in lat.values]
    values[3][9] = 40.0
    edited = Matrix(
        metric="latency", rows=lat.rows, cols=lat.cols, values=values, timer="gpu", source="edited"
    )
    assert [f.pairs for f in matrix_findings([edited]) if f.code == "latency-outlier"] == [
        ((3, 9),)
    ]


def test_nvbandwidth_text_and_json():
    v10 = parse_nvbandwidth(
        text("nvbandwidth", "nvbandwidth_v0.10_2gpu_h2d_d2h_d2d_read_azurehpc.txt")
    )
    h2d, d2h, d2d = v10.matrices
    assert (h2d.rows, h2d.cols, h2d.values) == (["CPU"], ["GPU0", "GPU1"], [[26.03, 25.94]])
    assert (d2h.rows, d2h.cols, d2h.values) == (["GPU0", "GPU1"], ["CPU"], [[25.97], [26.0]])
    assert (
        d2d.values == [[None, 276.19], [276.07, None]] and d2d.access == "read"
    )  # transposed: rows send
    full = parse_nvbandwidth(
        text("nvbandwidth", "nvbandwidth_v0.5_1gpu_json_full_dcgm.json", header=True)
    )
    noisy = parse_nvbandwidth(
        text("nvbandwidth", "nvbandwidth_v0.5_1gpu_json_with_warning_lines_dcgm.txt")
    )
    assert [m.to_record() for m in full.matrices] == [m.to_record() for m in noisy.matrices]
    assert len(full.matrices) == 15 and len(full.skipped) == 17 and full.version == "v0.5"
    latency = next(m for m in full.matrices if m.metric == "latency")
    assert latency.values == [[pytest.approx(0.649879)]]
    cut = parse_nvbandwidth(
        text("nvbandwidth", "nvbandwidth_v0.8_6x_a6000_d2d_read_ellipsis_nvbw50.txt")
    )
    assert (
        cut.matrices[0].extra["test"] == "device_to_device_memcpy_read_ce"
        and cut.matrices[0].values[3][0] == 21.82
    )


def test_nvbandwidth_bad_input():
    json_text = text("nvbandwidth", "nvbandwidth_v0.5_1gpu_json_full_dcgm.json", header=True)
    with pytest.raises(UsageProblem, match="malformed or cut short"):
        parse_nvbandwidth(json_text[: len(json_text) // 2])
    lines = text("nvbandwidth", "nvbandwidth_v0.10_2gpu_h2d_d2h_d2d_read_azurehpc.txt").splitlines()
    with pytest.raises(UsageProblem, match="no rows after the header"):
        parse_nvbandwidth("\n".join(lines[:5]))


def test_nccl_topology_and_graph_dumps():
    topo = read_topology(
        text("nccl_xml", "azure_ncv4_4x_a100_pcie_nvlink_pairs_topo.xml", header=True)
    )
    assert [g.busid for g in topo.gpus] == [
        "0001:00:00.0",
        "0002:00:00.0",
        "0003:00:00.0",
        "0004:00:00.0",
    ]
    assert (
        topo.gpus[0].nvlinks == [{"target": "0001:00:00.0", "count": 12}] and topo.gpus[0].sm == 80
    )
    assert "own bus id" in topo.notes[0]  # as Azure ships it: each GPU's NVLink names itself
    assert topo.gpus[0].assumed_pci_gbps == (12.0, True) and "fallback" in topo.notes[1]
    graphs = read_graphs(
        text("nccl_xml", "azure_ncv4_4x_a100_pcie_nvlink_pairs_graph.xml", header=True)
    )
    assert [(g.algorithm, g.nchannels, g.type_intra) for g in graphs] == [
        ("ring", 2, "SYS"),
        ("balanced tree", 4, "SYS"),
        ("collnet chain", 4, "SYS"),
    ]
    h200 = read_graphs(
        text("nccl_xml", "h200_1gpu_1rank_nccl2.28.9_graph.xml")
    )  # as NCCL wrote it, no header
    assert {g.id: g.algorithm for g in h200} == {
        0: "ring",
        1: "tree",
        2: "collnet chain",
        3: "nvls",
        4: "collnet direct",
    }  # id 1 and id 2 both have pattern 3
    assert graphs[0].channels == [[0, 1, 2, 3], [0, 3, 2, 1]]
    handwritten = read_topology(text("nccl_xml", "azure_ndv5_8x_h100_topo.xml", header=True))
    assert len(handwritten.gpus) == 8 and handwritten.gpus[0].assumed_pci_gbps == (48.0, False)
    h2d = Matrix(
        metric="bandwidth",
        rows=["CPU"],
        cols=["GPU0", "GPU1", "GPU2", "GPU3"],
        values=[[24.1, 12.2, 12.0, 11.9]],
    )
    assert model_disagreements(topo, graphs, [h2d]) == [
        "GPU0: NCCL assumes 12 GB/s for its PCIe link (no speed x0, fallback), host->device measured 24.1 GB/s"
    ]


def test_nccl_xml_refuses_entities_and_cut_dumps():
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><system>&b;</system>'
    with pytest.raises(UsageProblem, match="refused unread"):
        read_topology(bomb)
    graph = text("nccl_xml", "azure_ncv4_4x_a100_pcie_nvlink_pairs_graph.xml", header=True)
    with pytest.raises(UsageProblem, match="not well-formed"):
        read_graphs(graph[:300])
    with pytest.raises(UsageProblem, match="nchannels=3 but holds 2"):
        read_graphs(graph.replace('nchannels="2"', 'nchannels="3"', 1))


def test_collect_env_readers():
    vllm = parse_collect_env(
        text("collect_env", "vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt")
    )
    assert (
        vllm.tool == "vllm collect-env"
        and vllm.versions["vLLM Version"] == "0.6.3.post2.dev308+gb489fc3c"
    )
    assert vllm.nccl_version == "2.21.5" and vllm.env["CUDA_MODULE_LOADING"] == "LAZY"
    assert (
        vllm.nccl_settings == {}
        and vllm.topology.summary["gpu_count"] == 8
        and vllm.topology.nics == ["NIC0"]
    )
    assert any("not of the serving workers" in n for n in vllm.notes)
    sgl = parse_collect_env(text("collect_env", "sglang_check_env_8x_h20_nv18_8nic_issue24966.txt"))
    assert sgl.tool == "sglang check_env" and sgl.versions["sglang"] == "0.0.0.dev1+ge55646ff8"
    assert sgl.topology.nic_devices["NIC7"] == "mlx5_8" and sgl.topology.gpu_links[0][7] == "NV18"
    rocm = parse_collect_env(
        text("collect_env", "vllm_0.6.4_collect_env_8x_mi300x_rocm_smi_topology_dstack.txt")
    )
    assert rocm.topology is None and "rocm-smi" in rocm.notes[0]
    with pytest.raises(UsageProblem, match="not collect-env"):
        parse_collect_env("hello\nworld\n")


def test_p2p_slower_everywhere_advises_disable_and_a_mentioned_flag_is_no_command_line():
    """NVIDIA/nccl#814: every peer-enabled copy is below the staged one; the paste says `# Without --sm_copy`."""
    from ncclprobe.diagnose.p2p.advice import advise

    out = parse_p2p_test(text("p2p", "p2p_6gpu_p2p_writes_reads_slower_than_staged_nccl814.txt"))
    assert [m.label for m in out.matrices] == [
        "bandwidth uni P2P=disabled ce",
        "bandwidth uni P2P=enabled ce write",
        "bandwidth uni P2P=enabled ce read",
    ]
    assert out.matrices[2].values[5][2] == 10.46 and "not a command line" in out.notes[-1]
    findings = matrix_findings(out.matrices, out.peer_access)
    slow = next(f for f in findings if f.code == "p2p-slower-than-staged")
    assert len(slow.pairs) == 30
    assert [a.setting for a in advise(findings, [])] == [{"NCCL_P2P_DISABLE": "1"}]
    ran = parse_p2p_test(
        "$ ./p2pBandwidthLatencyTest --sm_copy\n"
        + text("p2p", "p2p_6gpu_p2p_writes_reads_slower_than_staged_nccl814.txt")
    )
    assert [m.engine for m in ran.matrices] == [
        "ce",
        "sm",
        "sm",
    ]  # P2P=Disabled stays a cudaMemcpyPeer


def test_p2p_cut_after_a_matrix_reads_what_is_there_and_advises_nothing():
    from ncclprobe.diagnose.p2p.advice import advise

    out = parse_p2p_test(
        text("p2p", "p2p_2x_rtx4090_tinygrad_driver_cut_after_third_matrix_tg44.txt")
    )
    assert (
        len(out.matrices) == 3
        and out.matrices[1].values[0][1] == 6.60
        and out.peer_access == [[True, True]] * 2
    )
    assert "no Bidirectional P2P=Enabled Bandwidth;" in out.notes[0]
    [advice] = advise(matrix_findings(out.matrices, out.peer_access), [])
    assert advice.action == "nothing to change" and "nothing readable" not in advice.reason


def test_nvbandwidth_other_versions_and_pastes():
    from ncclprobe.importing import ImportOptions, import_text

    v02 = import_text(
        text("nvbandwidth", "nvbandwidth_v0.2_8x_rtx4090_h2d_d2h_no_bus_ids_nvbw15.txt"),
        ImportOptions("f"),
    )
    assert (
        v02.document["version"] == "v0.2"
        and v02.sections[0].title == "nvbandwidth: 2 matrices, 8 GPU(s)"
    )
    h2d, d2h = (Matrix.from_record(r) for r in v02.document["matrices"])
    assert (
        h2d.rows == ["CPU"]
        and h2d.values[0][7] == 26.31
        and d2h.cols == ["CPU"]
        and d2h.values[4][0] == 27.10
    )
    quoted = import_text(
        text("nvbandwidth", "nvbandwidth_8x_h100_h2d_d2h_sm_quoted_no_indent_nvbw24.txt"),
        ImportOptions("f"),
    )
    assert (
        quoted is not None and quoted.kind == "nvbandwidth"
    )  # no banner: the description lines say it
    assert [m["engine"] for m in quoted.document["matrices"]] == ["sm", "sm"] and quoted.document[
        "matrices"
    ][1]["values"][2] == [52.77]


def test_nvbandwidth_wrong_data_is_an_error_finding_and_a_waived_run_says_why():
    from ncclprobe.importing import ImportOptions, import_text
    from ncclprobe.verdict import Verdict

    bad = import_text(
        text("nvbandwidth", "nvbandwidth_v0.7_8x_a100_d2d_read_pattern_check_assert_nvbw34.txt"),
        ImportOptions("f"),
    )
    assert bad.verdict() is Verdict.FINDINGS and bad.document["corrupt"][0]["offset"] == 11136
    assert [f["code"] for f in bad.document["findings"]] == ["copy-corrupt"]
    assert bad.document["advice"][0]["setting"] == {"NCCL_P2P_DISABLE": "1"}
    host = text(
        "nvbandwidth", "nvbandwidth_v0.7_8x_a100_d2d_read_pattern_check_assert_nvbw34.txt"
    ).replace("Running device_to_device_memcpy_read_ce", "Running host_to_device_memcpy_ce")
    assert [a["setting"] for a in import_text(host, ImportOptions("f")).document["advice"]] == [
        {}
    ]  # not P2P: no P2P setting
    with pytest.raises(
        UsageProblem, match="every test was waived: device_to_device_memcpy_write_ce"
    ):
        parse_nvbandwidth(
            text("nvbandwidth", "nvbandwidth_v0.2_2x_rtx2080ti_d2d_write_waived_nvbw13.txt")
        )


def test_collect_env_sectioned_format_of_newer_vllm():
    new = parse_collect_env(
        text("collect_env", "vllm_0.8.5_collect_env_2x_nv12_8nic_sectioned_issue19607.txt")
    )
    assert (
        new.versions == {"vLLM Version": "0.8.5.post1"} and new.topology.gpu_links[0][1] == "NV12"
    )
    assert new.topology.summary["nic_count"] == 8
    tabs = parse_collect_env(
        text("collect_env", "vllm_dev_collect_env_8x_nv18_tabs_issue22372.txt")
    )
    assert "ROCM Version" not in tabs.versions  # `Could not collect` is no version
    assert tabs.topology.summary["gpu_count"] == 8 and tabs.topology.summary["numa_nodes"] == [
        "0",
        "1",
    ]
