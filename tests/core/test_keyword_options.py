"""Issue 37 item 2: many documented keywords read from a ``**options`` catch-all keep Python's
own errors (an unknown keyword, a missing required one) and their defaults."""

import numpy as np
import pytest

import nqf
from nqf._core._checks import REQUIRED, keyword_options


def test_keyword_options_reads_in_order_with_defaults():
    assert keyword_options("f", {"a": 1, "c": 3}, a=REQUIRED, b=0, c=None) == (1, 0, 3)


def test_keyword_options_refuses_unknown_and_missing_keywords():
    with pytest.raises(TypeError, match=r"f\(\) got an unexpected keyword argument 'lrate'"):
        keyword_options("f", {"a": 1, "lrate": 0.1}, a=REQUIRED)
    with pytest.raises(TypeError, match=r"f\(\) missing required keyword-only argument: 'a'"):
        keyword_options("f", {}, a=REQUIRED, b=0)


@pytest.mark.parametrize(
    "call",
    [
        lambda d, W0: nqf.closed_sgd(d, W0=W0, lr=0.1, steps=2, lrate=0.1),
        lambda d, W0: nqf.train_w(d, W0, lr=0.1, steps=2, lrate=0.1),
        lambda d, W0: nqf.map_term(d, W0=W0, lr=0.1, lrate=0.1),
        lambda d, W0: nqf.closed_sgd_sweep(d, W0=W0, lr=0.1, steps=2, lrate=0.1),
        lambda d, W0: nqf.asymptote(d, W0=W0, tolerance=1e-7),
    ],
)
def test_public_functions_name_an_unknown_keyword(call):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 3, 3))
    data = nqf.DenseData((A + A.transpose(0, 2, 1)) / 2, rng.standard_normal(4))
    with pytest.raises(TypeError, match="unexpected keyword argument '(lrate|tolerance)'"):
        call(data, 0.1 * rng.standard_normal((3, 2)))
