"""The install is quiet: every importable folder of the package is declared (setuptools warns
about each one that is not), and the platforms fitted on public data ship with it."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _copy_tree(dst):
    """The files an install reads, without build outputs (an in-tree build reuses them)."""
    skip = shutil.ignore_patterns("*.so", "__pycache__", "build", "*.egg-info")
    for name in ("ailens", "integrations"):
        shutil.copytree(os.path.join(REPO, name), dst / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), dst / name)


@pytest.mark.timeout(240)
def test_editable_install_declares_every_package_and_ships_platform_data(tmp_path):
    src = tmp_path / "src"
    _copy_tree(src)
    # scripts/setup's `pip install -e`: setuptools' PEP 660 hook, as pip calls it. CC=false
    # skips the optional extension (its compile is tested in test_recorder.py).
    env = {**os.environ, "CC": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    code = f"from setuptools import build_meta as b; b.build_editable({str(tmp_path / 'ed')!r})"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=200, env=env,
        cwd=src,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "absent from the `packages` configuration" not in out, out
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=200, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("ailens-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    fitted = sorted(os.listdir(os.path.join(REPO, "ailens", "predict", "platform_data")))
    assert fitted and all(f"ailens/predict/platform_data/{f}" in names for f in fitted), names
    # The device-speed model the cluster what-if reads (ailens/predict/device_speed.py).
    assert "ailens/predict/device_speed.json" in names, names


def test_the_set_up_package_has_its_bytecode_compiled():
    """Issue 33: an editable install compiles nothing and PYTHONDONTWRITEBYTECODE (set on this
    VM and in many containers) keeps Python from writing what it compiles, so every launch
    compiled ailens again (~40 ms of `import ailens`); scripts/setup compiles it, as a wheel
    install does. Every module a recording imports has its bytecode beside it."""
    import importlib.util

    import ailens  # noqa: F401 - loads what a recording loads

    mods = [
        m
        for name, m in sys.modules.items()
        if name.startswith("ailens") and getattr(m, "__file__", "").endswith(".py")
    ]
    assert len(mods) > 20
    missing = [
        m.__name__ for m in mods if not os.path.exists(importlib.util.cache_from_source(m.__file__))
    ]
    assert not missing, f"no bytecode (run scripts/setup): {missing}"
