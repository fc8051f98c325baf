"""What a node is, from files users already hold: `nvidia-smi topo -m`, P2P matrices
(p2pBandwidthLatencyTest, nvbandwidth, one `Matrix` record for all), `lspci -vvv` text and
`vllm collect-env` / `sglang check_env` text."""
