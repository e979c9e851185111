"""Large CUDA adjoints split along their outputs' backward slices (``pad.kernel.fission``): which kernels
split, into which groups, and what each piece's code holds. The pieces' gradients are checked on a GPU
(or numba's simulator) in tests/gpu/test_cuda.py."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import pad
import pad.mpi
from pad.kernel import compiler, fission
from pad.kernel.frontend import kind_of_value

TERMS = 48  # loop trips that make each output's slice large enough to split


@pad.func
def sines(w, v):
    """A long series in ``v``: work enough for a slice of its own."""
    s = 0.0
    for k in range(TERMS):
        s += math.sin(w * v * (k + 1))
    return s


@pad.func
def cosines(w, v):
    """Another, of other terms."""
    t = 0.0
    for k in range(TERMS):
        t += math.cos(v + w * k)
    return t


@pad.kernel
def k_two_series(i, w, x, a, b):
    """Two outputs from one input, each by a long series of its own: the adjoint splits in two."""
    a[i] = sines(w, x[i])
    b[i] = cosines(w, x[i])


@pad.kernel
def k_nested_series(i, w, x, a, b):
    """b's slice holds a's: splitting would replay a's series twice, so the adjoint stays whole."""
    s = sines(w, x[i])
    a[i] = s
    b[i] = s + cosines(w, x[i])


@pad.kernel
def k_small_outputs(i, x, a, b):
    """Two cheap outputs: one adjoint holds both easily."""
    a[i] = x[i] * x[i]
    b[i] = math.sin(x[i])


@pad.kernel
def k_reads_an_output(i, w, x, a, b):
    """b reads a back: a piece of b alone would miss a's store."""
    a[i] = sines(w, x[i])
    b[i] = cosines(w, x[i]) + a[i]


@pad.kernel
def k_series_through_scratch(i, w, x, scratch, a, b):
    """As ``k_two_series``, a's read back through a scratch array (a ``pad.Const``) the kernel writes: its
    piece's replay stores into it, on the one scratch copy of it that the pieces would share."""
    scratch[i] = x[i] * x[i]
    a[i] = sines(w, x[i]) * scratch[i]
    b[i] = cosines(w, x[i])


def pieces_of(kernel, args, active):
    kinds = [kind_of_value(a, f"argument {k + 1}") for k, a in enumerate(args)]
    k = compiler.analyse(kernel.fn, kinds, active, None, "cuda")
    return [sorted(g) for g in fission.pieces(k.low.body, k.act, k.low.kinds, k.loaded)]


def series_args():
    x = np.linspace(0.1, 0.9, 16)
    return (0.5, x, np.zeros(16), np.zeros(16)), (True, True, True, True)


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [(k_two_series, [["a"], ["b"]]), (k_nested_series, []), (k_reads_an_output, [])],
    ids=["independent", "nested", "reads an output"],
)
def test_only_independent_large_outputs_split(kernel, expected):
    assert pieces_of(kernel, *series_args()) == expected


def test_a_small_adjoint_stays_whole():
    x = np.linspace(0.1, 0.9, 16)
    assert pieces_of(k_small_outputs, (x, np.zeros(16), np.zeros(16)), (True, True, True)) == []


def test_inactive_outputs_do_not_count():
    """With b inactive (a ``pad.Const``) there is one output to differentiate: nothing to split."""
    args, _ = series_args()
    assert pieces_of(k_two_series, args, (True, True, True, False)) == []


def test_luleshs_kinematics_split_into_three_pieces():
    """The characteristic length; the new volume, its change and the monotonic Q's gradients (which need
    the volume too); the strain rate: three adjoints measured faster than one on an H100 (docs/benchmarks.md).
    The fault check's store (an inactive output) does not tie the pieces to the volume."""
    from apps.lulesh import kernels as K
    from apps.lulesh import mesh
    from apps.lulesh.hydro import Hydro

    h = Hydro(mesh.build(3, 1, 0, 11, 1, 1), pad.mpi.COMM_WORLD)
    s = h.initial_state()
    args = (h.nodelist, s.xv, s.volo, s.v, s.clock, h.vnew, h.delv, h.arealg, h.vdov, h.delx, h.delv_grad)
    args += (h.fault, h.earlier, h.flag)
    active = (False,) + (True,) * 10 + (False,) * 3
    assert pieces_of(K.k_kinematics, args, active) == [
        ["arealg"],
        ["delv", "delv_grad", "delx", "vnew"],
        ["vdov"],
    ]


def test_each_piece_is_a_kernel_of_its_own_outputs():
    """The CUDA adjoint's source shows both pieces; each reads its own output's seed and not the other's.
    CPU adjoints stay whole."""
    args, active = series_args()
    source = k_two_series.variant(args, "adjoint", active, target="cuda").source
    kernels = re.split(r"(?m)^def ", source)[1:]
    assert [k.split("(")[0] for k in kernels] == [
        "k_two_series_adjoint_cuda_0",
        "k_two_series_adjoint_cuda_1",
    ]
    assert re.findall(r"(?m)^# piece .*$", source) == [
        "# piece 1 of 2: the adjoint of a",
        "# piece 2 of 2: the adjoint of b",
    ]
    assert "_b_a[" in kernels[0] and "_b_b[" not in kernels[0]
    assert "_b_b[" in kernels[1] and "_b_a[" not in kernels[1]
    code = ["\n".join(line for line in k.splitlines() if not line.lstrip().startswith("#")) for k in kernels]
    assert "math.cos(" in code[0] and "math.sin(" not in code[0]  # each differentiates its own series alone
    assert "math.sin(" in code[1] and "math.cos(" not in code[1]
    cpu = k_two_series.variant(args, "adjoint", active).source
    assert re.findall(r"(?m)^def (\w+)", cpu) == ["k_two_series_adjoint"]


def test_pieces_that_would_rewrite_an_argument_stay_one_adjoint():
    (w, x, a, b), _ = series_args()
    args, active = (w, x, np.zeros(16), a, b), (True, True, False, True, True)
    assert pieces_of(k_series_through_scratch, args, active) == [["a"], ["b"]]
    variant = k_series_through_scratch.variant(args, "adjoint", active, target="cuda")
    assert variant.pieces == [] and variant.rewritten == {2}
