"""The KV cache vLLM allocates while it starts is served from an anonymous mapping: it reads as
zeros, costs no resident memory until written, and nothing else vLLM allocates is touched. No
engine: the torch-function mode alone (the engine tests start vLLM under it)."""

import mmap

import torch

from hsedit.engine.vllm_engine import LAZY_ZEROS_MIN_BYTES, lazily_paged_kv_cache


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * mmap.PAGESIZE


def test_a_large_int8_buffer_costs_nothing_until_written_and_reads_as_zeros():
    size = 256 << 20
    with lazily_paged_kv_cache():
        before = resident_bytes()
        buffer = torch.zeros(size, dtype=torch.int8, device=torch.device("cpu"))
        grown = resident_bytes() - before
    assert grown < (16 << 20), f"{grown / (1 << 20):.0f} MiB resident right after allocating 256 MiB"
    assert buffer.shape == (size,) and buffer.dtype == torch.int8 and buffer.device.type == "cpu"
    buffer[: 1 << 20] = 7  # written blocks become resident and hold what was written
    assert int(buffer[: 1 << 20].sum()) == 7 << 20
    assert int(buffer[1 << 20 :].count_nonzero()) == 0
    view = buffer[1 << 20 :].view(torch.bfloat16)[: 1 << 10]  # the cache is viewed per layer in other dtypes
    assert view.dtype == torch.bfloat16 and float(view.abs().sum()) == 0.0


def owned_by_torch(tensor: torch.Tensor) -> bool:
    """torch's own allocations can be resized; a tensor over a memory mapping cannot. (Resident
    memory cannot tell them apart: the allocator may hand back pages already written.)"""
    return tensor.untyped_storage().resizable()


def test_other_allocations_are_vllms_own():
    with lazily_paged_kv_cache():
        large = torch.zeros(LAZY_ZEROS_MIN_BYTES, dtype=torch.int8)
        small = torch.zeros(LAZY_ZEROS_MIN_BYTES // 2, dtype=torch.int8)
        floats = torch.zeros(LAZY_ZEROS_MIN_BYTES, dtype=torch.float32)
        shaped = torch.zeros((4, 8), dtype=torch.int8)
        summed = torch.ones(3) + torch.ones(3)
    assert not owned_by_torch(large)
    assert owned_by_torch(small) and owned_by_torch(floats) and owned_by_torch(shaped)
    assert small.numel() == LAZY_ZEROS_MIN_BYTES // 2 and int(small.count_nonzero()) == 0
    assert floats.dtype == torch.float32 and floats.numel() == LAZY_ZEROS_MIN_BYTES
    assert shaped.shape == (4, 8)
    assert summed.tolist() == [2.0, 2.0, 2.0]
    # outside the context torch.zeros is torch's again, whatever the size
    assert owned_by_torch(torch.zeros(LAZY_ZEROS_MIN_BYTES, dtype=torch.int8))
