"""The shared runner of the reproductions (`nqf.experiments._table`): rows -> today's JSON records."""

import json
import math

import pytest

from nqf.experiments._common import check, claim, new_figure
from nqf.experiments._table import Check, Claim, Reproduction, reproduce


def _claim_row(setting="paper", **kw):
    return Claim(
        "c",
        "the paper says",
        "Sec. 1",
        metric="m",
        value=0.5,
        criterion="<= 1",
        holds=True,
        setting=setting,
        why="w",
        **kw,
    )


def test_rows_give_the_records_of_check_and_claim():
    assert (
        Check("a", 0.5, 1.0).record()
        == check("a", 0.5, 1.0)
        == {"name": "a", "value": 0.5, "bound": 1.0, "passed": True}
    )
    assert Check("nan", float("nan"), 1.0).record()["passed"] is False
    for kw in ({}, {"expected": False}, {"revised": True}):
        ref = claim(
            "c",
            "the paper says",
            "Sec. 1",
            metric="m",
            value=0.5,
            criterion="<= 1",
            holds=True,
            setting="paper",
            why="w",
            **kw,
        )
        assert _claim_row(**kw).record() == ref
    with pytest.raises(ValueError, match="setting"):
        _claim_row(setting="nope").record()


def test_reproduce_writes_the_json_of_its_rows(tmp_path):
    def measure(quick):
        return {"quick": quick, "x": 2.0}

    rep = Reproduction(
        "demo",
        "A demo",
        measure,
        report=lambda q: {"settings": {"quick": q["quick"]}, "x": q["x"], "wall_time_s": {"step": 1.0, "total": None}},
        checks=lambda q: [Check("x <= 3", q["x"], 3.0), Check("x <= 1", q["x"], 1.0)],
        claims=lambda q: [_claim_row(expected=q["x"] < 1)],
        plot=lambda q: new_figure(1)[0],
    )
    res = reproduce(rep, tmp_path / "out", quick=True)
    assert res == json.loads((tmp_path / "out" / "demo.json").read_text())
    assert (tmp_path / "out" / "demo.png").exists()
    assert [k for k in res if k not in ("png", "json")] == [
        "name",
        "title",
        "quick",
        "settings",
        "x",
        "wall_time_s",
        "checks",
        "claims",
    ]
    assert (res["name"], res["title"], res["quick"], res["settings"]) == ("demo", "A demo", True, {"quick": True})
    assert [c["passed"] for c in res["checks"]] == [True, False]
    assert res["claims"][0]["verdict"] == "not expected at this setting"
    assert (
        res["wall_time_s"]["step"] == 1.0
        and math.isfinite(res["wall_time_s"]["total"])
        and res["wall_time_s"]["total"] >= 0
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        reproduce(rep, tmp_path / "file", quick=False)
