"""Tensor parallelism applied to an unsharded model: slice the weights, hook the all-reduces.

Megatron's layout, as gpt-fast's tp.py does it: q/k/v and gate/up are split by output columns
(each rank owns whole heads and a slice of the MLP width), o_proj and down_proj by input rows,
so each rank's attention or MLP output is a partial sum that one all-reduce completes. MoE
experts are split the same way along their intermediate dimension, with the router replicated
(it reads the replicated residual, so every rank picks the same experts). Two all-reduces per
layer: after attention, after the MLP/MoE.

Embeddings and the output head stay replicated: every rank then holds identical logits, samples
identical tokens from identically seeded generators and needs no broadcast of the chosen tokens
(at the price of a full-size head per rank; vocab-parallel would add an all-gather per step).

Every rank must start from the same full weights (same seed or the same checkpoint).
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from ncclprobe.engine.comm import Communicator
from ncclprobe.engine.draft import DraftHead
from ncclprobe.engine.layers import MLP
from ncclprobe.engine.model import Attention, Transformer
from ncclprobe.engine.moe import MoE
from ncclprobe.errors import UsageProblem

Model = TypeVar("Model", Transformer, DraftHead)


def apply_tp(model: Model, comm: Communicator) -> Model:
    """Shard `model` (its blocks' `self_attn` and `mlp`) for `comm`'s rank; a no-op for one rank
    unless it issues collectives."""
    if not comm.active:
        return model
    for layer in model.blocks:
        _shard_attention(layer.self_attn, comm)
        _shard_ffn(layer.mlp, comm)
        for module in (layer.self_attn, layer.mlp):
            module.register_forward_hook(lambda _m, _inputs, output: comm.all_reduce(output))
    return model


def _shard_attention(attn: Attention, comm: Communicator) -> None:
    kv_heads = attn.k_proj.out_features // attn.head_dim
    heads = attn.q_proj.out_features // attn.head_dim
    for count, what in ((heads, "query heads"), (kv_heads, "key/value heads")):
        if count % comm.world_size:
            raise UsageProblem(
                f"tensor parallelism over {comm.world_size} ranks needs {what} ({count}) "
                f"divisible by {comm.world_size}"
            )
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        _shard_linear(proj, 0, comm)
    _shard_linear(attn.o_proj, 1, comm)


def _shard_ffn(ffn: MLP | MoE, comm: Communicator) -> None:
    if isinstance(ffn, MoE):
        _check_divisible(ffn.experts_gate.shape[1], comm, "expert width")
        ffn.experts_gate = _slice_param(ffn.experts_gate, 1, comm)
        ffn.experts_up = _slice_param(ffn.experts_up, 1, comm)
        ffn.experts_down = _slice_param(ffn.experts_down, 2, comm)
        if ffn.shared is not None:
            _shard_ffn(ffn.shared, comm)
        return
    _check_divisible(ffn.gate_proj.out_features, comm, "MLP width")
    _shard_linear(ffn.gate_proj, 0, comm)
    _shard_linear(ffn.up_proj, 0, comm)
    _shard_linear(ffn.down_proj, 1, comm)


def _check_divisible(size: int, comm: Communicator, what: str) -> None:
    if size % comm.world_size:
        raise UsageProblem(
            f"tensor parallelism over {comm.world_size} ranks needs the {what} ({size}) "
            f"divisible by {comm.world_size}"
        )


def _slice_param(param: torch.Tensor, dim: int, comm: Communicator) -> nn.Parameter:
    shard = param.detach().chunk(comm.world_size, dim=dim)[comm.rank].clone()
    return nn.Parameter(shard, requires_grad=param.requires_grad)


def _shard_linear(linear: nn.Linear, dim: int, comm: Communicator) -> None:
    linear.weight = _slice_param(linear.weight, dim, comm)
    linear.out_features, linear.in_features = linear.weight.shape
