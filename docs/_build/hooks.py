"""mkdocs hooks: the generated reference pages (``generate.py``) join the site's files."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate  # noqa: E402


def on_files(files, config):
    for path, content in generate.pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
