"""Project-wide pytest settings.

Under CI (``CI=true``) hypothesis runs derandomized: the same examples every run, so a
red CI means a real regression, not an unlucky draw. Locally it explores new examples on
every run, which is how new counterexamples are found.
"""

import os

from hypothesis import settings


def pytest_addoption(parser):
    # Here, in the root conftest, because pytest reads options before it collects
    # tests/faults/ (the fault-injection suite, which uses it).
    parser.addoption("--faults-long", action="store_true", default=False,
                     help="fault injection soak run: many more seeds and kills (tests/faults/)")

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
