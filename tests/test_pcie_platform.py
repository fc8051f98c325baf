"""Platform checks on sysfs trees laid out as the kernel lays them out (devices under
/sys/devices/pciDDDD:BB/<root port>/<switch ports>/<GPU>, /sys/bus/pci/devices symlinks, config
space bytes with the ACS extended capability), and `topo --check` end to end without a GPU."""

import json
import os
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose.p2p.findings import matrix_findings
from ncclprobe.diagnose.p2p.platform import (
    check_acs,
    check_driver_p2p,
    check_iommu,
    check_links,
    platform_checks,
)
from ncclprobe.evidence.live.platform import read_acs, read_driver_p2p, read_iommu
from ncclprobe.evidence.live.sysfs import crossing, parse_acs, read_gpu_paths
from ncclprobe.evidence.node.matrix import Matrix
from ncclprobe.gather.p2p import measure

FIX = Path(__file__).parent / "fixtures"
# ACSCtl of an AMD Matisse GPP bridge as `lspci -vvv` printed it in an NVIDIA/nccl issue thread
# (vasslavich, 2022-06-28): SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
MATISSE_ACS = 0b0011101
LSPCI_MATISSE = (
    "40:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal "
    "decode])\n\tCapabilities: [2a0 v1] Access Control Services\n\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ "
    "CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ "
    "UpstreamFwd+ EgressCtrl- DirectTrans-\n"
)


def config_space(acs_control: int | None, size: int = 4096) -> bytes:
    data = bytearray(size)
    if size > 0x100:
        struct.pack_into(
            "<I", data, 0x100, 0x0001 | (1 << 16) | (0x2A0 << 20)
        )  # AER, next at 0x2a0
        if acs_control is not None:
            struct.pack_into("<IHH", data, 0x2A0, 0x000D | (1 << 16), 0x5F, acs_control)
    return bytes(data)


def device(
    root: Path, rel: str, vendor: str, cls: str, *, config: bytes, link=("16.0 GT/s PCIe", "16")
):
    d = root / "sys/devices" / rel
    d.mkdir(parents=True)
    for name, value in (
        ("vendor", vendor),
        ("device", "0x8747" if vendor == "0x10b5" else "0x2684"),
        ("class", cls),
        ("current_link_speed", link[0]),
        ("current_link_width", link[1]),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "16"),
    ):
        (d / name).write_text(value + "\n")
    (d / "config").write_bytes(config)
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(d, bus), bus / d.name)
    return d


@pytest.fixture
def box(tmp_path):
    """Two GPUs behind one PLX switch, one GPU on its own root port, one on the other socket."""
    sw = "pci0000:00/0000:00:01.1/0000:01:00.0"
    device(
        tmp_path, "pci0000:00/0000:00:01.1", "0x1022", "0x060400", config=config_space(MATISSE_ACS)
    )
    device(tmp_path, sw, "0x10b5", "0x060400", config=config_space(None))
    for port, gpu in (("0000:02:08.0", "0000:03:00.0"), ("0000:02:10.0", "0000:04:00.0")):
        device(tmp_path, f"{sw}/{port}", "0x10b5", "0x060400", config=config_space(0b0011101))
        device(tmp_path, f"{sw}/{port}/{gpu}", "0x10de", "0x030000", config=config_space(None, 256))
    device(tmp_path, "pci0000:00/0000:00:03.1", "0x1022", "0x060400", config=config_space(0, 64))
    device(
        tmp_path,
        "pci0000:00/0000:00:03.1/0000:05:00.0",
        "0x10de",
        "0x030000",
        config=config_space(None, 64),
        link=("16.0 GT/s PCIe", "8"),
    )
    device(
        tmp_path,
        "pci0000:80/0000:80:01.1/0000:81:00.0",
        "0x10de",
        "0x030000",
        config=config_space(None, 64),
        link=("2.5 GT/s PCIe", "16"),
    )
    (tmp_path / "sys/class/iommu/ivhd0").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on\n")
    group = tmp_path / "sys/bus/pci/devices/0000:03:00.0/iommu_group"
    group.mkdir()
    (group / "type").write_text("DMA\n")
    return tmp_path


def test_tree_and_crossings(box):
    paths, reason = read_gpu_paths(box)
    assert reason is None and [p.bdf for p in paths] == [
        "0000:03:00.0",
        "0000:04:00.0",
        "0000:05:00.0",
        "0000:81:00.0",
    ]
    a, b, c, d = paths
    assert [n.bdf for n in a.chain] == [
        "0000:00:01.1",
        "0000:01:00.0",
        "0000:02:08.0",
        "0000:03:00.0",
    ]
    assert crossing(a, b) == "PCIe switch above 0000:01:00.0 [0x10b5:0x8747]"
    assert crossing(a, c) == "root complex pci0000:00 (root ports 0000:00:01.1 and 0000:00:03.1)"
    assert crossing(c, d).startswith("different host bridges pci0000:00 and pci0000:80")


def test_acs_reads_config_space_and_names_what_it_cannot_read(box):
    paths, reason = read_gpu_paths(box)
    check = check_acs(paths, reason, read_acs(paths, run=lambda argv: None))
    assert check.status == "warning" and "0000:02:08.0 (ReqRedir/CmpltRedir)" in check.summary
    assert set(check.evidence["redirecting"]) == {"0000:00:01.1", "0000:02:08.0", "0000:02:10.0"}
    assert check.unread == [
        "0000:00:03.1: only 64 bytes of configuration space readable (extended space, where ACS "
        "lives, needs root): run as root or give `lspci -vvv` output"
    ]
    assert parse_acs(config_space(None)).reason == "no ACS capability"


def test_acs_falls_back_to_lspci(box):
    paths, reason = read_gpu_paths(box)
    (box / "sys/devices/pci0000:00/0000:00:01.1/config").write_bytes(bytes(64))
    listing = LSPCI_MATISSE.replace("40:01.1", "00:01.1")
    check = check_acs(
        paths,
        reason,
        read_acs(paths, run=lambda argv: (0, listing) if argv[0] == "lspci" else None),
    )
    assert check.source == "sysfs config space, then lspci -vvv"
    assert check.evidence["redirecting"]["0000:00:01.1"] == ["ReqRedir", "CmpltRedir"]


def test_links_and_iommu(box):
    paths, reason = read_gpu_paths(box)
    links = check_links(paths, reason, {})
    assert (
        links.status == "warning"
        and links.summary == "link trained down: GPU 0000:05:00.0 runs x8 of x16"
    )
    assert links.evidence["idle_low_speed"] == ["GPU 0000:81:00.0 at Gen1 of Gen4 at idle"]
    loaded = check_links(
        paths,
        reason,
        {
            "0000:81:00.0": {
                "current_link_speed": "2.5 GT/s PCIe",
                "current_link_width": "16",
                "max_link_speed": "16.0 GT/s PCIe",
                "max_link_width": "16",
            }
        },
    )
    assert "GPU 0000:81:00.0 at Gen1 of Gen4 under load" in loaded.summary
    iommu = check_iommu(paths, read_iommu(box, paths))
    assert (
        iommu.status == "warning"
        and "0000:03:00.0" in iommu.summary
        and iommu.evidence["kernel_parameters"] == {"amd_iommu": "on"}
    )
    (box / "sys/bus/pci/devices/0000:03:00.0/iommu_group/type").write_text("identity\n")
    assert check_iommu(paths, read_iommu(box, paths)).evidence["mode"] == "passthrough"


def test_driver_p2p_from_nvidia_smi_text():
    block = (
        (FIX / "topo/rtx2080ti_2gpu_pix_autodl_with_p2p_matrix.txt")
        .read_text()
        .split("topo -p2p p\n")[1]
    )
    check = check_driver_p2p(read_driver_p2p(lambda argv: (0, block)))
    assert check.status == "warning" and check.evidence["refused_pairs"] == [[0, 1]]
    assert check_driver_p2p(read_driver_p2p(lambda argv: None)).status == "not readable"


def test_every_check_names_its_source_on_an_empty_machine(tmp_path):
    checks = platform_checks(tmp_path, run=lambda argv: None)
    assert [c.name for c in checks] == ["acs", "iommu", "link", "driver-p2p"]
    assert all(c.status == "not readable" and c.source and c.unread for c in checks)


def test_findings_name_the_switch(box):
    paths, _ = read_gpu_paths(box)
    values = [
        [None, 20.0, 20.0, 20.0],
        [20.0, None, 20.0, 20.0],
        [20.0, 20.0, None, 20.0],
        [4.0, 20.0, 20.0, None],
    ]
    m = Matrix(
        metric="bandwidth",
        rows=[f"GPU{i}" for i in range(4)],
        cols=[f"GPU{i}" for i in range(4)],
        values=values,
    )
    found = matrix_findings([m], where=lambda i, j: crossing(paths[i], paths[j]))
    slow = [f for f in found if f.code == "slow-pair"][0]
    assert "GPU3->GPU0 (crosses different host bridges pci0000:80 and pci0000:00" in slow.message


def test_measurement_hang_names_the_pair_and_is_an_error_finding():
    stuck = [
        sys.executable,
        "-c",
        "import json,time; print(json.dumps({'devices': ['0000:03:00.0', '0000:04:00.0']}));"
        "print(json.dumps({'checking': [1, 0, 'off']}), flush=True); time.sleep(600)",
    ]
    result = measure(1, 1 << 20, stuck)
    assert result["status"] == "hang" and "GPU1 -> GPU0 (P2P=disabled)" in result["reason"]


def test_topo_check_without_gpu_end_to_end(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["topo", "--check", "--no-nccl-job", "--format", "json", "--output", str(tmp_path / "o")],
    )
    doc = json.loads(result.stdout)
    # no GPU measured: exit 3, as plain `topo` (issue 31: same situation, same code)
    assert result.exit_code == (3 if doc["measurement"]["status"] == "unavailable" else 0)
    assert doc["kind"] == "topo-check" and {c["check"] for c in doc["platform"]} == {
        "acs",
        "iommu",
        "link",
        "driver-p2p",
    }
    assert all(c["source"] for c in doc["platform"])
    assert doc["measurement"]["status"] in ("unavailable", "ok")
    saved_text = (tmp_path / "o/topo-check.json").read_text()
    assert saved_text == json.dumps(doc, indent=2) + "\n"  # the document as printed, whole
    saved = json.loads(saved_text)
    assert saved["advice"] == doc["advice"]
    again = runner.invoke(
        cli, ["topo", "--check", "--no-nccl-job", "--output", str(tmp_path / "o")]
    )
    assert again.exit_code == 2 and "is not empty" in again.stderr
    narrow = runner.invoke(cli, ["topo", "--check", "--no-nccl-job"], env={"COLUMNS": "60"})
    assert (
        narrow.exit_code == result.exit_code and max(map(len, narrow.stdout.splitlines())) <= 60
    )  # the terminal's width
    assert "## advice" in narrow.stdout and "(source: " in narrow.stdout


def test_diagnose_topo_check_judges_this_machine_beside_the_rest():
    """`diagnose --topo-check` gathers what `topo --check` does and runs the P2P rule set: its
    document rides under `topo_check`, and with nothing measured here it exits 3 as topo --check."""
    result = CliRunner().invoke(cli, ["diagnose", "--topo-check", "--format", "json"])
    doc = json.loads(result.stdout)
    assert doc["kind"] == "diagnosis" and doc["topo_check"]["kind"] == "topo-check"
    unmeasured = doc["topo_check"]["measurement"]["status"] == "unavailable"
    assert result.exit_code == (3 if unmeasured else 0 if not doc["findings"] else 1)
    assert [c["check"] for c in doc["topo_check"]["platform"]] == [
        "acs",
        "iommu",
        "link",
        "driver-p2p",
    ]


def test_import_p2p_and_records(tmp_path):
    runner = CliRunner()
    f = FIX / "p2p/p2p_4x_a100_pcie_nvlink_pairs_can_cannot_sushruta.txt"
    out = tmp_path / "p2p.jsonl"
    result = runner.invoke(cli, ["import", str(f), "--output", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(l) for l in out.read_text().splitlines()]
    assert (
        records[0]["kind"] == "p2pBandwidthLatencyTest"
        and sum(r["record"] == "matrix" for r in records) == 8
    )
    assert Matrix.from_record(records[1]).values[0][1] == 21.51
    assert runner.invoke(cli, ["import", str(f), "--output", str(out)]).exit_code == 2
    broken = tmp_path / "cut.txt"
    broken.write_text(f.read_text()[:1400])
    cut = runner.invoke(cli, ["import", str(broken)])
    # read as far as it goes, and said to be cut (issue 36: a truncated paste is still evidence)
    assert cut.exit_code == 0 and "the output is cut: it ends at line" in cut.output, cut.output


def test_knobs_lint_reads_collect_env(tmp_path):
    text = (FIX / "collect_env/vllm_0.6.3_collect_env_8x_h100_nv18_indented_dstack.txt").read_text()
    f = tmp_path / "env.txt"
    f.write_text(text + "    NCCL_P2P_LEVEL=sys\n")
    result = CliRunner().invoke(
        cli, ["knobs", "--lint", "--collect-env", str(f), "--format", "json"]
    )
    doc = json.loads(result.stdout)
    assert doc["env"] == {"NCCL_P2P_LEVEL": "sys"} and doc["nccl_version"] == "2.21.5"
    assert (
        doc["node"]["nvlink"] is True and doc["node"]["links"] == "nvlink-all"
    )  # NV18 between every pair
    assert any(x["variable"] == "NCCL_P2P_LEVEL" for x in doc["findings"])
    assert any("not of the serving workers" in n for n in doc["notes"])


def test_advice_names_the_level_the_acs_fix_or_nothing(box):
    from ncclprobe.diagnose.p2p.advice import advise
    from ncclprobe.evidence.node.topo import parse_topo

    topo = parse_topo(
        (FIX / "topo/4gpu_pxb_pix_sys_tabs_no_legend_nccl667.txt").read_text()
    )  # 0-1 PXB, 2-3 PIX
    gpus = [f"GPU{i}" for i in range(4)]
    near = {(0, 1), (1, 0), (2, 3), (3, 2)}
    on = Matrix(
        metric="bandwidth",
        rows=gpus,
        cols=gpus,
        peer_access="enabled",
        engine="ce",
        values=[
            [None if i == j else 20.0 if (i, j) in near else 5.0 for j in range(4)]
            for i in range(4)
        ],
    )
    off = Matrix(
        metric="bandwidth",
        rows=gpus,
        cols=gpus,
        peer_access="disabled",
        engine="ce",
        values=[[None if i == j else 10.0 for j in range(4)] for i in range(4)],
    )
    findings = matrix_findings([on, off], [[True] * 4 for _ in range(4)])
    assert [a.setting for a in advise(findings, [], topo)] == [{"NCCL_P2P_LEVEL": "PXB"}]
    paths, reason = read_gpu_paths(box)
    acs = check_acs(paths, reason, read_acs(paths, run=lambda argv: None))
    actions = [a.action for a in advise(findings, [acs], topo)]
    assert actions[0] == "set NCCL_P2P_LEVEL=PXB" and actions[1].startswith("disable ACS")
    corrupt = matrix_findings(
        [off], corrupt=[{"what": "P2P=enabled ce", "src": 1, "dst": 2, "mismatches": 7}]
    )
    assert advise(corrupt, [], topo)[0].setting == {"NCCL_P2P_DISABLE": "1"}
    healthy = matrix_findings([off])
    assert [a.action for a in advise(healthy, [])] == ["nothing to change"]


def test_a_gpu_behind_an_intel_vmd_domain_keeps_its_bridges(tmp_path):
    """VMD puts its devices in a 5-digit PCI domain (10000:e0:..); made-up tree of that real layout."""
    from ncclprobe.evidence.node.lspci import parse_lspci

    vmd = "pci0000:00/0000:00:0e.0/pci10000:e0"
    device(tmp_path, "pci0000:00/0000:00:0e.0", "0x8086", "0x010400", config=config_space(None, 64))
    device(tmp_path, f"{vmd}/10000:e0:06.0", "0x8086", "0x060400", config=config_space(0b0011101))
    device(
        tmp_path,
        f"{vmd}/10000:e0:06.0/10000:e1:00.0",
        "0x10de",
        "0x030000",
        config=config_space(None, 64),
    )
    [path], _ = read_gpu_paths(tmp_path)
    assert path.bdf == "10000:e1:00.0" and [b.bdf for b in path.bridges] == ["10000:e0:06.0"]
    assert path.bridges[0].acs.redirects == ["ReqRedir", "CmpltRedir"]
    listing = parse_lspci(
        "10000:e0:06.0 PCI bridge: Intel Corporation Device 352a\n"
        + LSPCI_MATISSE.split("\n", 1)[1]
        + "10000:e1:00.0 3D controller: NVIDIA Corporation Device 2684\n\tCapabilities: [60] Power\n"
    )
    assert listing["10000:e0:06.0"]["acs"].redirects == ["ReqRedir", "CmpltRedir"]
    assert listing["10000:e1:00.0"]["acs"].reason == "no ACS capability"


def test_a_pair_beyond_the_known_pcie_paths_is_judged_without_its_place(box):
    """The P2P rule set names what a pair crosses only where both GPUs' PCIe paths were read."""
    from ncclprobe.diagnose.p2p.check import pair_findings
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.evidence.p2p import P2PEvidence

    paths, _ = read_gpu_paths(box)
    gpus = [f"GPU{i}" for i in range(3)]
    m = Matrix(
        metric="bandwidth",
        rows=gpus,
        cols=gpus,
        values=[[None, 20.0, 20.0], [20.0, None, 20.0], [4.0, 20.0, None]],
    )
    found = pair_findings(Evidence(p2p=P2PEvidence([m], gpu_paths=paths[:2])))
    [slow] = [f for f in found if f.code == "slow-pair"]
    assert slow.message.startswith("GPU2->GPU0: 4.00") and "crosses" not in slow.message
    [known] = [
        f
        for f in pair_findings(Evidence(p2p=P2PEvidence([m], gpu_paths=paths[:3])))
        if f.code == "slow-pair"
    ]
    assert "crosses" in known.message
