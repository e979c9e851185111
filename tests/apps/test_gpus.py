"""Ranks sharing GPUs: which GPU a rank takes, and the memory check the ranks make together before allocating.

The apps' GPU runs are tested on numba's CUDA simulator in ``tests/gpu``; here the rules, with the ranks'
answers of a fake communicator, so that 8 ranks on 2 GPUs need neither.
"""

from __future__ import annotations

import pytest

from apps import cli
from apps.cli import CONTEXT_BYTES, DeviceNeed, InputError, check_fits
from apps.lulesh.hydro import device_bytes
from apps.minibude.deck import synthetic_deck
from apps.minibude.driver import device_bytes as docking_bytes


class Ranks:
    """What ``allgather`` returns to one rank of ``size``: the tuples the others gave, faked."""

    def __init__(self, every: list) -> None:
        self.every = every

    def Get_size(self) -> int:
        return len(self.every)

    def allgather(self, mine: object) -> list:
        return self.every


def test_ranks_take_gpus_round_robin_by_node_local_rank():
    assert [cli.gpu_for(r, 2) for r in range(8)] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [cli.gpu_for(r, 8) for r in range(8)] == list(range(8))
    assert [cli.gpu_for(r, 1) for r in range(3)] == [0, 0, 0]
    assert cli.gpu_for(3, 0) == 0  # no count (the simulator): the one device


def _ranks_on_two_gpus(nbytes: int, capacity: int) -> list:
    """8 ranks of one node, round-robin on 2 GPUs, each needing ``nbytes`` besides its context."""
    return [
        (
            ("node", f"bus{cli.gpu_for(r, 2)}"),
            f"GPU {cli.gpu_for(r, 2)}",
            capacity,
            nbytes + CONTEXT_BYTES,
            "w",
        )
        for r in range(8)
    ]


def test_ranks_sharing_a_gpu_that_holds_them_pass(monkeypatch):
    monkeypatch.delenv("PAD_GPU_MEMORY", raising=False)
    need = DeviceNeed(10**9, "w")
    capacity = 4 * (need.nbytes + CONTEXT_BYTES)  # exactly the four ranks of each GPU
    every = _ranks_on_two_gpus(need.nbytes, capacity)
    for rank in range(8):
        check_fits(Ranks(every), need, every[rank][0], every[rank][1], capacity)
    check_fits(None, need, ("node", "bus0"), "GPU 0", None)  # an unknown size: nothing to check


def test_too_many_ranks_for_a_gpu_raise_the_same_error_on_every_rank(monkeypatch):
    """One byte short on each GPU: every rank raises the same error, naming the first rank that does not fit
    on the first GPU that overflows, the ranks sharing it and the bytes."""
    monkeypatch.delenv("PAD_GPU_MEMORY", raising=False)
    need = DeviceNeed(10**9, "LULESH -s 60 --mode grad")
    capacity = 4 * (need.nbytes + CONTEXT_BYTES) - 1
    every = _ranks_on_two_gpus(need.nbytes, capacity)
    messages = set()
    for rank in range(8):
        with pytest.raises(InputError) as err:
            check_fits(Ranks(every), need, every[rank][0], every[rank][1], capacity)
        messages.add(str(err.value))
    (message,) = messages
    assert message.startswith("--device gpu: rank 6 does not fit on GPU 0: rank(s) 0, 2, 4, 6 share it and ")
    assert "need 6.1 GB in all, over its 6.1 GB; rank 6 needs 1.5 GB (w: 1.0 GB, and 536.9 MB" in message


def test_the_gpu_size_can_be_set_from_the_environment(monkeypatch):
    need = DeviceNeed(1000, "w")
    monkeypatch.setenv("PAD_GPU_MEMORY", str(CONTEXT_BYTES + 999))
    with pytest.raises(InputError, match="rank 0 does not fit on the simulated GPU"):
        check_fits(None, need, ("node", "sim"), "the simulated GPU", None)
    monkeypatch.setenv("PAD_GPU_MEMORY", str(CONTEXT_BYTES + 1000))
    check_fits(None, need, ("node", "sim"), "the simulated GPU", 1)
    monkeypatch.setenv("PAD_GPU_MEMORY", "80GB")
    with pytest.raises(InputError, match="PAD_GPU_MEMORY: '80GB' is not a number of bytes"):
        check_fits(None, need, ("node", "sim"), "the simulated GPU", None)


def test_lulesh_needs_grow_with_the_mesh_and_the_mode():
    """Per element at -s 60: the primal about 0.6 kB, its per-cycle gradient 1.3 kB, the whole-run
    gradient 32 snapshots of 0.4 kB more (docs/gpus.md quotes these)."""
    per_element = {m: device_bytes(60, m, 32) / 60**3 for m in ("primal", "grad", "sensitivity")}
    assert 550 < per_element["primal"] < 650 and 1250 < per_element["grad"] < 1400
    assert 15000 < per_element["sensitivity"] < 16000
    assert device_bytes(120, "grad") > 7.5 * device_bytes(60, "grad")


def test_minibude_needs_count_poses_protein_atoms_and_the_tape():
    deck = synthetic_deck(nposes=64)
    primal = docking_bytes(deck, 64, 4, None)
    assert primal == 4 * (deck.natpro * (4 + 6 * deck.ntypes) + 4 * deck.natlig + 4 * deck.ntypes + 7 * 64)
    assert docking_bytes(deck, 64, 4, "poses") == primal + 4 * (6 * 64 + 64) + 16 * 14 * 8 * 16
    assert docking_bytes(deck, 64, 4, "protein") == primal + 4 * (3 * deck.natpro + 64)
