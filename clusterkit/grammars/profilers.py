"""``nsys profile`` and ``rocprof`` command lines: the profiler's options, then the program it
starts (checked as that program's own command).

Option names, arities and values from NVIDIA's Nsight Systems User Guide ("CLI Profile Command
Switch Options", 2023-2025 releases) and AMD's ROCm documentation of ``rocprof`` (ROCProfiler
v1, "Using rocprof"). Nsight Systems reads a long option's value after ``=`` and a short
option's after a space; ``%q{VAR}`` in an output name is the value of an environment variable.
"""

from __future__ import annotations

from clusterkit.sites.errors import Finding

_BOOL = {"true", "false"}
# nsys profile: long name -> (short, takes a value, allowed values or None; a set of lists for
# comma-separated lists)
NSYS_PROFILE = {
    "--trace": ("-t", True, {
        "cuda", "nvtx", "osrt", "cublas", "cublas-verbose", "cusparse", "cusparse-verbose",
        "cudnn", "cudla", "cudla-verbose", "cusolver", "cusolver-verbose", "opengl",
        "opengl-annotations", "openacc", "openmp", "mpi", "oshmem", "ucx", "vulkan",
        "vulkan-annotations", "nvvideo", "nvmedia", "python-gil", "syscall", "tegra-accelerators",
        "gds", "none",
    }),
    "--output": ("-o", True, None),
    "--force-overwrite": ("-f", True, _BOOL),
    "--sample": ("-s", True, {"process-tree", "system-wide", "none", "cpu"}),
    "--backtrace": ("-b", True, {"auto", "fp", "lbr", "dwarf", "none"}),
    "--cpuctxsw": (None, True, {"process-tree", "system-wide", "none"}),
    "--stats": (None, True, _BOOL),
    "--duration": ("-d", True, None),
    "--delay": ("-y", True, None),
    "--capture-range": ("-c", True, {"none", "cudaProfilerApi", "nvtx", "hotkey"}),
    "--capture-range-end": (None, True, None),
    "--nvtx-capture": ("-p", True, None),
    "--cuda-memory-usage": (None, True, _BOOL),
    "--cudabacktrace": (None, True, None),
    "--gpu-metrics-devices": (None, True, None),
    "--gpu-metrics-set": (None, True, None),
    "--gpu-metrics-frequency": (None, True, None),
    "--mpi-impl": (None, True, {"openmpi", "mpich"}),
    "--show-output": ("-w", True, _BOOL),
    "--stop-on-exit": ("-x", True, _BOOL),
    "--export": (None, True, None),
    "--inherit-environment": ("-n", True, _BOOL),
    "--env-var": ("-e", True, None),
    "--wait": (None, True, {"primary", "all"}),
    "--kill": (None, True, None),
    "--trace-fork-before-exec": (None, True, _BOOL),
    "--python-sampling": (None, True, _BOOL),
    "--python-backtrace": (None, True, None),
    "--pytorch": (None, True, None),
    "--session-new": (None, True, None),
    "--help": ("-h", False, None),
}  # fmt: skip
# rocprof (ROCProfiler v1): name -> (takes a value, allowed values)
ROCPROF = {
    "--stats": (False, None), "--basenames": (True, {"on", "off"}),
    "--hip-trace": (False, None), "--hsa-trace": (False, None), "--sys-trace": (False, None),
    "--kfd-trace": (False, None), "--roctx-trace": (False, None), "--roctx-rename": (False, None),
    "--timestamp": (True, {"on", "off"}), "--ctx-wait": (True, {"on", "off"}),
    "--obj-tracking": (True, {"on", "off"}), "--flush-rate": (True, None),
    "--trace-period": (True, None), "--trace-start": (True, {"on", "off"}),
    "--merge-traces": (False, None), "--list-basic": (False, None),
    "--list-derived": (False, None), "--parallel-kernels": (False, None),
    "-i": (True, None), "-o": (True, None), "-d": (True, None), "-t": (True, None),
    "-m": (True, None), "-h": (False, None), "--help": (False, None),
}  # fmt: skip


class ProfilerOptionError(ValueError):
    pass


def _value_ok(name: str, value: str, allowed) -> None:
    if allowed is None or "$" in value:
        return
    for item in value.split(",") if name in {"--trace", "-t"} else [value]:
        if item not in allowed:
            want = ", ".join(sorted(allowed))
            raise ProfilerOptionError(f"{name}: invalid value {item!r} (one of {want})")


def parse_nsys(words: list[str]) -> list[str]:
    """``nsys profile OPTIONS PROGRAM ARGS`` (``words`` after ``nsys``) -> the program's words."""
    if not words or words[0] != "profile":
        raise ProfilerOptionError(f"nsys: only `nsys profile` is judged here, not {words[:1]}")
    shorts = {s: long for long, (s, _t, _v) in NSYS_PROFILE.items() if s}
    i, args = 0, words[1:]
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        long = shorts.get(name, name)
        if long not in NSYS_PROFILE:
            raise ProfilerOptionError(f"nsys profile: unrecognised option '{name}'")
        _short, takes, allowed = NSYS_PROFILE[long]
        if takes and not eq:
            if i + 1 >= len(args):
                raise ProfilerOptionError(f"nsys profile: {name} needs a value")
            value, i = args[i + 1], i + 1
        if takes:
            _value_ok(long, value, allowed)
        i += 1
    return args[i:]


def parse_rocprof(words: list[str]) -> list[str]:
    """``rocprof OPTIONS PROGRAM ARGS`` (``words`` after ``rocprof``) -> the program's words."""
    i = 0
    while i < len(words) and words[i].startswith("-"):
        name = words[i]
        if name not in ROCPROF:
            raise ProfilerOptionError(f"rocprof: unknown option {name}")
        takes, allowed = ROCPROF[name]
        if takes:
            if i + 1 >= len(words):
                raise ProfilerOptionError(f"rocprof: {name} needs a value")
            _value_ok(name, words[i + 1], allowed)
            i += 1
        i += 1
    return words[i:]


PARSERS = {"nsys": parse_nsys, "rocprof": parse_rocprof}


def check(page, line: int, words: list[str], inner) -> list[Finding]:
    """Findings for a profiler command; ``inner(words)`` checks the program it starts."""
    tool = words[0].rsplit("/", 1)[-1]
    try:
        program = PARSERS[tool](list(words[1:]))
    except ProfilerOptionError as exc:
        return [Finding(page, line, "profiler-option", str(exc))]
    if not program:
        return [Finding(page, line, "profiler-option", f"{tool}: no program to profile")]
    return inner(program)
