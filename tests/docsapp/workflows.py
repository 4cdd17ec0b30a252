"""Imports the how-to guides' modules that ``DURABLEFLOW_DOCS_MODULES`` names (comma-separated,
on the ``PYTHONPATH``): the workflows their code blocks define, registered in this worker."""

import importlib
import os

for _name in filter(None, os.environ.get("DURABLEFLOW_DOCS_MODULES", "").split(",")):
    importlib.import_module(_name)
