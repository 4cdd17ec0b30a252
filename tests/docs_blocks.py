"""The code blocks of the documentation's pages, as the suite runs them.

A block is a fenced block of a page in ``docs/``: its language, its ``title="..."`` (the
file it belongs to, or ``python manage.py shell``) and its text, with pymdownx.snippets'
``--8<-- "path"`` lines replaced by the file they include, as the site shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import ROOT

DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_TITLE = re.compile(r'title="([^"]*)"')
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)
# What a ``$ command  # comment`` line leaves out: the comment.
_COMMENT = re.compile(r"\s+#.*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    title: str
    text: str

    def __str__(self) -> str:
        return f"docs/{self.page}:{self.line} ({self.language}{f' {self.title}' if self.title else ''})"

    def commands(self) -> list[str]:
        """A console block's commands: its ``$ `` lines, without their comments."""
        return [_COMMENT.sub("", line[2:]).strip() for line in self.text.splitlines() if line.startswith("$ ")]

    def expected_prints(self) -> list[str]:
        """``print(...)  # text``: the text each such line of a Python block says it prints."""
        found = []
        for line in self.text.splitlines():
            match = re.match(r"\s*print\(.*\)\s+#\s+(.+)$", line)
            if match:
                found.append(match.group(1).strip())
        return found


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    found = []
    for match in _FENCE.finditer(text):
        info = match.group("info").strip()
        language = info.split()[0] if info else ""
        title = _TITLE.search(info)
        body = _dedent(match.group("body"), len(match.group("indent")))
        body = _SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text().rstrip("\n"), body)
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, language, title.group(1) if title else "", body))
    return found


def pages(folder: str) -> list[str]:
    return sorted(str(path.relative_to(DOCS)) for path in (DOCS / folder).glob("*.md"))


def _dedent(body: str, indent: int) -> str:
    return "\n".join(line[indent:] for line in body.splitlines()) + "\n"


def marked_block(page: str, name: str) -> str:
    """The code block a page marks with ``<!-- install:<name> -->``."""
    text = (DOCS / page).read_text()
    found = re.search(rf"<!-- install:{name} -->\s*```[^\n]*\n(.*?)```", text, re.S)
    assert found, f"docs/{page} has no install:{name} block"
    return found.group(1)


def page_path(page: str) -> Path:
    return DOCS / page
