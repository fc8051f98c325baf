"""Every reader of what ncclprobe is given or finds: one home below all the analyses that use them.

Files users already hold (NCCL debug logs, `nvidia-smi topo -m`, nccl-tests output, P2P matrices of
p2pBandwidthLatencyTest and nvbandwidth, `vllm collect-env` / `sglang check_env` text, env-check
documents, recommendation files, engine runs in `run/`: our trace, profiler traces, server logs) and
live sources (`topo_live`). Each reader turns its input into typed records with `to_json`; `bundle`
gathers one run's evidence for diagnose. Readers import no analysis (setup.cfg's import contract).
"""
