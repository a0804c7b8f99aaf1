"""Project-wide pytest settings.

Under CI (``CI=true``) hypothesis runs derandomized: the same examples every run, so a
red CI means a real regression, not an unlucky draw. Locally it explores new examples on
every run, which is how new counterexamples are found.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
