"""Every test in this folder runs twice: against the pure-Python codec and against the compiled core.

The two must agree byte for byte (golden bytes, Hypothesis round trips) and reject the same corruptions.
A module that compares the two itself sets ``COMPARES_IMPLEMENTATIONS = True`` and runs once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tierlog.tiering.codec import _accel

NOT_LOADED = pytest.mark.skipif(_accel.available is None, reason="the compiled codec is not loaded")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "codec_implementation" not in metafunc.fixturenames:
        return
    if getattr(metafunc.module, "COMPARES_IMPLEMENTATIONS", False):
        params = [pytest.param("both", marks=NOT_LOADED)]
    else:
        params = [pytest.param("pure"), pytest.param("compiled", marks=NOT_LOADED)]
    metafunc.parametrize("codec_implementation", params, indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def codec_implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Switch the codec to one implementation for the whole module (module scope: Hypothesis-safe)."""
    implementation: str = request.param
    if implementation == "both":
        yield implementation
        return
    with _accel.use(implementation):
        yield implementation
