"""Readable kernel names: ``short_kernel_name`` strips return types, namespaces, template
arguments and parameters from a CUDA kernel's full name; ``kernel_label`` adds the functor a
generic kernel runs. Pure text functions over the trace's names.
"""

from __future__ import annotations

import re

import numpy as np

from profiler_core.analysis.trace_reading import TRACE_TEXT_MAX_CHARS
from profiler_core.spec.errors import printable as _printable

KERNEL_NAME_MAX_CHARS = 60
# Kernel names whose informative part is their first template argument
# (e.g. "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(...)").
WRAPPER_KERNEL_NAMES = ("Kernel", "Kernel2", "device_kernel")
WRAPPER_MAX_DEPTH = 8  # wrappers inside wrappers looked through, at most
# Characters of a kernel name read to shorten it: the name itself comes before its template
# arguments and parameters (as many as a trace keeps of any text).
KERNEL_NAME_SCAN_CHARS = TRACE_TEXT_MAX_CHARS


def short_kernel_name(full_name: str) -> str:
    """A readable kernel name: no return type, namespaces, template arguments or parameters.

    ``void at::native::(anonymous namespace)::foo<float, 4>(float*)`` -> ``foo``. Generic wrapper
    kernels (``cutlass::Kernel2<cutlass_80_tensorop_...>(...)``) are named by their first
    template argument (looking through at most WRAPPER_MAX_DEPTH wrappers). Only the first
    KERNEL_NAME_SCAN_CHARS characters are read; unprintable characters are escaped. At most
    KERNEL_NAME_MAX_CHARS characters.
    """
    text = full_name[:KERNEL_NAME_SCAN_CHARS].replace("(anonymous namespace)", "")
    # Brackets are counted once, with arrays: a name of 4,096 brackets costs microseconds, not a
    # Python loop over its characters at every wrapper looked through.
    codes = _code_points(text)
    steps = _bracket_steps(codes)
    walk = np.cumsum(steps)  # brackets open after each character (a stray closing counts -1)
    start, stop = 0, len(text)  # the part of ``text`` being named
    for level in range(WRAPPER_MAX_DEPTH + 1):
        start, stop = _stripped(text, start, stop)
        depth = walk[start:stop] - (walk[start - 1] if start else 0)
        if level == 0:  # a closing bracket with nothing open is dropped, the depth stays 0
            depth = depth - np.minimum(np.minimum.accumulate(depth), 0) if len(depth) else depth
        # (inside a template argument the depth never drops below where the argument starts)
        outside = codes[start:stop][(steps[start:stop] == 0) & (depth == 0)]
        short = (outside.tobytes().decode("utf-32-le", "surrogatepass").rsplit("::", 1)[-1]
                 .strip() or text[start:stop])
        if short not in WRAPPER_KERNEL_NAMES:
            break
        wrapped = _first_template_argument(text, codes, walk, start, stop)
        if wrapped is None:
            break
        start, stop = wrapped
    short = _printable(short)
    if len(short) > KERNEL_NAME_MAX_CHARS:
        short = short[: KERNEL_NAME_MAX_CHARS - 3] + "..."
    return short


# Words of a kernel's template arguments that never say what it computes: types, numbers'
# suffixes, namespaces and the generic machinery around the functor.
_NOT_A_FUNCTOR = frozenset({
    "void", "bool", "char", "signed", "unsigned", "short", "int", "long", "float", "double",
    "half", "const", "volatile", "ul", "u", "l", "ull", "std", "array", "Array", "c10", "at",
    "native", "detail", "cuda", "memory", "policies", "BFloat16", "Half", "int8_t", "int16_t",
    "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "ReduceOp",
    "func_wrapper_t", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "TensorListMetadata",
    "TrivialOffsetCalculator", "OffsetCalculator", "LoadWithCast", "StoreWithCast",
    "LoadWithoutCast", "StoreWithoutCast", "TensorInfo", "PhiloxCudaState", "IntDivider",
    "lambda", "operator", "anonymous", "namespace", "BinaryFunctor", "binary_internal",
    "AUnaryFunctor", "BUnaryFunctor",
})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kernel_label(full_name: str) -> str:
    """:func:`short_kernel_name` with, for a generic kernel, the functor it runs: five kernels all
    called ``vectorized_elementwise_kernel`` become ``vectorized_elementwise_kernel<FillFunctor>``,
    ``...<CUDAFunctorOnSelf_add>``, ``...<mse_kernel_cuda>``... The functor is the first word
    of the kernel's template arguments that names something (not a type, a number, a namespace
    or generic machinery: ``_NOT_A_FUNCTOR``). At most KERNEL_NAME_MAX_CHARS characters, the
    functor kept whole when the name leaves room for it."""
    short = short_kernel_name(full_name)
    text = full_name[:KERNEL_NAME_SCAN_CHARS].replace("(anonymous namespace)", "")
    if short.endswith("...") or short not in text:
        return short
    opening = text.find("<", text.index(short) + len(short))
    if opening != text.index(short) + len(short):  # no template arguments right after the name
        return short
    functor = None
    for match in _WORD.finditer(text, opening + 1):
        word, start, end = match.group(), match.start(), match.end()
        if (text.startswith("::", end) or word in _NOT_A_FUNCTOR or word in WRAPPER_KERNEL_NAMES
                or len(word) < 2 or text[start - 1:start].isdigit()
                or text.endswith("c10::", 0, start)):
            continue
        functor = _printable(word)
        break
    if not functor:
        return short
    room = KERNEL_NAME_MAX_CHARS - len(short) - 2
    if room < 8:
        return short
    if len(functor) > room:
        functor = functor[:room - 3] + "..."
    return f"{short}<{functor}>"


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _bracket_steps(codes: np.ndarray) -> np.ndarray:
    """+1 at each '<' or '(', -1 at each '>' or ')', 0 elsewhere."""
    opening = (codes == ord("<")) | (codes == ord("("))
    closing = (codes == ord(">")) | (codes == ord(")"))
    return opening.astype(np.int64) - closing


def _stripped(text: str, start: int, stop: int, void: bool = True) -> tuple[int, int]:
    """``text[start:stop]`` without surrounding whitespace and (``void``) a leading "void ", as
    bounds."""
    part = text[start:stop]
    lead = len(part) - len(part.lstrip())
    part = part.strip()
    if void and part.startswith("void "):
        lead += 5 + len(part[5:]) - len(part[5:].lstrip())
        part = part[5:].strip()
    return start + lead, start + lead + len(part)


def _first_template_argument(text: str, codes: np.ndarray, walk: np.ndarray, start: int,
                             stop: int) -> tuple[int, int] | None:
    """Bounds of the text up to the first top-level comma of the first <...> in
    ``text[start:stop]`` (stripped), or None when there is none or it is empty."""
    opening = text.find("<", start, stop)
    if opening < 0:
        return None
    inside = walk[opening]  # the depth just inside the '<'
    after = slice(opening + 1, stop)
    ends = np.flatnonzero((walk[after] == inside - 1)
                          | ((walk[after] == inside) & (codes[after] == ord(","))))
    end = opening + 1 + int(ends[0]) if len(ends) else stop
    start, stop = _stripped(text, opening + 1, end, void=False)
    return (start, stop) if stop > start else None

