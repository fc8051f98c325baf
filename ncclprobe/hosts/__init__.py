"""Runs across hosts through the launchers users already have: srun, torchrun, mpirun.

`launchers` turns one program into the command lines that start it on every node (`Hosts`,
`Program`, `commands`, `detect`); `run` starts them here, watches and ends them (`run_launch`);
`identity` reads a started process's rank and node from its launcher's variables, and `rank` is the
entry that gives srun's and mpirun's ranks torch's names; `hostlist` reads and writes host names as
Slurm does (`node[01-04]`). The sweep (`ncclprobe.sweep.hosts`) and env-check across hosts build on
these; nothing here knows what the program measures.
"""
