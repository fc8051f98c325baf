"""PCIe health evidence: P2P bandwidth/latency matrices (measured or read from p2pBandwidthLatencyTest
and nvbandwidth output), platform checks (ACS, IOMMU, link state, the driver's P2P support), NCCL's
topology and graph dumps, and the advice that follows from them. `ncclprobe topo --check` and
`ncclprobe import` are thin over these modules.
"""
