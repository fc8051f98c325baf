"""What this machine and its running processes show now: the GPU topology from every source there
is (`topo_live`), the PCIe tree in sysfs (`sysfs`), a process tree with each environment read from
/proc (`walk`, `environ`), NCCL's own logs of those processes (`logcheck`), and an env-check document
read back (`env_check_document`)."""
