"""Topology matrices pasted cut short, NVLink counts of every kind, and collect-env outputs of
platforms other than NVIDIA's (issue 36: a paste cut at any line; never read a MUSA or ROCm box as
an NVIDIA one). Inputs are the real fixtures of tests/fixtures/topo and collect_env, cut here at
every row."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.node.collect_env import parse_collect_env
from ncclprobe.evidence.node.topo import parse_topo

FIX = Path(__file__).parent / "fixtures"
NV_FIXTURES = {
    "aws_p5_8x_h100_nv18_no_nic_rows.txt": ["NV18"],
    "dgx_a100_80g_8gpu_nv12_4nic.txt": ["NV12"],
    "a100_sxm64_4gpu_nv4_4nic_leonardo.txt": ["NV4"],
    "rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt": ["NV4"],
    "5gpu_dual_socket_sys_phb_node_club3090.txt": [],
}


def lines_of(name: str) -> list[str]:
    return (FIX / "topo" / name).read_text().splitlines()


@pytest.mark.parametrize(("name", "codes"), sorted(NV_FIXTURES.items()))
def test_the_nvlink_counts_are_named(name, codes):
    topo = parse_topo("\n".join(lines_of(name)))
    assert topo.summary["nvlink_codes"] == codes and topo.missing_rows == []


@pytest.mark.parametrize("code", ["NV1", "NV2", "NV8"])
def test_any_nvlink_count_reads(code):
    """A consumer card's two-link bridge (NV2), one link, an HGX's NV8: the same format with
    another count, read as it is."""
    text = "\n".join(lines_of("rtx3090_4gpu_nvlink_bridge_pairs_nv4_phb_node.txt"))
    topo = parse_topo(text.replace("NV4", code))
    assert topo.summary["nvlink_codes"] == [code] and topo.summary["nvlink"] is True


@pytest.mark.parametrize(
    "name", ["aws_p5_8x_h100_nv18_no_nic_rows.txt", "dgx_a100_80g_8gpu_nv12_4nic.txt"]
)
def test_a_matrix_cut_after_any_gpu_row_is_read_as_far_as_it_goes(name):
    """Cut after k GPU rows (1 <= k < n): n GPUs, the k rows as printed, the rest unknown and named;
    cut before the first row: no matrix (the boundary)."""
    lines = lines_of(name)
    full = parse_topo("\n".join(lines))
    n = len(full.gpus)
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    for k in range(1, n):
        cut = parse_topo("\n".join(lines[: header + 1 + k]))
        assert len(cut.gpus) == n and cut.gpu_links[:k] == full.gpu_links[:k]
        assert all(link is None for row in cut.gpu_links[k:] for link in row)
        assert cut.missing_rows == [f"GPU{i}" for i in range(k, n)]
        assert f"only {k} of {n}" in cut.notes[0] and "cut short" in cut.notes[0]
        assert not any("not symmetric" in note for note in cut.notes)
    with pytest.raises(UsageProblem, match="cut short"):
        parse_topo("\n".join(lines[: header + 1]))


def test_a_row_cut_in_the_middle_is_a_missing_row():
    lines = lines_of("dgx_a100_80g_8gpu_nv12_4nic.txt")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    half = lines[header + 3][: len(lines[header + 3]) // 2]
    cut = parse_topo("\n".join([*lines[: header + 3], half]))
    assert cut.missing_rows[0] == "GPU2"


def test_a_malformed_row_is_still_refused():
    with pytest.raises(UsageProblem, match="row GPU1 is malformed"):
        parse_topo("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNVX\t X \n")


def test_the_unseen_dgx2_paste():
    topo = parse_topo(
        (
            FIX / "unseen/topo/dgx2_16x_v100_nv6_10x_mlx5_old_format_truncated_nccltests78.txt"
        ).read_text()
    )
    assert topo.summary["gpu_count"] == 16 and topo.summary["nvlink_codes"] == ["NV6"]
    assert "GPU4-GPU15" in topo.notes[0]


# -- collect-env's platform

SGLANG_MUSA = """Python: 3.10.12 (main, Nov  4 2025, 08:48:33) [GCC 11.4.0]
MUSA available: True
GPU 0,1,2,3,4,5,6,7: MTT S5000
GPU 0,1,2,3,4,5,6,7 Compute Capability: 3.1
MUSA_HOME: /usr/local/musa
MCC: mcc version 4.3.4
MUSA Driver Version: 3.3.3-server
PyTorch: 2.7.1
sglang: 0.5.0
MTHREADS Topology:
         GPU0     GPU1     CPU Affinity   NUMA Affinity
GPU0      X       MT1      0-15           0
GPU1     MT1       X       0-15           0
"""
# sglang check_env.py on ROCm: `ROCM available`, ROCM_HOME, HIPCC, `ROCM Driver Version`, and
# `AMD Topology:` (rocm-smi --showtopotype)
SGLANG_ROCM = """Python: 3.12.3
ROCM available: True
GPU 0,1: AMD Instinct MI300X
GPU 0,1 Compute Capability: 9.4
ROCM_HOME: /opt/rocm
HIPCC: HIP version: 6.3.42131-fa1d09cbd
ROCM Driver Version: 6.10.5
PyTorch: 2.6.0+rocm6.3
sglang: 0.4.6
AMD Topology:

============================ ROCm System Management Interface ============================
================================ Link Type between two GPUs ===============================
       GPU0         GPU1
GPU0   0            XGMI
GPU1   XGMI         0
"""


@pytest.mark.parametrize(
    ("text", "platform", "gpus"),
    [
        (SGLANG_MUSA, "MUSA (Moore Threads)", ("MTT S5000",)),
        (SGLANG_ROCM, "ROCm (AMD)", ("AMD Instinct MI300X",)),
    ],
)
def test_a_platform_other_than_nvidia_is_named_and_its_topology_not_read(text, platform, gpus):
    env = parse_collect_env(text)
    assert env.platform == platform and env.gpu_names == gpus
    assert env.topology is None and any("Topology' not read" in n for n in env.notes)
    assert not any("NVLink" in n for n in env.notes)


def test_the_cuda_twin_reads_nvidia_topology():
    text = (FIX / "collect_env/sglang_check_env_8x_h20_nv18_8nic_issue24966.txt").read_text()
    env = parse_collect_env(text)
    assert env.platform == "CUDA (NVIDIA)" and env.topology is not None


@pytest.mark.parametrize("value", ["N/A", "None", "False", ""])
def test_an_unset_value_names_no_platform(value):
    """vLLM's `ROCM used to build PyTorch: N/A` on a CUDA box is no ROCm."""
    env = parse_collect_env(f"PyTorch version: 2.5.1\nROCM used to build PyTorch: {value}\n")
    assert env.platform is None


def test_rocm_in_torch_collect_env():
    env = parse_collect_env(
        (
            FIX / "collect_env/vllm_0.6.4_collect_env_8x_mi300x_rocm_smi_topology_dstack.txt"
        ).read_text()
    )
    assert env.platform == "ROCm (AMD)"


@pytest.mark.parametrize(("text", "platform"), [(SGLANG_MUSA, "MUSA"), (SGLANG_ROCM, "ROCm")])
def test_the_platform_note_names_its_line_and_gpus(text, platform):
    env = parse_collect_env(text)
    [note] = [n for n in env.notes if n.startswith("platform ")]
    first = env.platform_lines[0]
    assert f"read from `{first}`" in note and first.startswith(("MUSA available", "ROCM available"))
    assert f"({env.gpu_names[0]})" in note


@pytest.mark.parametrize(
    ("block", "platform"), [("MTHREADS", "MUSA (Moore Threads)"), ("AMD", "ROCm (AMD)")]
)
def test_a_vendors_topology_block_alone_names_the_platform(block, platform):
    """A cut paste whose only platform line is the block's title: never read as CUDA."""
    env = parse_collect_env(f"sglang: 0.5.0\n{block} Topology: \n   GPU0   GPU1\n")
    assert env.platform == platform and env.platform_lines == [f"{block} Topology:"]


@pytest.mark.parametrize("missing", [1, 2, 3])
def test_the_missing_rows_named_one_by_one_or_as_a_range(missing):
    lines = lines_of("dgx_a100_80g_8gpu_nv12_4nic.txt")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    cut = parse_topo("\n".join(lines[: header + 1 + 8 - missing]))
    named = {1: "GPU7", 2: "GPU6, GPU7", 3: "GPU5-GPU7"}[missing]
    assert f"the rows of {named} are unknown" in cut.notes[0]
