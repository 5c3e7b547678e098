"""nqf.io's class registry: files name classes by `__name__`, so a user's class of the same name
never takes over nqf's (it is not registered by accident, and registering it is refused), and a
user's own result type round-trips once registered."""

import dataclasses

import numpy as np
import pytest

import nqf

DATA = nqf.DenseData(np.arange(8.0).reshape(2, 2, 2) + np.swapaxes(np.arange(8.0).reshape(2, 2, 2), 1, 2), [1.0, 2.0])


def test_a_user_class_with_an_nqf_name_does_not_take_over(tmp_path):
    nqf.save(DATA, tmp_path / "before")

    @dataclasses.dataclass(frozen=True)
    class DenseData(nqf.io.Saveable):  # same name as nqf's; defined outside nqf: not registered
        note: str = "mine"

    with pytest.raises(TypeError, match="nqf.save cannot write a DenseData"):
        DenseData().save(tmp_path / "mine")
    path = nqf.save(DATA, tmp_path / "after")
    for p in (tmp_path / "before.npz", path):
        back = nqf.load(p)
        assert type(back) is nqf.DenseData and np.array_equal(back.A, DATA.A)
    with pytest.raises(ValueError, match="a class named 'DenseData' is registered already"):
        nqf.io.register(DenseData)


def test_a_registered_user_result_round_trips(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class MyRunRecord(nqf.io.Saveable):
        losses: np.ndarray
        data: nqf.DenseData
        label: str

    nqf.io.register(MyRunRecord)
    rec = MyRunRecord(np.array([1.0, 0.5]), DATA, "run 1")
    back = nqf.load(rec.save(tmp_path / "rec"))
    assert type(back) is MyRunRecord and back.label == "run 1"
    assert np.array_equal(back.losses, rec.losses) and np.array_equal(back.data.A, DATA.A)


def test_a_file_that_is_not_an_nqf_result_is_named(tmp_path):
    """Issue 36 B11: a non-zip file, a truncated result and a plain .npy are refused with a
    ValueError naming the path (not numpy's pickle message or a raw BadZipFile); a missing file
    stays a FileNotFoundError."""
    whole = open(nqf.save(DATA, tmp_path / "good"), "rb").read()
    (tmp_path / "junk.nqf").write_bytes(b"not an nqf file")
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 2])
    np.save(tmp_path / "plain.npy", np.ones(3))
    for name, why in (("junk.nqf", "numpy.load could not read it"), ("cut.npz", "BadZipFile"), ("plain.npy", "npy")):
        with pytest.raises(ValueError, match=rf"{name}' is not an nqf result file.*{why}"):
            nqf.load(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        nqf.load(tmp_path / "missing.npz")
