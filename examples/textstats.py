"""Word and line statistics for plain-text files."""

import re
import sys
from collections import Counter

WORD_PATTERN = re.compile(r"[A-Za-z']+")
TOP_N = 10
MIN_WORD_LENGTH = 3


def read_lines(path):
    """Return the lines of a text file without their line ends."""
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def words_in(line):
    """Lower-cased words of a line that are long enough to count."""
    found = WORD_PATTERN.findall(line)
    return [word.lower() for word in found if len(word) >= MIN_WORD_LENGTH]


def count_words(lines):
    counts = Counter()
    for line in lines:
        counts.update(words_in(line))
    return counts


def longest_line(lines):
    """Return (number, text) of the longest line, numbering from 1."""
    best_number, best_text = 0, ""
    for number, text in enumerate(lines, start=1):
        if len(text) > len(best_text):
            best_number, best_text = number, text
    return best_number, best_text


def blank_ratio(lines):
    if not lines:
        return 0.0
    blank = sum(1 for line in lines if not line.strip())
    return blank / len(lines)


def summarize(path):
    lines = read_lines(path)
    counts = count_words(lines)
    number, text = longest_line(lines)
    summary = {
        "lines": len(lines),
        "words": sum(counts.values()),
        "distinct": len(counts),
        "longest_line": number,
        "longest_length": len(text),
        "blank_ratio": blank_ratio(lines),
        "top": counts.most_common(TOP_N),
    }
    return summary


def format_summary(path, summary):
    out = ["%s: %d lines, %d words (%d distinct)" % (path, summary["lines"], summary["words"], summary["distinct"])]
    out.append("longest line: %d (%d characters)" % (summary["longest_line"], summary["longest_length"]))
    out.append("blank lines: %.1f%%" % (100 * summary["blank_ratio"]))
    for word, count in summary["top"]:
        out.append("  %-15s %d" % (word, count))
    return "\n".join(out)


def main(argv):
    if len(argv) < 2:
        print("usage: textstats.py FILE...", file=sys.stderr)
        return 2
    for path in argv[1:]:
        print(format_summary(path, summarize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
