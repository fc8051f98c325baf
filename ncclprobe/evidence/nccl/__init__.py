"""What NCCL itself wrote: debug logs (one file or one per rank, their failure lines explained),
nccl-tests output (text of every generation, several runs split, `-J` JSON; as result records), and
NCCL's topology and graph XML dumps."""
