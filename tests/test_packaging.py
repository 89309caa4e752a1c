"""What a non-editable install ships: a wheel built from this checkout holds the browser client."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT
from voice_agent.server.app import WEB_DIR

PAGE = ("index.html", "app.js", "audio.js", "connection.js", "worklets.js", "style.css")


def test_the_server_serves_the_page_from_inside_the_package():
    assert WEB_DIR == ROOT / "voice_agent" / "web"
    assert sorted(PAGE) == sorted(path.name for path in WEB_DIR.iterdir())


def build_wheel(tmp_path: Path) -> Path:
    """A wheel of this checkout, built offline in ``tmp_path``."""
    # Built from a copy, so that the build leaves no build/ or egg-info in the checkout.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "voice_agent", source / "voice_agent", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("voice_agent-*.whl")
    return wheel


def test_the_wheel_holds_the_page_and_the_benchmark_turns(tmp_path):
    names = set(zipfile.ZipFile(build_wheel(tmp_path)).namelist())
    for page in PAGE:
        assert f"voice_agent/web/{page}" in names
    assert "voice_agent/server/app.py" in names and "voice_agent/bench/harness.py" in names
    assert not any(name.startswith(("tests/", "scripts/", "experiments/")) for name in names)
    for folder in ("bench_turns", "bargein_turns", "endpoint_turns", "endpoint_turns/words", "endpoint_turns/real"):
        assert f"voice_agent/bench/turns/{folder}/script.yaml" in names
    assert "voice_agent/bench/turns/bench_turns/open_tonight.flac" in names
    assert "voice_agent/bench/turns/endpoint_turns/real/README.md" in names  # the real speech's attribution
    assert not any(name.endswith("generate.py") for name in names)  # the generators stay in the checkout
