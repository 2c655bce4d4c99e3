"""Native code of the lab, compiled once per machine and cached.

A build is cached under ~/.cache/pytest-hpml (or $HPML_CACHE_DIR), named by a hash of the
source, the compiler's version and the flags, so a changed source, compiler or flag rebuilds
it. xdist workers may build at the same time: each writes a private temporary file and renames
it into place, which is atomic, so no worker ever loads a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("HPML_CACHE_DIR") or Path.home() / ".cache" / "pytest-hpml"
    return Path(root) / "vector_add"


def tool_version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout


def cached_build(source: Path, tool: str, flags: Sequence[str], out_dir: Path | None = None,
                 suffix: str = ".so") -> Path:
    """`tool *flags source -o OUT` unless OUT, named by what it is built from, exists."""
    out_dir = out_dir or cache_dir()
    key = hashlib.sha256()
    key.update(source.read_bytes())
    key.update(tool_version(tool).encode())
    key.update(" ".join(flags).encode())
    built = out_dir / f"{source.stem}-{key.hexdigest()[:16]}{suffix}"
    if built.exists():
        return built
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=out_dir)
    os.close(fd)
    try:
        done = subprocess.run([tool, *flags, str(source), "-o", tmp],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"compiling {source.name} with {tool} failed "
                               f"(exit {done.returncode}):\n{done.stderr}")
        os.replace(tmp, built)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return built
