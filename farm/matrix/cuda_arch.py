"""The CUDA architectures a build is made for (``CMAKE_CUDA_ARCHITECTURES``) as one type,
``CudaArch``: a matrix's ``cuda-arch:``, ``farm build --cuda-arch``, a stored job's
``BuildSource`` and a node's GPUs all become one before any build request holds it.

It reaches cmake as the value of one ``-D`` option in an argument list, never a shell, but
cmake reads ``;`` as a list separator and the value also names a build's identity and
folder, so it holds compute capabilities only (``86``, ``90a``, ``86;89;90``), at most
``MAX_ARCHITECTURES`` of them. cmake's ``native`` (and ``all``, ``all-major``) are refused:
a build for whatever GPU a node has would be stored under a name that does not say which;
leaving it out builds for the node's GPUs under a name that does.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from farm.errors import ConfigError

# More than every architecture CUDA has named (50 to 121): a longer list is not a build.
MAX_ARCHITECTURES = 32
_ONE = r"[0-9]{2,3}[a-z]?"
_ARCHITECTURE = re.compile(_ONE)
# The same rule for the matrix's JSON Schema (``farm schema``).
PATTERN = rf"^{_ONE}(;{_ONE}){{0,{MAX_ARCHITECTURES - 1}}}$"
FIX = ("give compute capabilities such as 86 or 86;89;90a (CMAKE_CUDA_ARCHITECTURES), or "
       "leave it out to build for the node's GPUs")


def _shown(value: str) -> str:
    """``value`` for a one-line message: quoted with its control characters escaped, and
    cut short when long."""
    return repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"


def cuda_arch_problem(value: str) -> str | None:
    """Why ``value`` is not a list of CUDA architectures; None if it is one."""
    if not value:
        return "is empty"
    if value in ("native", "all", "all-major"):
        return (f"is cmake's {value!r}, which builds for whatever GPUs a node has under a "
                "name that does not say which")
    parts = value.split(";")
    if len(parts) > MAX_ARCHITECTURES:
        return f"lists {len(parts)} architectures; at most {MAX_ARCHITECTURES}"
    bad = next((part for part in parts if _ARCHITECTURE.fullmatch(part) is None), None)
    if bad is None:
        return None
    return ("is not a compute capability" if len(parts) == 1
            else f"holds {_shown(bad)}, not a compute capability")


class CudaArch(str):
    """``CMAKE_CUDA_ARCHITECTURES`` as a build may be asked for it: made only through
    ``cuda_arch_problem``'s check (a ValueError otherwise), so every value of the type is one."""

    __slots__ = ()

    def __new__(cls, value: str) -> CudaArch:
        """``value`` as the type; a ValueError saying why and what to give otherwise."""
        why = cuda_arch_problem(value)
        if why is not None:
            raise ValueError(f"{_shown(value)} {why}: {FIX}")
        return super().__new__(cls, value)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler,
                                     ) -> core_schema.CoreSchema:
        # A string checked by the constructor, stored and serialised as the plain string.
        return core_schema.no_info_after_validator_function(
            cls, core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "pattern": PATTERN}


def checked_cuda_arch(value: str, where: str) -> CudaArch:
    """``value`` as a ``CudaArch``; a ConfigError naming ``where`` (the key or option) and
    the fix otherwise."""
    try:
        return CudaArch(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
