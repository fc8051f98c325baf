"""P2P health: findings over P2P bandwidth/latency matrices (measured, or read from
p2pBandwidthLatencyTest and nvbandwidth output), platform checks (ACS, IOMMU, link state, the
driver's P2P support), and the advice that follows (`advice`). `ncclprobe topo --check`
(`check.run_check`) and `ncclprobe import` are thin over these modules."""
