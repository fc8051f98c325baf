"""The sweep: measure a collective over a grid of NCCL settings and show from NCCL's log, per
configuration and rank, what NCCL read and chose.

`plan` builds the grid and groups it into worker pools, `run` runs the pools and writes records,
`proof` decides from NCCL's own log whether each setting was read, `table` renders the results.
"""
