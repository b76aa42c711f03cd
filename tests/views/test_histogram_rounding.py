"""A histogram of values equal up to rounding (a constant step time gives 10 ms and 10.000000000000002
ms gaps) is one narrow range, not numpy's "too many bins" error."""

from __future__ import annotations

import numpy as np

from servesim.views.shape import histogram


def test_values_equal_up_to_rounding_make_one_range() -> None:
    h = histogram("itl_ms", "ITL", np.array([10.0, 10.000000000000002, 10.0]), "ms", bins=40)
    assert h.count == 3 and sum(h.counts) == 3
    assert h.edges[0] <= 10.0 <= h.edges[-1]
