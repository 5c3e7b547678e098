"""The `nqf` command line through `nqf.cli.main`: reproduce, list, validate, errors, exit codes."""

import json

import pytest

import nqf.experiments
import nqf.validate
from _quick_runs import quick_run
from nqf.cli import main


@pytest.mark.slow  # a reproduction
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
        return {
            "checks": [{"name": "fake check", "value": 1.0, "bound": 0.5 if not passed else 2.0, "passed": passed}],
            "png": "x.png",
            "json": "x.json",
        }

    return run


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_reproduce_exit_code_follows_checks(monkeypatch, capsys, tmp_path, passed, code):
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "fake", _fake_experiment(passed))
    assert main(["reproduce", "fake", "--out", str(tmp_path)]) == code
    out = capsys.readouterr().out
    assert "fake check" in out
    assert ("FAIL" in out) == (not passed)


def _fake_claims_experiment(verdicts, check_passed=True):
    from nqf.experiments._common import claim

    def run(out_dir, quick=False):
        claims = [
            claim(
                f"fake claim {i}",
                "the paper says so",
                "Sec. 0",
                metric="m",
                value=float(i),
                criterion="<= 1",
                holds=v != "not reproduced",
                expected=v != "not expected at this setting",
                setting="paper",
                why="w",
            )
            for i, v in enumerate(verdicts)
        ]
        return {
            "checks": [
                {"name": "fake check", "value": 0.0, "bound": 1.0 if check_passed else -1.0, "passed": check_passed}
            ],
            "claims": claims,
            "sensitivity": {"skipped": True, "reason": "quick mode", "rows": []},
            "png": "x.png",
            "json": "x.json",
        }

    return run


@pytest.mark.parametrize(
    "verdicts, check_passed, strict, code",
    [
        (["reproduced", "reproduced"], True, False, 0),
        (["reproduced", "reproduced"], True, True, 0),
        (["reproduced", "not reproduced"], True, False, 0),
        (["reproduced", "not reproduced"], True, True, 1),
        (["not expected at this setting"], True, True, 0),
        (["reproduced"], False, False, 1),
        (["reproduced"], False, True, 1),
    ],
)
def test_reproduce_strict_claims_exit_code(monkeypatch, capsys, tmp_path, verdicts, check_passed, strict, code):
    """Only the checks set the exit status; --strict-claims also fails on a claim that is "not
    reproduced" (never on "not expected at this setting"). The claims table follows the checks."""
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "fake", _fake_claims_experiment(verdicts, check_passed))
    argv = ["reproduce", "fake", "--out", str(tmp_path)] + (["--strict-claims"] if strict else [])
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.index("fake check") < out.index("fake claim 0") < out.index(f"{len(verdicts)} claims:")
    for v in set(verdicts):
        assert v in out
    assert ("--strict-claims:" in out) == (strict and check_passed and "not reproduced" in verdicts)


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


# ---- help, info, progress (issue 8) ---------------------------------------------------------

import io  # noqa: E402

import nqf.cli  # noqa: E402


def _help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_every_subcommand_has_complete_help(capsys):
    top = _help([], capsys)
    sub = nqf.cli.build_parser()._subparsers._group_actions[0]
    assert set(sub.choices) >= {"list", "reproduce", "validate", "compress", "info"}
    for name, parser in sub.choices.items():
        assert name in top  # listed, with a one-line help
        out = _help([name], capsys)
        assert parser.description and len(parser.description) > 40, name
        assert f"usage: nqf {name}" in out
        for action in parser._actions:  # every option is documented
            if action.option_strings and action.dest != "help":
                assert action.help, (name, action.option_strings)


def test_reproduce_help_lists_the_registry(monkeypatch, capsys):
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "fig99-new", _fake_experiment(True))
    monkeypatch.setitem(nqf.experiments.TITLES, "fig99-new", "A figure added after the CLI was written")
    out = _help(["reproduce"], capsys)
    for name in nqf.experiments.EXPERIMENTS:
        assert name in out
    assert "A figure added after the CLI was written" in out
    assert "--no-progress" in out and "--progress" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert nqf.__version__ in capsys.readouterr().out


def test_info(capsys, monkeypatch):
    monkeypatch.delenv("NQF_COMPILATION_CACHE", raising=False)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for word in (
        "nqf " + nqf.__version__,
        "python",
        "numpy",
        "scipy",
        "jax",
        "jaxlib",
        "diffrax",
        "equinox",
        "numba",
        "JAX backend",
        "devices",
        "float64",
        "enabled",
        "compilation cache",
    ):
        assert word in out, word
    assert main(["info", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["versions"]["nqf"] == nqf.__version__
    assert rep["float64"] is True and rep["jax_devices"]
    assert rep["compilation_cache"]["NQF_COMPILATION_CACHE"] is None
    monkeypatch.setenv("NQF_COMPILATION_CACHE", "/some/dir")
    assert nqf.cli.info()["compilation_cache"]["NQF_COMPILATION_CACHE"] == "/some/dir"


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


@pytest.mark.parametrize(
    "flag, env, tty, expected",
    [
        (None, None, True, True),
        (None, None, False, False),
        (None, "0", True, False),
        (None, "1", False, True),
        (None, "off", True, False),
        (False, "1", True, False),
        (True, "0", False, True),
    ],
)
def test_progress_enabled(monkeypatch, flag, env, tty, expected):
    if env is None:
        monkeypatch.delenv("NQF_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("NQF_PROGRESS", env)
    assert nqf.cli.progress_enabled(flag, _Stream(tty)) is expected


def _staged_experiment(seen):
    def run(out_dir, quick=False, progress=None):
        seen["progress"] = progress
        if progress is not None:
            progress("stage one")
            progress("stage two", {"x": 1})
        return _fake_experiment(True)(out_dir, quick)

    return run


@pytest.mark.parametrize(
    "argv, env, on",
    [
        (["--progress"], None, True),
        (["--no-progress"], None, False),
        ([], None, False),
        ([], "1", True),
        ([], "0", False),
        (["--progress"], "0", True),
    ],
)
def test_reproduce_progress_on_off(monkeypatch, capsys, tmp_path, argv, env, on):
    if env is None:
        monkeypatch.delenv("NQF_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("NQF_PROGRESS", env)
    seen = {}
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "staged", _staged_experiment(seen))
    assert main(["reproduce", "staged", "--out", str(tmp_path)] + argv) == 0
    out, err = capsys.readouterr()
    assert "fake check" in out  # stdout is the same either way
    if on:
        lines = err.strip().splitlines()
        assert lines[0].startswith("[staged] running")
        assert "[staged] stage one" in err and "[staged] stage two" in err
        assert lines[-1].startswith("[staged] done, 1/1 checks passed, in ") and lines[-1].endswith(" s")
        assert callable(seen["progress"])
    else:
        assert err == "" and seen["progress"] is None


def test_reproduce_progress_without_stages(monkeypatch, capsys, tmp_path):
    """An experiment without a `progress` parameter still gets the start and end lines."""
    monkeypatch.setitem(nqf.experiments.EXPERIMENTS, "plain", _fake_experiment(False))
    assert main(["reproduce", "plain", "--out", str(tmp_path), "--progress"]) == 1
    err = capsys.readouterr().err
    assert "[plain] running" in err and "[plain] done, 0/1 checks passed" in err


def test_validate_progress(monkeypatch, capsys):
    records = [{"name": f"check {i}", "value": 0.0, "bound": 1.0, "passed": i != 1} for i in range(3)]

    def fake_validate(eps_values=(1e-3,), progress=None):
        for r in records:
            if progress is not None:
                progress(r)
        return records

    monkeypatch.setattr(nqf.validate, "validate", fake_validate)
    assert main(["validate", "--progress"]) == 1
    err = capsys.readouterr().err
    assert "[validate] 3 checks, 1 failed: check 2" in err
    assert "[validate] 3 checks, 1 failed, in " in err
    assert main(["validate", "--no-progress"]) == 1
    assert capsys.readouterr().err == ""


def test_progress_line_overwrites_on_a_terminal():
    stream = _Stream(True)
    prog = nqf.cli._Progress("t", True, stream)
    prog.status("a")
    prog.status("b")
    prog.line("end")
    text = stream.getvalue()
    assert text.startswith("[t] a (") and "\r\033[K[t] b (" in text and text.endswith("\r\033[K[t] end\n")
    stream = _Stream(False)
    prog = nqf.cli._Progress("t", True, stream)
    prog.status("a")
    prog.line("end")
    assert stream.getvalue().splitlines()[0].startswith("[t] a (") and "\r" not in stream.getvalue()
