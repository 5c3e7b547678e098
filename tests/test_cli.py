"""The `nqf` command line through `nqf.cli.main`: reproduce, list, validate, errors, exit codes."""

import json

import pytest

import nqf.experiments
import nqf.validate
from _quick_runs import quick_run
from nqf.cli import main


@pytest.mark.parametrize("name", ["fig3", "fig3-powerlaw"])
def test_reproduce_quick_writes_png_and_json(name, tmp_path_factory):
    rc, out, stdout, result = quick_run(name, tmp_path_factory)
    assert rc == 0, stdout
    png = out / f"{name}.png"
    assert png.exists() and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result is not None
    assert result["checks"] and all(c["passed"] for c in result["checks"])
    for c in result["checks"]:
        assert set(c) == {"name", "value", "bound", "passed"}
    assert "checks passed" in stdout and "FAIL" not in stdout
    assert f"{name}.json" in stdout


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in nqf.experiments.EXPERIMENTS:
        assert name in out


def test_unknown_figure_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig99", "--out", "unused"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown figure 'fig99'" in err
    for name in nqf.experiments.EXPERIMENTS:
        assert name in err


def test_no_command_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "reproduce" in out and "validate" in out and "list" in out
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--out" in out and "fig3-powerlaw" in out


def _fake_experiment(passed):
    def run(out_dir, quick=False):
        return {"checks": [{"name": "fake check", "value": 1.0, "bound": 0.5 if not passed else 2.0,
                            "passed": passed}], "png": "x.png", "json": "x.json"}
    return run


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_reproduce_exit_code_follows_checks(monkeypatch, capsys, tmp_path, passed, code):
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "fake", _fake_experiment(passed))
    assert main(["reproduce", "fake", "--out", str(tmp_path)]) == code
    out = capsys.readouterr().out
    assert "fake check" in out
    assert ("FAIL" in out) == (not passed)


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_validate_table_json_and_exit_code(monkeypatch, capsys, tmp_path, passed, code):
    records = [
        {"name": "theorem6 glv eps=1e-03: max rel err z", "value": 1e-10, "bound": 1e-8, "passed": True},
        {"name": "other", "value": float("nan") if not passed else 0.0, "bound": 1.0, "passed": passed},
    ]
    seen = {}

    def fake_validate(eps_values=(1e-3, 1e-6, 1e-12), **kw):
        seen["eps"] = eps_values
        return records

    monkeypatch.setattr(nqf.validate, "validate", fake_validate)
    path = tmp_path / "v.json"
    assert main(["validate", "--json", str(path), "--eps", "1e-3", "1e-9"]) == code
    assert seen["eps"] == (1e-3, 1e-9)
    out = capsys.readouterr().out
    assert "theorem6 glv eps=1e-03" in out and "value" in out and "bound" in out
    data = json.loads(path.read_text())
    assert [c["name"] for c in data["checks"]] == [r["name"] for r in records]
    assert data["checks"][1]["passed"] is passed


def test_validate_bad_eps_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--eps", "-1"])
    assert exc.value.code == 2
    assert "eps" in capsys.readouterr().err


def test_bad_out_dir_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fig3", "--quick", "--out", str(f)])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err
