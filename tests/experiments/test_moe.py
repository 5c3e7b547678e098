"""`nqf reproduce moe --quick`: the mixture of experts (Proposition 5) against its NQF."""

import json

import numpy as np
import pytest

from _quick_runs import quick_run

pytestmark = pytest.mark.slow  # reproductions (python -m pytest -m slow)


def test_moe_quick(tmp_path_factory):
    rc, out, stdout, res = quick_run("moe", tmp_path_factory)
    assert rc == 0, stdout
    assert res == json.loads((out / "moe.json").read_text())
    assert (out / "moe.png").exists()
    assert len(res["checks"]) == 4 and all(c["passed"] for c in res["checks"])
    assert abs(res["init_gap"]["order"] - 4.0) <= 0.2
    assert 1.8 <= res["lr_order"]["ratio"] <= 2.2
    small, large = res["results"]["sigma=0.01"], res["results"]["sigma=0.2"]
    # the module's own loss moves: it learns (not a trivially flat comparison)
    assert small["final_loss_module"] < 0.05 * small["initial_loss"]
    # the NQF neglects more at sigma = 0.2 than at 0.01: the module-NQF gap grows
    assert large["loss_gap_module_vs_nqf_gd"] > 10 * small["loss_gap_module_vs_nqf_gd"]
    assert large["gate_preactivation"]["ratio"] > 1 > small["gate_preactivation"]["ratio"]
    names = [c["name"] for c in res["claims"]]
    assert names == [
        "moe gd sigma=0.01: flow predicts the loss curve",
        "moe gd sigma=0.01: tracks",
        "moe gd sigma=0.2: departs",
    ]
    for c in res["claims"]:
        holds = c["value"] >= 0.1 if "departs" in c["name"] else c["value"] <= 0.05
        assert c["verdict"] == ("reproduced" if holds else "not reproduced"), c
    assert np.isfinite(res["wall_time_s"])
