"""The README's figures are the docs' figures: each status line names the doc its figures are
measured in, and every figure of the line (a decimal, a percentage, a ratio) must be there too,
so a figure measured again cannot be updated in one place and left stale in the other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)+(?:%|x)?|(?<![\w.])\d+(?:%|x)(?!\w)")


def status_lines() -> list[str]:
    """The bullets of the README's "Status and limits" section, each joined onto one line."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Status and limits", 1)[1].split("\n## ", 1)[0]
    return [" ".join(b.split()) for b in re.split(r"\n- ", section)[1:]]


def test_every_figure_of_the_readme_status_is_in_the_doc_it_names():
    checked = 0
    for line in status_lines():
        docs = sorted(set(re.findall(r"docs/[\w-]+\.md", line)))
        if not docs:
            continue
        text = " ".join((ROOT / d).read_text() for d in docs)
        text = text.replace("\u2009", " ")
        for figure in FIGURE.findall(line):
            checked += 1
            assert figure in text, f"README says {figure!r} ({line[:60]}...), which {', '.join(docs)} do not"
    assert checked >= 30  # the section still states its figures
