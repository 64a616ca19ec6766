"""Hypothesis profiles for the fuzz suites (tests/test_fuzz_*.py), and the examples each test runs under them.

``default``: what CI runs (small example counts, derandomised so a CI run is reproducible; the whole fuzz
suite stays within ~2 minutes on 2 cores with ``-n 2``). ``long``: a deeper, randomised run, selected with
Hypothesis' own option::

    python -m pytest tests/test_fuzz_*.py -p tests._hypothesis_profiles --hypothesis-profile=long

(``-p`` registers the profiles before Hypothesis' plugin loads the one named; tests/conftest.py importing this
module does the same for every run.) Each fuzz test asks ``fuzz(n)``: n examples under ``default``, ``LONG_FACTOR``
times n under ``long``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
          HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]  # fmt: skip

#: How many times more examples each fuzz test runs under the ``long`` profile (PORTKERN_FUZZ_LONG_FACTOR sizes a
#: deep run to the time there is: 50 runs for hours on 2 cores).
LONG_FACTOR = int(os.environ.get("PORTKERN_FUZZ_LONG_FACTOR", "50"))

settings.register_profile("default", deadline=None, derandomize=True, suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("long", deadline=None, derandomize=False, suppress_health_check=_QUIET, print_blob=True,
                          max_examples=100 * LONG_FACTOR)  # fmt: skip


def fuzz(n: int) -> settings:
    """Settings for a fuzz test: ``n`` examples under the default profile, LONG_FACTOR x n under ``long``
    (read when the test module is imported, after Hypothesis' plugin loaded the profile)."""
    factor = LONG_FACTOR if settings.get_current_profile_name() == "long" else 1
    return settings(max_examples=n * factor)
