"""The house rules the tree keeps: layering, no environment reads below the entry points, no side effects at
import, modules of one concept, and a clear message for an import path that moved."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
# Modules allowed past MAX_MODULE_LINES because they hold one concept (path -> the concept).
ONE_CONCEPT = {
    "mascot/group/director.py": "the director modes and their shared decision rules",
}
# The only places below the entry points that may read the environment, and why.
ENV_READERS = {
    "mascot/settings.py": "the one settings object",
    "mascot/backends/__init__.py": "CUDA_VISIBLE_DEVICES, the standard way to hide GPUs",
    "mascot/jobs/runner.py": "builds the environment of the job subprocesses it starts",
    "mascot/train/processes.py": "RANK and WORLD_SIZE, set by torch/accelerate launchers",
    "mascot/backends/llamacpp/runtime.py": "OpenMP's variables, set while llama.cpp's runtime loads, then restored",
    "mascot/train/cli.py": "an entry point (`mascot train`)",
}


def _py_files(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py") if "migrations" not in p.parts)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_layering():
    for path in _py_files("mascot"):
        assert "gradio" not in _imports(path), f"{path.relative_to(ROOT)} imports gradio (mascot/ never does)"
    for path in _py_files("annotation"):
        bad = _imports(path) & {"gradio", "torch"}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad} (annotation/ imports neither gradio nor torch)"


def _reads_environment(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id in ("os", "_os"):
            lines.append(node.lineno)
    return lines


def test_no_environment_reads_below_the_entry_points():
    found = {}
    for path in _py_files("mascot"):
        rel = str(path.relative_to(ROOT))
        if rel not in ENV_READERS and (lines := _reads_environment(path)):
            found[rel] = lines
    assert not found, f"environment read outside mascot/settings.py and the listed places: {found}"


def test_importing_the_package_changes_no_environment():
    code = ("import json, os, sys\n"
            "before = dict(os.environ)\n"
            "import mascot, mascot.group.chat, mascot.group.engine, mascot.safety.detector, mascot.backends\n"
            "print(json.dumps(sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []


def test_modules_hold_one_concept_each():
    long = {}
    for path in _py_files("mascot", "app", "annotation"):
        rel = str(path.relative_to(ROOT))
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_MODULE_LINES and rel not in ONE_CONCEPT:
            long[rel] = n
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them, or name their one concept): {long}"


@pytest.mark.parametrize("old, new", [("mascot.safety_cli", "mascot.safety.cli"), ("mascot.chat", "mascot.group.chat"),
                                      ("mascot.backends.llamacpp_lora", "mascot.backends.llamacpp.lora")])
def test_a_moved_module_names_its_new_place(old, new):
    import importlib

    with pytest.raises(ModuleNotFoundError, match=new.replace(".", r"\.")):
        importlib.import_module(old)


def test_the_console_script_lists_every_command():
    from mascot.__main__ import COMMANDS

    out = subprocess.run([sys.executable, "-m", "mascot", "--help"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert all(name in out.stdout for name in COMMANDS)
