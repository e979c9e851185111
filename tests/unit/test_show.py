"""``pad.show`` of a small table of kernels, compared with the expected outputs committed beside them in
``tests/unit/show/``: a change to generated code shows in review as a diff of these files.

After a change meant to alter generated code, regenerate them on purpose and read the diff:

    PAD_REGENERATE=1 python -m pytest tests/unit/test_show.py
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import pad
from tests.unit.show import kernels

HERE = Path(__file__).parent / "show"
N = 8
CELLS = np.arange(N, dtype=np.int64) % 3


def _args(name: str) -> tuple:
    x, y = np.linspace(0.1, 1.0, N), np.full(N, 0.5)
    return {
        "step": (pad.Active(0.5), pad.Dup(x, x.copy()), pad.Dup(y, y.copy())),
        "pairs": (pad.Dup(x, x.copy()), pad.Dup(y, y.copy()), 0.5),
        "branch": (pad.Dup(x, x.copy()), pad.Dup(y, y.copy())),
        "scatter": (pad.Active(2.0), pad.Dup(x, x.copy()), CELLS, pad.Dup(y, y.copy())),
        "helped": (pad.Dup(x, x.copy()), pad.Dup(y, y.copy())),
        "zones": (pad.Dup(x, x.copy()), 0.3, pad.Dup(y, y.copy())),
    }[name]


CASES = [
    ("step", "primal", "cpu"),
    ("step", "tangent", "cpu"),
    ("step", "adjoint", "cpu"),
    ("step", "adjoint", "cuda"),
    ("pairs", "adjoint", "cpu"),
    ("branch", "adjoint", "cpu"),
    ("scatter", "adjoint", "cpu"),
    ("helped", "adjoint", "cpu"),
    ("zones", "adjoint", "cpu"),
]


def _shown(name: str, mode: str, target: str) -> str:
    source = pad.show(getattr(kernels, name), mode, *_args(name), target=target)
    # The first line names the kernel's file by its absolute path: the expected output has it relative.
    return source.replace(str(Path(kernels.__file__).resolve()), "tests/unit/show/kernels.py")


@pytest.mark.parametrize(("name", "mode", "target"), CASES, ids=["-".join(c) for c in CASES])
def test_show_matches_the_expected_output(name: str, mode: str, target: str) -> None:
    expected = HERE / f"{name}-{mode}-{target}.txt"
    shown = _shown(name, mode, target)
    if os.environ.get("PAD_REGENERATE"):
        expected.write_text(shown)
    assert expected.exists(), f"no expected output: run PAD_REGENERATE=1 python -m pytest {__file__}"
    assert shown == expected.read_text(), f"pad.show changed: see {__doc__}"


def test_the_readme_kernels_adjoint_reads_like_its_source() -> None:
    """Under the comment quoting the source line, the loop body of the README kernel's adjoint is its loads
    and the adjoint in a few lines: no zero initialisations, no copies, and no store of the primal's value
    (the primal launch made it, and nothing in the kernel reads it again)."""
    source = _shown("step", "adjoint", "cpu")
    lines = source.splitlines()
    start = next(k for k, line in enumerate(lines) if line.strip().startswith("# kernels.py:"))
    body = lines[start + 1 : next(k for k, line in enumerate(lines) if "_acc_b_a +=" in line)]
    assert lines[start].strip() == "# kernels.py:11  y[i] = a * math.sin(x[i]) + y[i] * y[i]"
    assert [line.strip() for line in body].count("y_i = y[i]") == 1  # y[i] loaded once
    assert not any(line.strip().startswith("y[i] =") for line in body)
    assert "_b_y[i] = 0.0" not in source  # the seed read is replaced by y's adjoint, not cleared and added to
    assert len(body) <= 11
    assert not any(line.strip().endswith("= 0.0") and "[" not in line for line in body)


def test_a_helpers_lines_are_quoted_from_its_own_file() -> None:
    """The code of a helper defined in another file than the kernel sits under the helper's lines, named
    by the helper's file; the kernel's line that calls it is named by the kernel's."""
    comments = [line.strip() for line in _shown("helped", "primal", "cpu").splitlines() if ".py:" in line][1:]
    assert comments == [
        "# kernels.py:39  y[i] = damped(x[i], 0.5)",
        "# helpers.py:10  return v * math.exp(-rate * v)",
        "# kernels.py:39  y[i] = damped(x[i], 0.5)",
    ]
