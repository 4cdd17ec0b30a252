"""Settings of the worker that runs the how-to guides' workflows (``tests/docs/test_docs_howto.py``).

The test settings, plus the app that imports the guides' modules, and their own queue, so that
the session's other worker (which does not have those modules) never takes their deliveries.
"""

from tests.settings import *  # noqa: F403
from tests.settings import DURABLEFLOW, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.docsapp"]

DOCS_QUEUE = "docs"
DURABLEFLOW = {**DURABLEFLOW, "DEFAULT_QUEUE": DOCS_QUEUE}
