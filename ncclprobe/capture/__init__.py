"""`ncclprobe capture -- CMD`: run the user's own job with the evidence a diagnosis needs switched
on by environment alone, watch it, end it cleanly, and diagnose what it left (`session`).

Modules: `environment` (what the job gets added), `hook` (the generated sitecustomize that loads
`injob`, the module inside the job's processes), `job` (the command, its output and its signals),
`tree` (the process tree, watched), `server` (a server's load and profile endpoints), `record` (the
manifest), `session` (the one call), `diagnosis` (the diagnosis over the directory).
"""
