"""ncclprobe: measure multi-GPU collectives, show which NCCL settings NCCL read and chose, recommend better ones.

The command line lives in `ncclprobe.cli`; everything it does is a library call that tests and
users can make directly (`ncclprobe.sweep`, `ncclprobe.evidence`, `ncclprobe.diagnose`, ...).
Importing this package is cheap: nothing here imports torch.
"""

__version__ = "0.1.0"
