"""Cold start (issue 25, item 6): `import nqf`, `nqf --help` and `nqf list` import no JAX; the
public names load on first use; float64 holds whichever of nqf and jax is imported first; numba,
scipy.optimize/integrate and matplotlib load only when a path needs them; nqf's persistent
compilation cache is on by default (off with NQF_COMPILATION_CACHE=0, silent when the default
directory is unusable). Each case runs in a fresh interpreter (sys.modules is process state)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("jax", "diffrax", "equinox", "numba", "scipy.optimize", "scipy.integrate", "matplotlib", "optax")


def _run(code: str, tmp_path, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NQF_COMPILATION_CACHE", "JAX_ENABLE_X64", "EQX_ON_ERROR")}
    env.update({"XDG_CACHE_HOME": str(tmp_path / "xdg"), **env_extra})
    out = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_nqf_and_the_cli_help_and_list_import_no_jax(tmp_path):
    res = _run(
        f"""
        import contextlib, io, json, sys
        import nqf
        after_import = [m for m in {HEAVY!r} if m in sys.modules]
        from nqf.cli import main
        for argv in (["--help"], ["list"], ["reproduce", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
                main(argv)
        listed = out.getvalue()
        print(json.dumps({{"after_import": after_import, "after_cli": [m for m in {HEAVY!r} if m in sys.modules],
                          "experiments": sorted(m for m in sys.modules if m.startswith("nqf.experiments."))}}))
        """,
        tmp_path,
    )
    assert res == {"after_import": [], "after_cli": [], "experiments": []}


def test_names_load_on_first_use_and_float64_holds_in_either_import_order(tmp_path):
    for first, second in (("nqf", "jax"), ("jax", "nqf")):
        res = _run(
            f"""
            import json, sys
            import {first}
            import {second}
            import jax.numpy as jnp
            x64 = jnp.ones(2).dtype.name
            flow = nqf.solve_flow  # loads nqf.solvers (and the layers under it), not the rest
            print(json.dumps({{"x64": x64, "flag": bool(jax.config.jax_enable_x64),
                               "loaded": sorted(m for m in ("nqf.solvers", "nqf.theory", "nqf.network",
                                                           "nqf.validate", "nqf.experiments", "numba",
                                                           "scipy.optimize", "matplotlib") if m in sys.modules),
                               "module": flow.__module__}}))
            """,
            tmp_path,
        )
        assert res["x64"] == "float64" and res["flag"], (first, second)
        assert res["loaded"] == ["nqf.solvers"] and res["module"].startswith("nqf.solvers"), res


def test_old_flat_paths_alias_the_same_module_and_keep_ntk_extract_functions(tmp_path):
    res = _run(
        """
        import json, sys, types
        import nqf
        import nqf.ntk, nqf.extract, nqf.maps
        from nqf.oracles import theorem6
        print(json.dumps({"ntk": isinstance(nqf.ntk, types.FunctionType),
                          "extract": isinstance(nqf.extract, types.FunctionType),
                          "same": nqf.maps is sys.modules["nqf.dynamics._maps"],
                          "spec": nqf.maps.__spec__.name, "theorem6": theorem6 is nqf.theorem6,
                          "dir": set(nqf.__all__) <= set(dir(nqf))}))
        """,
        tmp_path,
    )
    assert res == {
        "ntk": True,
        "extract": True,
        "same": True,
        "spec": "nqf.dynamics._maps",
        "theorem6": True,
        "dir": True,
    }


CACHE = """
    import json, os, jax, nqf
    nqf.solve_flow  # nqf's layers import JAX: the cache is set then
    d = jax.config.jax_compilation_cache_dir
    jax.jit(lambda x: x * 3.0 - 1.0)(jax.numpy.arange(4.0)).block_until_ready()
    print(json.dumps({"dir": d, "files": bool(d) and bool(os.listdir(d)), "eqx": os.environ.get("EQX_ON_ERROR")}))
    """


def test_compilation_cache_is_on_by_default(tmp_path):
    res = _run(CACHE, tmp_path)
    assert res == {"dir": str((tmp_path / "xdg" / "nqf" / "jax").resolve()), "files": True, "eqx": None}


@pytest.mark.parametrize("off", ["0", "off"])
def test_compilation_cache_opt_out(tmp_path, off):
    assert _run(CACHE, tmp_path, NQF_COMPILATION_CACHE=off) == {"dir": None, "files": False, "eqx": None}


def test_unusable_default_cache_directory_is_skipped_silently(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    res = _run(CACHE, tmp_path, XDG_CACHE_HOME=str(blocker))  # ~/.cache under a file; warnings are errors
    assert res == {"dir": None, "files": False, "eqx": None}


def test_user_cache_directory_is_kept(tmp_path):
    mine = tmp_path / "mine"
    res = _run(CACHE, tmp_path, JAX_COMPILATION_CACHE_DIR=str(mine))
    assert res["dir"] == str(mine)  # and JAX's own thresholds (nqf sets nothing)


def test_every_public_name_loads_in_a_fresh_process(tmp_path):
    """Each name of nqf.__all__ resolves on first use in a fresh interpreter (the namespaces nqf.io and
    nqf.memory included, which are importable as nqf.io / nqf.memory too)."""
    res = _run(
        """
        import json, sys, nqf
        bad = []
        for name in nqf.__all__:
            try:
                getattr(nqf, name)
            except Exception as e:
                bad.append(f"{name}: {e!r}")
        print(json.dumps({"bad": bad, "io": sys.modules.get("nqf.io") is nqf.io}))
        """,
        tmp_path,
    )
    assert res == {"bad": [], "io": True}
