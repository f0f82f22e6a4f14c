"""Signatures of the extension's functions, as Python users read them.

pybind11 writes a function's signature as the first line of its docstring
with the C++ types (``build(digests: handle, ...) -> object``). The module
(python/src/module.cpp) rewrites it at import into CPython's text-signature
form (``build(digests, expected_items, fpp, catalog_version=0, ...)``
followed by ``--``), which ``inspect.signature`` and ``help()`` read: the
parameters and defaults, no C++ types (the stubs, _abf.pyi, carry the
Python ones). A call with arguments no overload takes gets a TypeError in
Python's own words (``build() got an unexpected keyword argument
'shard'``), from :func:`wrong_arguments`.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any


def _parameters_end(line: str) -> int:
    """The index of the ``)`` that closes the first ``(``, or -1."""
    depth = 0
    quote = ""
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def text_signature(line: str) -> str | None:
    """``name(a: T, b: U = 1) -> R`` as ``name(a, b=1)``; None when the line
    is no signature Python can read (a default pybind11 shows as a repr)."""
    start = line.find("(")
    end = _parameters_end(line)
    if start <= 0 or end < start:
        return None
    name = line[:start]
    if not name.isidentifier():
        return None
    try:
        tree = ast.parse(f"def _{line[start:end + 1]}: pass")
    except SyntaxError:
        return None
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    arguments = function.args
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     arguments.vararg, arguments.kwarg):
        if argument is not None:
            argument.annotation = None
    function.returns = None
    text = ast.unparse(function)  # "def _(a, b=1):\n    pass"
    return name + text[len("def _"):text.index(":\n")]


def _signature(text: str) -> inspect.Signature:
    """The inspect.Signature of a text signature made by text_signature."""
    tree = ast.parse(f"def {text}: pass")
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    a = function.args
    P = inspect.Parameter
    parameters = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + [
        ast.literal_eval(d) for d in a.defaults]
    for i, argument in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        parameters.append(P(argument.arg, kind, default=defaults[i]))
    if a.vararg is not None:
        parameters.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for argument, default in zip(a.kwonlyargs, a.kw_defaults):
        value = P.empty if default is None else ast.literal_eval(default)
        parameters.append(P(argument.arg, P.KEYWORD_ONLY, default=value))
    if a.kwarg is not None:
        parameters.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(parameters)


def wrong_arguments(qualname: str, text: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any], given: str) -> TypeError:
    """The TypeError for a call no overload takes: Python's own words for
    an unknown keyword, a missing argument or one too many (``Filter.query()
    got an unexpected keyword argument 'bogus'``), then the signature and
    what was given, by type (``given``: never an array's contents)."""
    reason = "does not take the arguments given"
    try:
        _signature(text).bind(*args, **kwargs)
    except TypeError as failure:
        reason = str(failure)
    except (SyntaxError, ValueError):  # pragma: no cover - a signature we could not read
        pass
    return TypeError(f"{qualname}() {reason}; the signature is {text}; given: ({given})")
