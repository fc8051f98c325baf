"""Whether the NCCL settings a job ran with reached its workers, were read, and are safe: the
settings rules (`rules_settings`), the one safety rule applied to the evidence (`rules_safety`), and
what the ranks' NCCL logs add to a run (`rules_nccl_run`)."""
