"""What the OS or a parser says went wrong, as a message id: never its English text as a
parameter of a translated sentence.

`os_error(error)` names an OSError by its errno (`os-error.ENOENT`: "No such file or
directory" in English, the reader's words in another language); an errno the catalogue has
no words for is `os-error.other`, which carries the errno's name (`EFOO`). `json_error`
does the same for what Python's JSON decoder says (`json-error.*`, with the line and column),
and `file_error` picks the one that fits an exception a file read raised.
"""

from __future__ import annotations

import errno as errno_names
import json

from backend.i18n import CATALOGUE, DEFAULT_LOCALE, Message

# What json.JSONDecodeError.msg says -> its message id (json/decoder.py and json/scanner.py).
_JSON_MESSAGES = {
    "Expecting value": "json-error.expecting-value",
    "Expecting property name enclosed in double quotes": "json-error.expecting-name",
    "Expecting ',' delimiter": "json-error.expecting-comma",
    "Expecting ':' delimiter": "json-error.expecting-colon",
    "Unterminated string starting at": "json-error.unterminated-string",
    "Invalid control character at": "json-error.control-character",
    "Invalid \\escape": "json-error.bad-escape",
    "Invalid \\uXXXX escape": "json-error.bad-escape",
    "Extra data": "json-error.extra-data",
}


def os_error(error: BaseException) -> Message:
    """An OSError as a message: `os-error.<ERRNO NAME>`, or `os-error.other` carrying the
    errno's name; an error without an errno is `os-error.unknown` carrying its type."""
    number = getattr(error, "errno", None)
    if isinstance(number, int) and number:
        name = errno_names.errorcode.get(number, str(number))
        if f"os-error.{name}" in CATALOGUE[DEFAULT_LOCALE]:
            return Message(f"os-error.{name}")
        return Message("os-error.other", name=name)
    return Message("os-error.unknown", kind=type(error).__name__)


def json_problem(message: str) -> Message:
    """What the JSON decoder's `msg` says, as a message (`json-error.other` for one it has
    not said before)."""
    return Message(_JSON_MESSAGES.get(message, "json-error.other"))


def json_error(error: BaseException) -> Message:
    """A JSONDecodeError as a message with its line and column; any other ValueError of a
    JSON read as `json-error.other`."""
    if isinstance(error, json.JSONDecodeError):
        return Message("json-error.at", problem=json_problem(error.msg), line=error.lineno, column=error.colno, char=error.pos)
    return Message("json-error.other")


def file_error(error: BaseException) -> Message:
    """An exception of reading and decoding a JSON file, as a message."""
    if isinstance(error, UnicodeDecodeError):
        return Message("file-error.not-utf8")
    if isinstance(error, RecursionError):
        return Message("file-error.too-deep")
    if isinstance(error, OSError):
        return os_error(error)
    return json_error(error)


__all__ = ["file_error", "json_error", "json_problem", "os_error"]
