"""`nqf._core._checks.check` without an error builder (issue 37 item 5: its type allows None)."""

import numpy as np
import pytest

from nqf._core._checks import check


def test_check_without_error_builder_raises_value_error_with_message():
    # error=None is meant for conditions that are always traced; a concrete failure must still
    # give a clear error (it used to call None: TypeError "'NoneType' object is not callable").
    with pytest.raises(ValueError, match="`M0` must be finite"):
        check(1.0, np.array([False, True]), None, "`M0` must be finite")
    assert check(2.0, np.array([False]), None, "unused") == 2.0
