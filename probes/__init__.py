"""Measurements that run inside worker processes (installed as `ncclprobe.probes`).

Each probe is an entry `run(ctx)` for `ncclprobe.launch.run_pool`; collectives live in
`ncclprobe.probes.collectives`, one file per collective.
"""
