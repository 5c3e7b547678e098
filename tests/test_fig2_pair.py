"""The side-by-side trainer of fig2 (nqf.experiments._pair): its NQF trajectory equals
nqf.train_w on the closed-form structure data (same optimizer formulas, independent NQF
evaluation: feed-forward form vs Tr[W W^T A] on LowRankData)."""

import numpy as np
import pytest

import nqf
from nqf.experiments._pair import train_pair
from nqf.modules import MLP


@pytest.mark.parametrize("opt,name", [("gd", "sgd"), ("momentum", "momentum"), ("adam", "adam")])
def test_pair_nqf_matches_train_w(opt, name, rng):
    mod = MLP(4, 2)
    xs = rng.standard_normal((6, 4)) / 2.0
    y = rng.standard_normal((6, 2))
    W0 = 0.1 * rng.standard_normal((mod.p, 3))
    lr = 0.05 if opt != "adam" else 0.01
    r = train_pair(mod, xs, y, W0, optimizer=opt, lr=lr, steps=20, save_every=10)
    ref = nqf.train_w(mod.structure(xs, y), W0, lr=lr, steps=20, optimizer=name, save_every=10)
    np.testing.assert_allclose(r["F_nqf"].reshape(3, -1), ref.outputs, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(r["loss_nqf"], ref.loss, rtol=1e-10)
