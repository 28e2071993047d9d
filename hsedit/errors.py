"""Errors the user sees as one line, each with its own documented exit code."""

from __future__ import annotations


class HseditError(Exception):
    """Base: `str(error)` is the one line shown to the user; `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(HseditError):
    exit_code = 2  # same as a bad command-line option


class InputFileError(HseditError):
    exit_code = 3  # missing path, directory, binary or non-UTF-8 file


class ContextTooLongError(HseditError):
    exit_code = 4


class OutputTruncatedError(HseditError):
    exit_code = 5


class ValidationError(HseditError):
    exit_code = 6  # the new text does not parse; nothing was written


class ModelError(HseditError):
    exit_code = 7  # the model could not be found, converted or loaded


class DestructiveAnswerError(HseditError):
    exit_code = 8  # empty answer, mass deletion or placeholders: nothing written (--force writes)


class FileChangedError(HseditError):
    exit_code = 9  # the file changed while the edit ran: nothing written, the answer kept aside


class ServerError(HseditError):
    exit_code = 10  # the server (--server, HSEDIT_SERVER) could not be reached or failed the request


class InstructionCheckError(HseditError):
    exit_code = 11  # the answer does not do what the instruction asks: nothing written (--force writes)


EXIT_INTERRUPTED = 130

EXIT_CODES = {
    0: "success",
    1: "unexpected internal error",
    2: "bad usage (unknown option, empty instruction, bad task line)",
    3: "input file problem: missing, a directory, binary or not UTF-8",
    4: "the file does not fit in the model's context",
    5: "the model's output was cut off at --max-tokens",
    6: "the rewritten file does not parse (nothing written; --force writes anyway)",
    7: "the model could not be found, converted or loaded",
    8: "the answer would destroy code (empty, mass deletion, placeholders): nothing written (--force writes)",
    9: "the file changed while the edit ran: nothing written; the new version is kept beside it",
    10: "the server could not be reached, refused the request or failed it",
    11: "the answer does not do what the instruction asks (the instruction check): nothing written (--force writes)",
    130: "interrupted (Ctrl-C); the file is untouched",
}


def error_for_exit_code(code: int, message: str) -> HseditError:
    """The error a server reported (by its exit code), raised on the client as if it ran here."""
    kinds = [cls for cls in _all_errors() if cls.exit_code == code]
    return (kinds[0] if kinds else ServerError)(message)


def _all_errors() -> list[type[HseditError]]:
    found, todo = [], [HseditError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found
