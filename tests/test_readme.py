"""The README's first Python example runs as written, and its two set-up commands are the ones CI uses."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_kernel_tour_runs():
    text = (ROOT / "README.md").read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["idx"].shape == (5, 3)


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0].strip().splitlines()
    assert len(commands) == 2 and commands[0].endswith("crossembed demo")
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
