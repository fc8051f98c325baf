"""Readers of evidence users already hold: NCCL debug logs, `nvidia-smi topo -m`, nccl-tests output.

Each reader turns text into plain facts (dataclasses with `to_json`) that the sweep, env-check
and the recommender share. Parsers never raise on garbage: they return what they found, and the
CLI decides whether that is enough.
"""
