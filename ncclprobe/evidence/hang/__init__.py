"""What a hung or failed job left behind: PyTorch Flight Recorder dumps (pickles read through
`safe_pickle`, which runs nothing) and the job's log (watchdog lines, `[rankN]:`, torchrun's summary)."""
