"""The docs hold together: every file README.md and docs/*.md point at exists.

Two kinds of reference are checked: Markdown links (``[text](path)``), and the repo's own
paths written as code, the house style (`docs/activation.md`, `bench/overhead.py`): a code
span naming a ``.md`` file, or starting with one of the repo's own top-level directories.
Other code spans (upstream Megatron-LM's ``pretrain_gpt.py``, ``megatron/plugin/``) name
files outside this repo and are not checked.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from .conftest import REPO

_INLINE = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`([^`\n]+)`")
# Top-level directories of this repo whose names upstream does not also use.
_OWN = ("docs/", "fl_patch/", "bench/", "scripts/", "sitecustomize_template/", ".ci/", "tests/test_", "tests/support/")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("examples/**/*.md"))]


def references(text: str) -> list[str]:
    """Relative links, and code spans that name a file of this repo (see the module docstring)."""
    text = _FENCE.sub("", text)
    found = []
    for span in _CODE.findall(text):
        span = span.strip()
        if " " in span or span.startswith("-"):
            continue
        path = span.split("::")[0]
        if path.endswith(".md") or path.startswith(_OWN):
            found.append(path)
    text = _CODE.sub("", text)  # a link inside code is not a link
    links = _INLINE.findall(text) + _REFERENCE.findall(text)
    found += [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]
    return found


def _exists(document: Path, reference: str) -> bool:
    path = reference.split("#", 1)[0].rstrip(":")
    if any(c in path for c in "*?[<"):
        path = re.sub(r"<[^>]*>", "*", path)
        return any(glob.glob(str(base / path)) for base in (document.parent, REPO))
    return (document.parent / path).exists() or (REPO / path).exists()


def test_every_file_the_docs_point_at_exists() -> None:
    checked, broken = 0, []
    for document in documents():
        for reference in references(document.read_text(encoding="utf-8")):
            checked += 1
            if not _exists(document, reference):
                broken.append(f"{document.relative_to(REPO)}: {reference}")
    assert not broken, "references to files that do not exist:\n" + "\n".join(broken)
    assert checked > 50  # the docs do point at files: a reader that finds none is broken itself


def test_the_reference_reader() -> None:
    text = "see [a](docs/a.md#x) and [b][r], `bench/x.py`, `pretrain_gpt.py`, `y.md`, ![img](pic.png)\n"
    text += "[web](https://x.org) `[c](no.md)`\n\n[r]: other.md\n```\n`docs/fenced.md`\n```\n"
    assert references(text) == ["bench/x.py", "y.md", "docs/a.md#x", "other.md"]
    assert not _exists(REPO / "README.md", "docs/no-such-page.md")
    assert _exists(REPO / "docs" / "activation.md", "architecture.md")
    assert _exists(REPO / "README.md", "tests/support/<feature>/")


def test_every_option_and_variable_is_on_the_activation_page() -> None:
    """docs/activation.md's tables say what src/fl_patch/config/options.py (the CLI's one table) holds."""
    from fl_patch.config.options import COMMANDS, OPTIONS

    page = (REPO / "docs" / "activation.md").read_text(encoding="utf-8")
    missing = [flag for row in (*OPTIONS, *COMMANDS) for flag in row.flags if flag != "-h" and f"`{flag}" not in page]
    missing += [row.variable for row in OPTIONS if row.variable and f"`{row.variable}" not in page]
    assert not missing, missing
