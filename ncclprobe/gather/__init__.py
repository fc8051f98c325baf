"""Gathering live sources into evidence: the first step of every judging command's road.

A command that judges this machine (not files) runs its probes and readers here and gets the typed
evidence the rule sets read: `p2p.gather_p2p` (`topo --check`: the P2P measurement in its own process
group, the platform, NCCL's dumps), `processes.gather_processes` (`env-check`: the /proc walk and the
NCCL logs), `settings.gather_settings` (`knobs --lint`: this environment, or a collect-env text,
with the GPUs' topology and the NCCL version). The readers themselves sit in `ncclprobe.evidence`;
this package only decides what to read and runs what must run.
"""
