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


def _function(qualname: str, text: str) -> Any:
    """A Python function of signature ``text`` (made by text_signature) that
    does nothing, named ``qualname``: calling it words a wrong call exactly
    as Python words one to any function."""
    name = qualname.rpartition(".")[2]
    namespace: dict[str, Any] = {}
    exec(compile(f"def {name}{text[text.index('('):]}:\n    pass\n", f"<abf.{qualname}>",
                 "exec"), namespace)
    function = namespace[name]
    function.__qualname__ = qualname
    return function


def wrong_arguments(qualname: str, text: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any], given: str) -> TypeError:
    """The TypeError for a call no overload takes: Python's own words for
    an unknown keyword, a missing argument or one too many (``Filter.query()
    got an unexpected keyword argument 'bogus'``), then the signature and
    what was given, by type (``given``: never an array's contents)."""
    reason = f"{qualname}() does not take the arguments given"
    try:
        _function(qualname, text)(*args, **kwargs)
    except TypeError as failure:
        reason = str(failure)
    except SyntaxError:  # pragma: no cover - a signature we could not read
        pass
    return TypeError(f"{reason}; the signature is {text}; given: ({given})")


def python_function(builtin: Any, qualname: str) -> Any:
    """A Python function of ``builtin``'s signature that calls it, for the
    package's namespace: ``help(abf.build)`` then reads as a Python
    function's (pydoc calls an extension function a "method of
    builtins.PyCapsule instance", the capsule pybind11 keeps its record in),
    and a call with an unknown keyword is refused by Python itself
    (``build() got an unexpected keyword argument 'shard'``), before any
    argument is converted. ``builtin`` itself is returned when its
    signature is not one of plain parameters."""
    text = getattr(builtin, "__text_signature__", None)
    if not text:
        return builtin
    try:
        signature = inspect.signature(builtin)
    except ValueError:
        return builtin
    kinds = {p.kind for p in signature.parameters.values()}
    if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD}:
        return builtin
    name = qualname.rpartition(".")[2]
    call = ", ".join(signature.parameters)
    source = f"def {name}{text}:\n    return _builtin({call})\n"
    namespace: dict[str, Any] = {"_builtin": builtin}
    exec(compile(source, f"<abf.{qualname}>", "exec"), namespace)
    function = namespace[name]
    function.__doc__ = builtin.__doc__
    function.__module__ = "abf"
    function.__qualname__ = qualname
    return function
