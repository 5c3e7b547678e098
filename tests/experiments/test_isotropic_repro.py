"""`nqf reproduce isotropic --quick`: Theorem 7's a = 2 branch (issue 27, item 2)."""

import pytest

from _quick_runs import quick_run

pytestmark = pytest.mark.slow


def test_isotropic_quick(tmp_path_factory):
    rc, _, stdout, res = quick_run("isotropic", tmp_path_factory)
    assert rc == 0 and res is not None, stdout
    assert all(c["passed"] for c in res["checks"])
    ign = res["ignition"][0]
    assert ign["eps"] == 1e-6 and ign["rel_error"] < 1e-5  # a = 1 would be a factor 2 off
    claims = {c["name"]: c for c in res["claims"]}
    assert claims["isotropic: ignition times = E19 with a = 2"]["verdict"] == "reproduced"
    pl = res["power_law"]
    assert pl["fit"]["is_power_law"] and pl["theorem9"] == 1.5
    assert pl["E22"] > pl["theorem9"]  # finite eps steepens (E22)
    assert all(c["verdict"] in ("reproduced", "not reproduced") for c in res["claims"])
    appr = res["approximate"]
    assert appr["residual"][0] > 0.5 and appr["residual"][-1] < 0.15  # m = 10 vs 2560
    assert appr["oracle_error"][-1] < 0.25 * appr["oracle_error"][0]
