"""What a hung or failed job left behind: PyTorch Flight Recorder dumps (pickles read through
`safe_pickle`, which runs nothing) and the job's log (`job_log`: watchdog lines; `log_rank`:
`[rankN]:` and a rank's own file; `torchrun_summary`; its records in `job_log_records`)."""
