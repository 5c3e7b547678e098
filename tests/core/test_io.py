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
