"""The rotating buffers of a timed trial: nccl-tests' layout (slot k at k buffers into one allocation
per buffer, `startColl`'s shift), each slot holding the same input, in place the same views."""

import pytest
import torch

from ncclprobe.probes.collectives import COLLECTIVES
from ncclprobe.probes.sweep_worker import rotating

CASES = [(name, in_place) for name, c in COLLECTIVES.items() for in_place in c.placements]


@pytest.mark.parametrize("name, in_place", CASES)
def test_every_slot_is_the_buffer_pair_one_stride_further(name, in_place):
    coll = COLLECTIVES[name]
    shape = coll.shape(64, "float32", 2)
    send, recv = coll.buffers(shape, 1, 2, torch.float32, "cpu", in_place, "sum")
    slots = rotating(send, recv, 3)
    assert len(slots) == 3
    s_stride, r_stride = (x.numel() * 4 for x in (send, recv))
    if in_place:
        s_stride = r_stride = max(send.numel(), recv.numel()) * 4
    for k, (s, r) in enumerate(slots):
        assert torch.equal(s, send) and torch.equal(r, recv)
        assert s.data_ptr() - slots[0][0].data_ptr() == k * s_stride
        assert r.data_ptr() - slots[0][1].data_ptr() == k * r_stride
        assert s.is_contiguous() and r.is_contiguous()
        if in_place:  # the send buffer lies inside the receive buffer where nccl-tests puts it
            assert s.untyped_storage().data_ptr() == r.untyped_storage().data_ptr()
            assert s.data_ptr() - r.data_ptr() == send.data_ptr() - recv.data_ptr()
    if not in_place:
        assert slots[0][0].untyped_storage().data_ptr() != slots[0][1].untyped_storage().data_ptr()


def test_a_write_into_one_slot_leaves_the_others_alone():
    coll = COLLECTIVES["all_reduce"]
    send, recv = coll.buffers(
        coll.shape(32, "float32", 1), 0, 1, torch.float32, "cpu", False, "sum"
    )
    slots = rotating(send, recv, 4)
    slots[1][1].fill_(9)
    assert [float(r.sum()) for _, r in slots] == [0.0, 72.0, 0.0, 0.0]
