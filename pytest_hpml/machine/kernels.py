"""Triton kernels compiled ahead of time for a named GPU target, and what the compiled kernel
uses: registers, spills, shared memory and its instruction mix. No GPU and no CUDA driver are
needed: Triton compiles for a `GPUTarget` on any machine, and the ptxas and cuobjdump it ships
read the cubin.

A kernel is compiled from the arguments of a launch, `kernel[grid](*args, **kwargs)`, through
Triton's own binder: the signature, the constexprs and the argument specialization (pointer
dtypes, pointers and ints divisible by 16, ints equal to 1) are the ones a GPU run would get,
not a guess. Tensors may live on torch's meta device: only their dtype, strides and (zero)
address are read. The figures are exact (the same source, specialization, options and Triton
give the same cubin), so a change is a change; the compile time alone is measured."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GpuTarget:
    """A compute capability, with the per-block limits a launch must respect there."""

    name: str  # "sm_90"
    capability: int  # 90
    #: Bytes of shared memory one block may use (opt-in maximum, as Triton requests it).
    max_shared_per_block: int
    #: 32-bit registers one thread may use.
    max_registers_per_thread: int
    gpus: str  # what runs it, for messages


# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (the table of
# compute capabilities 7.5-12.0): maximum shared memory per thread block 163 KB on 8.0 and
# 227 KB on 9.0 (KB = 1024 bytes there); maximum 32-bit registers per thread 255 on both.
TARGETS: dict[str, GpuTarget] = {
    "sm_80": GpuTarget("sm_80", 80, 163 * 1024, 255, "A100"),
    "sm_90": GpuTarget("sm_90", 90, 227 * 1024, 255, "H100, H200"),
}

#: SASS mnemonics of the tensor cores: HMMA (fp16/bf16/tf32) and IMMA (int8) from sm_70/75,
#: the warpgroup forms HGMMA / IGMMA / QGMMA (fp8) that wgmma becomes on sm_90, DMMA (fp64).
TENSOR_CORE_OPCODES = ("HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA")
#: Global memory reads: plain loads, sm_80's asynchronous copies into shared memory, and
#: sm_90's bulk (TMA) copies; writes: plain stores and TMA stores.
GLOBAL_LOAD_OPCODES = ("LDG", "LDGSTS", "UTMALDG", "UBLKCP")
GLOBAL_STORE_OPCODES = ("STG", "UTMASTG")
# Bytes moved by one local-memory access, by its width modifier (32 bits without one).
_WIDTHS = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


@dataclass
class CubinFunction:
    """One function of `cuobjdump -res-usage -sass`: its resources and its instructions."""

    registers: int = 0
    stack: int = 0  # bytes per thread: the stack frame spills live in
    static_shared: int = 0  # bytes per block declared in the source (Triton's is dynamic)
    local: int = 0
    opcodes: Counter = field(default_factory=Counter)  # mnemonic without modifiers -> count
    spill_stores: int = 0  # bytes stored to local memory (STL), as ptxas -v counts them
    spill_loads: int = 0  # bytes loaded from local memory (LDL)


_RESOURCES = re.compile(r"^\s*Function (\S+):\s*$")
_SASS_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
# "/*0a30*/   @!P0 LDL.LU.64 R4, [R1+0x18] ;": the address, an optional predicate, the opcode.
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")


def parse_cuobjdump(text: str) -> dict[str, CubinFunction]:
    """The functions of `cuobjdump -res-usage -sass CUBIN`, by name.

    Local memory (STL / LDL) holds nothing but spills in a Triton kernel, which declares no
    local arrays: the bytes of those instructions add up to ptxas -v's "bytes spill stores /
    spill loads"."""
    functions: dict[str, CubinFunction] = {}
    current: CubinFunction | None = None
    pending_resources: str | None = None
    for line in text.splitlines():
        if pending_resources is not None:
            values = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            function = functions.setdefault(pending_resources, CubinFunction())
            function.registers = int(values.get("REG", 0))
            function.stack = int(values.get("STACK", 0))
            function.static_shared = int(values.get("SHARED", 0))
            function.local = int(values.get("LOCAL", 0))
            pending_resources = None
            continue
        if match := _RESOURCES.match(line):
            pending_resources = match.group(1)
            continue
        if match := _SASS_FUNCTION.match(line):
            current = functions.setdefault(match.group(1), CubinFunction())
            continue
        match = _INSTRUCTION.match(line)
        if match and current is not None:
            opcode, *modifiers = match.group(1).split(".")
            current.opcodes[opcode] += 1
            if opcode in ("STL", "LDL"):
                width = next((_WIDTHS[m] for m in modifiers if m in _WIDTHS), 4)
                if opcode == "STL":
                    current.spill_stores += width
                else:
                    current.spill_loads += width
    return functions


@dataclass(frozen=True)
class Figure:
    """One resource as the fixture records it."""

    name: str
    value: float
    unit: str
    better: str | None
    kind: str  # "exact" (judged exactly), "measured" or "setting"


@dataclass(frozen=True)
class KernelResources:
    """What one compiled variant of a kernel uses on one target."""

    kernel: str
    target: GpuTarget
    num_warps: int
    num_stages: int
    registers: int  # per thread
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack: int  # bytes of stack frame per thread
    shared: int  # bytes of shared memory per block
    opcodes: Mapping[str, int]  # SASS mnemonic -> count
    compile_seconds: float | None  # None: Triton's cache had it, so nothing was compiled
    signature: Mapping[str, str] = field(default_factory=dict)  # as Triton's launcher built it
    fp_fusion: bool | None = None  # a * b + c contracted into FMAs (None: not said)

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def fits_shared_memory(self) -> bool:
        return self.shared <= self.target.max_shared_per_block

    def count(self, *opcodes: str) -> int:
        """Instructions with any of these mnemonics ("HMMA", "FFMA", ...)."""
        return sum(self.opcodes.get(op, 0) for op in opcodes)

    @property
    def tensor_core_instructions(self) -> int:
        return self.count(*TENSOR_CORE_OPCODES)

    def figures(self) -> list[Figure]:
        """The resources as metrics: exact figures (a change in any is a change), the compile
        time (measured, when this process compiled), the launch options as settings."""
        exact = [
            # More registers is no worse in itself (fewer spills), only different.
            Figure("registers", self.registers, "", None, "exact"),
            Figure("spill_bytes", self.spill_bytes, "B", "lower", "exact"),
            Figure("stack_frame", self.stack, "B", "lower", "exact"),
            Figure("shared_memory", self.shared, "B", "lower", "exact"),
            Figure("tensor_core_instructions", self.tensor_core_instructions, "", "higher",
                   "exact"),
            # As many FMAs as the math needs: a count with no better direction.
            Figure("ffma_instructions", self.count("FFMA"), "", None, "exact"),
            # The same bytes in more instructions: narrower (unvectorized) accesses.
            Figure("global_load_instructions", self.count(*GLOBAL_LOAD_OPCODES), "", "lower",
                   "exact"),
            Figure("global_store_instructions", self.count(*GLOBAL_STORE_OPCODES), "", "lower",
                   "exact"),
        ]
        settings = [Figure("num_warps", self.num_warps, "", None, "setting"),
                    Figure("num_stages", self.num_stages, "", None, "setting"),
                    Figure("shared_memory_limit", self.target.max_shared_per_block, "B", None,
                           "setting")]
        if self.fp_fusion is not None:
            settings.append(Figure("fp_fusion", int(self.fp_fusion), "", None, "setting"))
        measured = ([Figure("compile_time", self.compile_seconds, "s", "lower", "measured")]
                    if self.compile_seconds is not None else [])
        return exact + measured + settings


def gpu_target(name: str) -> GpuTarget:
    """The target called `name` ("sm_80", "sm_90")."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown GPU target {name!r}: use one of {', '.join(TARGETS)} "
                         "(compute capability 8.0 is the A100, 9.0 the H100)") from None


@dataclass(frozen=True)
class Specialization:
    """A launch as Triton's launcher binds it: plain data, sent to the compiling process."""

    module: str  # where the kernel's Python function is defined ...
    qualname: str  # ... and its name there
    file: str | None  # the module's file here, so the child imports this very file
    path: tuple[str, ...]  # this process's sys.path, as it is now
    signature: dict[str, str]
    constexprs: dict[tuple, Any]
    attrs: dict[tuple, Any]
    options: dict[str, Any]
    capability: int


def specialize(kernel: Any, args: tuple, kwargs: Mapping[str, Any],
               target: GpuTarget) -> Specialization:
    """Bind a launch's arguments with Triton's own binder for `target`: the signature, the
    constexprs (ints equal to 1 included) and the divisibility-by-16 attributes a GPU run of
    `kernel[grid](*args, **kwargs)` would compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    jit = _jit_function(kernel)
    if "<locals>" in jit.fn.__qualname__:
        raise ValueError(f"{jit.fn.__qualname__}: compile_kernel compiles kernels defined at "
                         "a module's top level (it imports them in a fresh process)")
    backend = make_backend(GPUTarget("cuda", target.capability, 32))
    # What JITFunction.run adds to the keyword arguments before it binds them; FP fusion said
    # as the launch says it, else as the run decided it (devices.decide_triton_fp_fusion), read
    # here so that the compiling process cannot decide otherwise.
    options = {**kwargs, "debug": kwargs.get("debug", jit.debug) or triton.knobs.runtime.debug,
               "instrumentation_mode": triton.knobs.compilation.instrumentation_mode,
               "enable_fp_fusion": kwargs.get("enable_fp_fusion", default_fp_fusion())}
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound, specialization, bound_options = binder(*args, **options)
    parsed, signature, constexprs, attrs = jit._pack_args(backend, options, bound, specialization,
                                                          bound_options)
    module = jit.fn.__module__
    return Specialization(module, jit.fn.__qualname__, getattr(sys.modules.get(module), "__file__",
                                                                None), tuple(sys.path),
                          signature, constexprs, attrs, dict(parsed.__dict__), target.capability)


def default_fp_fusion() -> bool:
    """Whether Triton fuses a * b + c into an FMA in a kernel whose launch does not say: its
    knobs as a GPU run's launch reads them (TRITON_DEFAULT_FP_FUSION, or Triton's default),
    without the warning Triton 3.9 gives when the variable is unset (3.8 has no
    force_disable_fp_fusion)."""
    from triton import knobs

    return bool(knobs.language.default_fp_fusion
                and not getattr(knobs.language, "force_disable_fp_fusion", False))


def compile_kernel(kernel: Any, args: tuple, kwargs: Mapping[str, Any],
                   target: str) -> KernelResources:
    """Compile `kernel` as `kernel[grid](*args, **kwargs)` would on a GPU of `target`, and read
    the cubin's resources. kwargs hold the constexprs and the launch options (num_warps,
    num_stages, ...); an autotuned kernel is compiled one config at a time, through its `.fn`
    with that config's `all_kwargs()`.

    The compilation runs in a child process started without TRITON_INTERPRET: under the
    interpreter, Triton's own library functions (tl.cdiv, ...) are interpreted too and cannot
    be compiled, and the child compiles exactly as a GPU machine's process would."""
    gpu = gpu_target(target)
    spec = specialize(kernel, args, kwargs, gpu)
    try:
        found = _compiler().submit(compile_specialization, spec).result()
    except BrokenProcessPool as exc:  # ptxas or the child died: say so, start afresh next time
        _compiler.cache_clear()
        raise RuntimeError(f"the process compiling {spec.qualname} for {target} died: {exc}") \
            from None
    if isinstance(found, str):
        raise RuntimeError(f"{spec.qualname} does not compile for {target}:\n{found}")
    return KernelResources(target=gpu, signature={k: v for k, v in spec.signature.items()
                                                  if v != "constexpr"},
                           fp_fusion=spec.options.get("enable_fp_fusion"), **found)


def compile_specialization(spec: Specialization) -> dict[str, Any] | str:
    """In the compiling process: compile, disassemble, read the resources. Returns the fields
    of KernelResources (but the target), or the compiler's error as text."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path[:] = spec.path  # the child lives on: the parent's path may have grown
    importlib.invalidate_caches()  # and new files may have appeared on it
    loaded = sys.modules.get(spec.module)
    if loaded is not None and getattr(loaded, "__file__", None) != spec.file:
        del sys.modules[spec.module]  # another file of that name (a test's temporary folder)
    kernel: Any = importlib.import_module(spec.module)
    for part in spec.qualname.split("."):
        kernel = getattr(kernel, part)
    while not isinstance(kernel, triton.runtime.jit.JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn  # the module holds the autotuned kernel under the function's name
    if not isinstance(kernel, triton.runtime.jit.JITFunction):
        return f"{spec.module}.{spec.qualname} is not a @triton.jit function in a fresh process"
    try:
        with _listening() as events:
            started = time.perf_counter()
            compiled = triton.compile(
                ASTSource(kernel, spec.signature, spec.constexprs, spec.attrs),
                target=GPUTarget("cuda", spec.capability, 32), options=spec.options)
            seconds = time.perf_counter() - started
    except Exception as exc:  # noqa: BLE001 - CompilationError, PTXASError: reported as text
        return f"{type(exc).__name__}: {exc}"
    report = parse_cuobjdump(_cuobjdump(compiled.asm["cubin"]))
    function = report.get(compiled.metadata.name)
    if function is None:
        return f"cuobjdump listed no function {compiled.metadata.name!r} (found {sorted(report)})"
    return dict(kernel=compiled.metadata.name, num_warps=compiled.metadata.num_warps,
                num_stages=compiled.metadata.num_stages, registers=function.registers,
                spill_stores=function.spill_stores, spill_loads=function.spill_loads,
                stack=function.stack, shared=compiled.metadata.shared + function.static_shared,
                opcodes=dict(function.opcodes),
                compile_seconds=seconds if any(not hit for hit in events) else None)


@cache
def _compiler() -> ProcessPoolExecutor:
    """One compiling process for this process, spawned (a fork would inherit an interpreted
    Triton) without TRITON_INTERPRET in its environment, which @triton.jit reads as each
    kernel is defined."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        pool.submit(int).result()  # the child starts now, with the environment as it is now
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    return pool


_JIT_OF_INTERPRETED: dict[Any, Any] = {}


def _jit_function(kernel: Any) -> Any:
    """The JITFunction of `kernel` (its parameters are what the binder reads). Under
    TRITON_INTERPRET=1 @triton.jit made an interpreted function of the same Python function."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    if isinstance(kernel, InterpretedFunction):
        # Built once per kernel, with its options (do_not_specialize included).
        if kernel.fn not in _JIT_OF_INTERPRETED:
            _JIT_OF_INTERPRETED[kernel.fn] = JITFunction(kernel.fn, **kernel.kwargs)
        return _JIT_OF_INTERPRETED[kernel.fn]
    inner = getattr(kernel, "fn", None)
    if inner is not None and inner is not kernel:  # an Autotuner or Heuristics wrapper
        wrapper = type(kernel).__name__
        raise TypeError(f"{wrapper}: compile the kernel it wraps (its .fn) once per config, "
                        "with config.all_kwargs() among the keyword arguments")
    raise TypeError(f"compile_kernel needs a @triton.jit function, got {type(kernel).__name__}")
@contextlib.contextmanager
def _listening() -> Iterator[list[bool]]:
    """Whether each compilation in the block was a cache hit (Triton's compilation listener)."""
    from triton import knobs

    events: list[bool] = []
    previous = knobs.compilation.listener

    def listener(*, cache_hit: bool, **_: Any) -> None:
        events.append(cache_hit)
        if previous is not None:
            previous(cache_hit=cache_hit, **_)

    knobs.compilation.listener = listener
    try:
        yield events
    finally:
        knobs.compilation.listener = previous


def _cuobjdump(cubin: bytes) -> str:
    """`cuobjdump -res-usage -sass` of a cubin, with the cuobjdump Triton ships."""
    from triton import knobs

    tool = knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory(prefix="hpml-cubin-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool, "-res-usage", "-sass", str(path)], capture_output=True,
                             text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} -res-usage -sass failed ({out.returncode}): "
                           f"{out.stderr.strip()}")
    return out.stdout
