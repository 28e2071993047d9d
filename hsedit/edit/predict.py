"""The answer an edit is expected to write, for the copy drafter: the text with the mechanical part
of its intent done (a rename's identifiers, a constant's value). It is only ever drafted from:
verification keeps the target's own tokens, so a prediction the model does not follow costs a
chain cut short where they part, never a changed answer.

The original stays in the prompt, so the copy drafter can copy from either: it follows whichever
matches the answer so far for longer, and the prediction where they match alike.
"""

from __future__ import annotations

from hsedit.edit.check import Source, _assignments, _definitions, exported_strings
from hsedit.edit.intent import Intent, Rename, SetConstant
from hsedit.edit.prompt import completion_for


def answer_reference(intent: Intent, text: str) -> str:
    """What the copy drafter copies an edit's answer from: the answer as the model is to write it,
    `text` with the intent's mechanical part done (else `text` itself) and the closing fence, so
    that a copy reaching the end of the code drafts the fence that ends the answer, not what
    follows the code in the prompt."""
    predicted = predicted_answer(intent, text)
    return completion_for(predicted if predicted is not None else text)


def predicted_answer(intent: Intent, text: str) -> str | None:
    """`text` with `intent`'s mechanical part done; None where the intent has none or it changes
    nothing (the text itself is then the prediction)."""
    match intent:
        case Rename():
            predicted = _renamed(Source(text), intent.old, intent.new, intent.scope)
        case SetConstant():
            predicted = _constant_set(Source(text), intent.name, intent.value)
        case _:
            return None
    return predicted if predicted != text else None


def _renamed(source: Source, old: str, new: str, scope: str | None) -> str:
    """Every identifier `old` (names and attributes) within the definitions of `scope` where one
    is given, else also the module's `__all__` entries naming it (which the rename check asks
    for); other strings and comments left as they are, as the apply model leaves them."""
    ranges = [(0, len(source.data))]
    if scope:
        ranges = [(n.start_byte, n.end_byte) for n in
                  _definitions(source, scope, ("function_definition", "class_definition"))]
    spans = [(t.start, t.end, new) for t in source.tokens
             if t.type == "identifier" and t.text == old and any(a <= t.start and t.end <= b for a, b in ranges)]
    if not scope:
        spans += [(n.start_byte, n.end_byte, source.node_text(n).replace(old, new)) for n in exported_strings(source, old)]
    return _replaced(source.data, spans)


def _constant_set(source: Source, name: str, value: str) -> str:
    """The value of every module-level assignment to `name` replaced by `value`."""
    spans = []
    for node in _assignments(source, name):
        right = node.child_by_field_name("right")
        spans.append((right.start_byte, right.end_byte, value))
    return _replaced(source.data, spans)


def _replaced(data: bytes, spans: list[tuple[int, int, str]]) -> str:
    """`data` with each byte range [a, b) replaced by its text (ranges do not overlap)."""
    out, at = [], 0
    for a, b, replacement in sorted(spans):
        out += [data[at:a], replacement.encode("utf-8")]
        at = b
    out.append(data[at:])
    return b"".join(out).decode("utf-8", "replace")
