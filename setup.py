"""The one thing setup.cfg cannot say: the raw NCCL path's C issue loop (probes/_issue_loop.c).

It is optional: where no C compiler or no Python headers exist, the build warns and goes on,
and `ncclprobe.probes.issue_loop` issues the calls through its ctypes loop instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("ncclprobe.probes._issue_loop", ["probes/_issue_loop.c"], optional=True)]
)
