"""What an instruction asks for, parsed once into a typed intent.

One grammar for every reader of an instruction: the instruction check (`check.py`) judges an
answer against the intent, the region choice (`regions.py`) sends the model only the parts of a
file the intent touches, and the apply model's training templates (`train/finetune/edits.py`)
are phrasings this grammar reads back to the intent that produced them (a test holds that).

    Rename(old, new, scope)              rename OLD to NEW [in F]
    SetConstant(name, value)             set NAME to V
    Delete(name, what)                   delete the function/class NAME
    RemovePrints(scope, plural)          remove the debug print(s) [in F]
    AddParameter(function, param, default, annotation)
    FStrings(scope)                      %-formatting to f-strings [in F]
    TypeHints(scope)                     add type hints to F (or to the file)
    SnippetMerge(update)                 `hsedit batch`'s {"update": SNIPPET}
    FreeForm(text, names)                anything else: judged by nobody, only its names are read

An instruction that asks two things, or something this grammar does not know, is FreeForm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The kinds, as the check's verdicts and `--json` name them; a training kind is one of these or
# one and what it names (`rename_local`, `delete_function`).
RENAME, SET_CONSTANT, DELETE, REMOVE_PRINTS = "rename", "set_constant", "delete", "remove_debug_print"
ADD_PARAMETER, FSTRINGS, TYPE_HINTS = "add_parameter", "percent_to_fstring", "add_type_hints"
SNIPPET_MERGE, FREE_FORM = "snippet_merge", "free_form"

FUNCTION, CLASS = "function_definition", "class_definition"  # tree-sitter's node types


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    scope: str | None = None  # "in F, rename ...": only inside the function or class F
    kind = RENAME


@dataclass(frozen=True)
class SetConstant:
    name: str
    value: str  # as written in the instruction, backticks stripped
    kind = SET_CONSTANT


@dataclass(frozen=True)
class Delete:
    name: str
    types: tuple[str, ...] = (FUNCTION, CLASS)  # which definitions `name` may be
    kind = DELETE


@dataclass(frozen=True)
class RemovePrints:
    scope: str | None = None
    plural: bool = False  # "all prints" (every one in scope) or "the print" (one)
    kind = REMOVE_PRINTS


@dataclass(frozen=True)
class AddParameter:
    function: str
    param: str
    default: str | None = None
    annotation: str | None = None  # "add a parameter strict: bool = False": the answer's must read the same
    kind = ADD_PARAMETER


@dataclass(frozen=True)
class FStrings:
    scope: str | None = None
    kind = FSTRINGS


@dataclass(frozen=True)
class TypeHints:
    scope: str | None = None  # None: every function of the file
    kind = TYPE_HINTS


@dataclass(frozen=True)
class SnippetMerge:
    update: str
    kind = SNIPPET_MERGE


@dataclass(frozen=True)
class FreeForm:
    text: str
    names: tuple[str, ...] = ()  # words of the instruction that may name code (`x`, snake_case, CamelCase)
    kind = FREE_FORM


Intent = Rename | SetConstant | Delete | RemovePrints | AddParameter | FStrings | TypeHints | SnippetMerge | FreeForm


# -- the grammar -----------------------------------------------------------------------------
_NAME = r"[`'\"]?(?P<{g}>[A-Za-z_][A-Za-z0-9_]*)[`'\"]?"
_WHAT = (
    r"(?:(?:local |global |module-level |instance |class )?(?:function|class|method|variable|constant|"
    r"parameter|argument|attribute|field|name|type|enum|property|identifier|var|func|def)s? )"
)
_RENAME_TAIL = (
    r"(?:[;,.]? ?(?:and )?(?:update|fix|change|rename) (?:every|all|each|any|the)? ?(?:uses?|references?|"
    r"occurrences?|call(?:er)?s?)(?: of it| to it)?|,? everywhere(?: in (?:this|the) (?:file|module))?|"
    r",? throughout(?: (?:this|the) (?:file|module))?|,? in (?:this|the) (?:file|module)|,? across the file|"
    r",? in all places)*"
)
_SCOPE_PREFIX = r"(?:in (?:the )?(?:function |method )?{f},? |{f2}: )?"
_SCOPE_SUFFIX = r"(?:,? (?:inside|in|within) (?:the )?(?:function |method )?{f3}(?: function| method)?)?"


def _fill(pattern: str) -> str:
    names = {"old": "old", "new": "new", "f": "scope", "f2": "scope2", "f3": "scope3", "name": "name", "p": "param"}
    for placeholder, group in names.items():
        pattern = pattern.replace("{" + placeholder + "}", _NAME.format(g=group), 1)
        pattern = pattern.replace("{" + placeholder + "}", f"(?P={group})")
    return pattern


def _patterns(*patterns: str) -> list[re.Pattern]:
    """Instruction patterns with their placeholders filled, matched case-insensitively."""
    return [re.compile(_fill(p), re.IGNORECASE) for p in patterns]


_RENAMES = _patterns(
        _SCOPE_PREFIX + r"(?:please )?(?:rename|change the name of) (?:the )?" + _WHAT + r"?{old} (?:to|->|→|into|as) (?:the )?{new}" + _RENAME_TAIL + _SCOPE_SUFFIX + _RENAME_TAIL,
        r"(?:please )?rename (?:the )?" + _WHAT + r"?{old} (?:in|inside) (?:the )?(?:function |method )?{f} (?:to|->|→) {new}" + _RENAME_TAIL,
        _SCOPE_PREFIX + r"(?:the )?" + _WHAT + r"?{old} should be (?:called|named|renamed(?: to)?) {new}" + _RENAME_TAIL,
        r"call the " + _WHAT + r"?{new} instead of {old}" + _RENAME_TAIL,
        r"replace (?:every|each|all) (?:use|uses|occurrence|occurrences|reference|references) of (?:the )?" + _WHAT + r"?{old} (?:with|by) {new}" + _RENAME_TAIL,
        r"use the name {new} for the " + _WHAT + r"?{old}" + _RENAME_TAIL,
)  # fmt: skip
_SET_CONSTANT = _patterns(
        r"(?:please )?(?P<verb>set|change|update) (?:the )?(?:(?:constant|value of|setting|variable|default) )?(?:the )?(?:(?:constant|setting|variable) )?{name} (?:to|=) (?P<value>.+)",
        r"(?:the )?(?:(?:constant|setting|variable) )?{name} should (?:be|equal) (?P<value>.+)",
        r"{name} ?= ?(?P<value>.+)",
)  # fmt: skip
_DELETE = _patterns(
    r"(?:please )?(?:delete|remove|drop|get rid of|take out) (?:the )?(?:(?:unused |dead )?(?P<what>function|method|class|def) )?"
    r"{name}(?: (?P<what2>function|method|class))?(?: from (?:this|the) (?:file|module|class))?"
    r"(?:[;,.]? ?(?:since |as |because )?(?:it is|it's) (?:not|never) used| \(it is unused\)|[;,] it is unused)?"
)
_DEBUG_PRINT = _patterns(
    r"(?:please )?(?:remove|delete|drop|get rid of|strip|take out|clean up) (?P<quantity>the |all |any |all the |every |each )?"
    r"(?:(?:leftover|stray|debug|debugging|temporary|left-over) )*(?P<noun>prints?|print statements?|print calls?|"
    r"debug statements?)(?: (?:i|you|someone) left)?(?: (?:in|from|inside) (?:the )?(?:function |method )?{f})?"
)
_ADD_PARAMETER = _patterns(
        # the parameter as it is written in a signature: `name: T`, `name = V`, `name: T = V`
        r"(?:please )?add (?:a |an |the )?(?:new )?(?:optional |keyword |keyword-only )?(?:parameter|argument|param|arg) "
        r"(?P<quote>`?)(?P<param>[A-Za-z_]\w*)(?: ?: ?(?P<annotation>[^=`]*[^=` ]))?(?: ?= ?(?P<default>[^`]+?))?(?P=quote) "
        r"to (?:the )?(?:function |method )?{f}",
        r"(?:please )?add (?:a |an |the )?(?:new )?(?:optional |keyword |keyword-only )?(?:parameter|argument|param|arg) {p}"
        r"(?: with (?:a )?default(?: value)?(?: of)? (?P<default>.+?))? to (?:the )?(?:function |method )?{f}",
        r"(?:please )?add (?:a |an |the )?(?:new )?(?:optional |keyword )?`(?P<param>[A-Za-z_]\w*) ?= ?(?P<default>[^`]+)` "
        r"(?:parameter |argument )?to (?:the )?(?:function |method )?{f}",
        r"give {f} a (?:new )?(?:optional |keyword )*(?:parameter|argument) {p}(?: \(default (?P<default>.+)\)| with default (?P<default2>.+))?",
)  # fmt: skip
_FSTRING = _patterns(
    r"(?:please )?(?:(?:convert|change|switch|replace|turn|rewrite|migrate|move) (?:all |the |all the |every |any )?"
    r"(?:old-style |old )?(?:%|%-|percent|percent-sign)[ -]?(?:style )?(?:string )?(?:formatting|formats?|format strings?|"
    r"interpolation)(?: strings?)?(?: (?:to|into|with) f-?strings)|use f-?strings instead of (?:the )?(?:old-style )?"
    r"(?:%|%-|percent)[ -]?(?:style )?(?:string )?(?:formatting|format))"
    r"(?: (?:in|inside) (?:the )?(?:function |method )?{f})?",
    r"(?:please )?(?:convert|change|switch|replace|turn|rewrite|migrate) (?:all |the |all the |every |any )?"
    r"(?:old-style |old )?(?:%|%-|percent|percent-sign)[ -]?(?:style )?(?:string )?(?:formatting|formats?|format strings?|"
    r"interpolation)(?: strings?)? (?:in|inside) (?:the )?(?:function |method )?{f} (?:to|into|with) f-?strings",
)
_TYPE_HINTS = _patterns(
        r"(?:please )?add (?:type )?(?:hints|annotations|type hints|type annotations) (?:to|for) (?:the )?(?:function |method )?{f}",
        r"(?:please )?annotate (?:the )?(?:parameters and return type of |function |method )?(?:the )?(?:function |method )?{f}",
        r"{f} needs (?:type )?(?:hints|annotations|type hints|type annotations)",
        r"(?:please )?add (?:type )?(?:hints|annotations|type hints|type annotations)(?P<whole>)(?: to (?:this|the) file| everywhere| to (?:all|every) functions?)?",
)  # fmt: skip
_FILE_WORDS = ("this", "the", "file", "module")  # "rename x to y in this file" has no scope


def normalize(instruction: str) -> str:
    """Whitespace collapsed and the closing punctuation dropped: what the grammar reads."""
    return " ".join(instruction.split()).rstrip(" .!")


def parse_intent(instruction: str, update: str | None = None) -> Intent:
    """The instruction's intent (a snippet `update` is a merge whatever the instruction says)."""
    if update is not None:
        return SnippetMerge(update)
    text = normalize(instruction)
    for parse in (_rename, _remove_prints, _fstrings, _type_hints, _add_parameter, _delete, _set_constant):
        intent = parse(text)
        if intent is not None:
            return intent
    return FreeForm(text, _code_words(instruction))


def _first(patterns: list[re.Pattern], text: str) -> re.Match | None:
    return next((m for m in (p.fullmatch(text) for p in patterns) if m), None)


def _rename(text: str) -> Rename | FreeForm | None:
    for pattern in _RENAMES:
        match = pattern.fullmatch(text)
        if not match or match["old"] == match["new"]:
            continue
        groups = match.groupdict()
        scopes = {groups.get(g) for g in ("scope", "scope2", "scope3")} - {None}
        if len(scopes) > 1:
            return FreeForm(text, _code_words(text))  # "in f, rename x to y inside g": which?
        scope = scopes.pop() if scopes else None
        return Rename(match["old"], match["new"], None if scope in _FILE_WORDS else scope)
    return None


def _set_constant(text: str) -> SetConstant | FreeForm | None:
    match = _first(_SET_CONSTANT, text)
    if match is None:
        return None
    value = match["value"].strip().strip("`").strip()
    if (match.groupdict().get("verb") or "").lower() == "change" and re.fullmatch(r"[A-Za-z_]\w*", value) \
            and value not in ("True", "False", "None"):
        return FreeForm(text, _code_words(text))  # "change a to b": a rename or a new value?
    return SetConstant(match["name"], value)


def _delete(text: str) -> Delete | None:
    match = _first(_DELETE, text)
    if match is None:
        return None
    what = (match["what"] or match["what2"] or "").lower()
    types = (CLASS,) if what == "class" else (FUNCTION,) if what else (FUNCTION, CLASS)
    return Delete(match["name"], types)


def _remove_prints(text: str) -> RemovePrints | None:
    match = _first(_DEBUG_PRINT, text)
    if match is None:
        return None
    quantity = (match["quantity"] or "").strip().lower()
    plural = quantity in ("all", "any", "all the", "every", "each") or match["noun"].lower().endswith("s")
    return RemovePrints(match["scope"], plural)


def _add_parameter(text: str) -> AddParameter | None:
    match = _first(_ADD_PARAMETER, text)
    if match is None:
        return None
    groups = match.groupdict()
    default = groups.get("default") or groups.get("default2")
    annotation = groups.get("annotation")
    return AddParameter(match["scope"], match["param"], default and default.strip().strip("`"),
                        annotation and annotation.strip())


def _fstrings(text: str) -> FStrings | None:
    match = _first(_FSTRING, text)
    return None if match is None else FStrings(match["scope"])


def _type_hints(text: str) -> TypeHints | None:
    match = _first(_TYPE_HINTS, text)
    return None if match is None else TypeHints(match.groupdict().get("scope"))


_CODE_WORD = re.compile(r"`([^`]+)`|\b([A-Za-z_]\w*)\b")


def _code_words(text: str) -> tuple[str, ...]:
    """Words that read as code: anything in backticks, and identifiers with an underscore, a
    digit or an inner capital (`max_size`, `parse2`, `HttpClient`); plain English words are not
    told apart from names here, the region choice matches them against the file's identifiers."""
    found = []
    for quoted, word in _CODE_WORD.findall(text):
        if quoted:
            found += re.findall(r"[A-Za-z_]\w*", quoted)
        elif "_" in word or any(c.isdigit() for c in word) or any(c.isupper() for c in word[1:]):
            found.append(word)
    return tuple(dict.fromkeys(found))


def answer_growth_bound(intent: Intent, text: str) -> int | None:
    """How many tokens longer than `text` a right answer to `intent` can be, or None where the
    intent does not bound it. Counted in characters (a token holds at least one), each changed
    mention with two more for the tokenizer's merges around it; every mention of a name counts,
    strings and comments too, so the bound holds whichever the answer changes. A rename grows by
    the new name's extra length a mention, a constant by its value an assignment, a parameter
    by itself and its default wherever its function is named; a deletion only shortens."""
    def mentions(name: str) -> int:
        return len(re.findall(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text))

    if isinstance(intent, Rename):
        return mentions(intent.old) * (max(0, len(intent.new) - len(intent.old)) + 2)
    if isinstance(intent, SetConstant):
        return mentions(intent.name) * (len(intent.value) + 2)
    if isinstance(intent, AddParameter) and intent.function:
        written = len(intent.param) + len(intent.default or "") + len(intent.annotation or "") + len(", : = ")
        return mentions(intent.function) * (written + 2)
    if isinstance(intent, (Delete, RemovePrints)):
        return 0
    return None


def scope_of(intent: Intent) -> str | None:
    """The function or class an intent is confined to, if it names one."""
    return getattr(intent, "scope", None)
