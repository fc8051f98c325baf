"""Why a job hung: the ranks' Flight Recorder dumps side by side (`hang`), the rules that word it
(`rules_hang`, `rules_hang_cycles`, `rules_hang_agreed`, `rules_hang_p2p`), the job's log alone
(`rules_hang_log`, `rules_log_watchdog`, over `log_collectives`) and the ranks' NCCL logs rank
against rank (`rules_nccl_log`)."""
