"""LULESH's inverse problem: the gradient of a misfit objective through the whole run, and the example in
docs/examples that recovers hidden parameters with it."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

import pad.mpi
from apps.lulesh import adjoint, mesh
from apps.lulesh.hydro import PARAMETERS, Hydro, default_parameters

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "lulesh_inverse.py")
CYCLES = 15


def _hydro(size: int) -> Hydro:
    return Hydro(mesh.build(size, 1, 0, 11, 1, 1), pad.mpi.COMM_WORLD)


def _final(h: Hydro, parameters: dict[str, float], field: str) -> np.ndarray:
    s = h.initial_state(parameters)
    h.setup(s)
    h.advance(s, CYCLES)
    return h.memory.get(getattr(s, field)).copy()


@pytest.mark.parametrize("field", ["e", "xv"])
def test_misfit_gradient_matches_central_differences(field):
    """dJ/d(parameters, coordinates) of a weighted least-squares misfit to a field made with other parameters."""
    h = _hydro(3)
    parameters = default_parameters(3, 1)
    observed = _final(h, parameters | {"einit": 1.1 * parameters["einit"], "hgcoef": 2.5}, field)
    weights = 1.0 + np.arange(observed.size).reshape(observed.shape) % 3  # non-uniform
    misfit = adjoint.LeastSquares(h, field, observed, weights / np.sum(observed**2))
    result = adjoint.sensitivity(h, CYCLES, parameters, snapshots=4, objective=misfit)
    assert result.cycles == CYCLES and result.value > 0.0
    assert result.value == adjoint.final_value(h, CYCLES, parameters, objective=misfit)
    want = 0.5 * np.sum(weights * (_final(h, parameters, field) - observed) ** 2) / np.sum(observed**2)
    assert abs(result.value - want) <= 1e-12 * want
    r = adjoint.check_sensitivity(h, result, parameters, misfit)
    assert r["passed"], r
    assert {c["what"] for c in r["entries"]} == {*PARAMETERS, "coords . direction"}
    assert result.parameters["einit"] != 0.0 and result.parameters["hgcoef"] != 0.0


def test_the_default_objective_is_the_final_origin_energy():
    h = _hydro(3)
    parameters = default_parameters(3, 1)
    result = adjoint.sensitivity(h, CYCLES, parameters)
    assert result.value == result.energy == _final(h, parameters, "e")[0]


def test_misfit_at_the_observation_is_zero_with_a_zero_gradient():
    h = _hydro(3)
    parameters = default_parameters(3, 1)
    misfit = adjoint.LeastSquares(h, "e", _final(h, parameters, "e"))
    result = adjoint.sensitivity(h, CYCLES, parameters, objective=misfit)
    assert result.value == 0.0 and all(g == 0.0 for g in result.parameters.values())
    assert not result.coords.any()


@pytest.mark.parametrize(
    ("field", "observed", "weights", "message"),
    [
        ("clock", np.zeros(4), 1.0, "field 'clock' is not one of the state's fields"),
        ("params", np.zeros(7), 1.0, "field 'params' is not one of"),
        ("e", np.zeros(26), 1.0, "observed e has shape (26,), the field (27,)"),
        ("e", np.zeros(27), -1.0, "weights must be finite and non-negative"),
        ("e", np.full(27, np.nan), 1.0, "observations finite"),
        ("e", np.zeros(27), np.ones(5), "weights of shape (5,) do not fit the field's (27,)"),
    ],
)
def test_bad_misfits_are_refused_naming_the_cause(field, observed, weights, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        adjoint.LeastSquares(_hydro(3), field, observed, weights)


def test_the_example_recovers_the_hidden_values(tmp_path, capsys):
    """docs/examples/lulesh_inverse.py at -s 2 (its default is -s 3; -s 2 keeps the test short): L-BFGS-B
    with pad's gradient recovers the hidden einit and hgcoef to 1e-6, Nelder-Mead to 1e-5."""
    spec = importlib.util.spec_from_file_location("lulesh_inverse", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "inverse.json"
    result = example.main(["-s", "2", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    lbfgs, nelder_mead = result["methods"]["L-BFGS-B"], result["methods"]["Nelder-Mead"]
    assert lbfgs["max_rel_error"] < 1e-6 and nelder_mead["max_rel_error"] < 1e-5, result
    assert lbfgs["forward_solves"] == lbfgs["adjoint_solves"] > 0 and nelder_mead["adjoint_solves"] == 0
    assert result["hidden"] == {"einit": 1.25 * result["start"]["einit"], "hgcoef": 0.7 * 3.0}
    assert "L-BFGS-B" in capsys.readouterr().out
