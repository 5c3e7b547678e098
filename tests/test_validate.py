import importlib
import math

import pytest

import nqf

V = importlib.import_module("nqf.validate")


def test_validate_one_eps():
    seen = []
    results = V.validate(eps_values=(1e-6,), progress=seen.append)
    assert results and seen == results
    for rec in results:
        assert set(rec) == {"name", "value", "bound", "passed"}
        assert isinstance(rec["name"], str) and isinstance(rec["passed"], bool)
        assert isinstance(rec["value"], float) and isinstance(rec["bound"], float)
    failed = [r for r in results if not r["passed"]]
    assert not failed, failed
    names = " ".join(r["name"] for r in results)
    for key in ("theorem6", "theorem7", "theorem16", "proposition7"):
        assert key in names
        assert any(key in r["name"] and "refuse" in r["name"] for r in results)
    ntk = [r for r in results if r["name"] == "ntk: E25 vs autodiff"]
    assert len(ntk) == 1 and ntk[0]["bound"] == 1e-12
    assert sum(r["name"] == "flow E10 vs W-space" for r in results) == 1
    flow = [r for r in results if r["name"].startswith(("theorem6", "theorem7", "theorem16", "proposition7"))
            and "refuse" not in r["name"]]
    assert flow and all(r["bound"] == 1e-8 and r["value"] <= 1e-8 for r in flow)
    refusals = [r for r in results if "refuse" in r["name"]]
    assert all(r["value"] > r["bound"] for r in refusals)


def test_validate_registry_extensible(monkeypatch):
    monkeypatch.setattr(V, "CHECKS", [])

    @V.register
    def ok(eps_values):
        return [V.record(f"dummy eps={e}", 0.5 * e, e) for e in eps_values]

    @V.register
    def broken(eps_values):
        raise RuntimeError("boom")

    res = V.validate((1.0, 2.0))
    assert [r["passed"] for r in res] == [True, True, False]
    assert "boom" in res[-1]["name"] and math.isnan(res[-1]["value"])
    with pytest.raises(ValueError):
        V.validate(())
    assert nqf.validate is V
