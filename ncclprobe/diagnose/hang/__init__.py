"""Why a job hung: the ranks' Flight Recorder dumps side by side (`hang`), the rules that word it
(`rules_hang`, `rules_hang_p2p`), the job's log alone (`rules_hang_log`) and the ranks' NCCL logs
rank against rank (`rules_nccl_log`)."""
