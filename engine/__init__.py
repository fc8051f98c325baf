"""The tensor-parallel speculative-decoding engine (installed as `ncclprobe.engine`).

A Llama-style target with optional MoE layers (`model.py`, `moe.py`), an EAGLE-3 draft head
(`draft.py`), tensor parallelism applied from outside the model (`tp.py` through the one
communicator in `comm.py`), pure acceptance functions (`speculative.py`) and the loops
(`generate.py`). Ranks run as worker processes of `ncclprobe.launch.run_pool` (`worker.py`).
"""
