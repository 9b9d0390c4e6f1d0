"""Run code in a fresh interpreter with the kernels capped at one SIMD level (``CROSSEMBED_SIMD``).

The level is read once, when the extension loads, so each level needs its own process.
"""

import os
import subprocess
import sys

#: the x86-64 levels, narrowest first (a level above the CPU's runs the CPU's own)
X86_LEVELS = ("generic", "avx2", "avx512")


def run_at_level(level: str, *argv: str, text: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python *argv`` with ``CROSSEMBED_SIMD=level``; stdout and stderr captured (``str`` with ``text``)."""
    env = dict(os.environ, CROSSEMBED_SIMD=level)
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=text, timeout=timeout)
