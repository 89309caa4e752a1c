"""The benchmark from an installed wheel: built from this checkout, installed into a fresh venv outside it,
and run from a folder outside it, where nothing of the checkout can be found."""

from __future__ import annotations

import json
import os
import site
import subprocess
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_packaging import build_wheel

pytestmark = pytest.mark.e2e


def test_the_latency_benchmark_runs_one_turn_from_an_installed_wheel(tmp_path):
    (tmp_path / "build").mkdir()
    wheel = build_wheel(tmp_path / "build")
    home = tmp_path / "venv"
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    packages = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # The dependencies are this environment's, not rebuilt or downloaded: its site-packages come after the
    # fresh venv's own, so the wheel's voice_agent is the one imported.
    (packages / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr

    def run(*command: str | Path, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)

    where = run(python, "-c", "import voice_agent.bench.harness as h; print(h.__file__); print(h.TURNS)")
    module, turns = where.stdout.split()
    assert Path(module).is_relative_to(packages) and not Path(module).is_relative_to(ROOT)
    turn = Path(turns) / "bench_turns" / "open_tonight.flac"
    assert turn.is_file()

    bench = home / "bin" / "voice-agent"
    helped = run(bench, "bench", "latency", "--help")
    assert helped.returncode == 0 and "--sessions" in helped.stdout, helped.stderr
    assert "bench_turns/script.yaml" in helped.stdout

    script = elsewhere / "one_turn.yaml"
    script.write_text(f"turns:\n  - file: {turn}\n    expect: Hello, are you open tonight?\n")
    done = run(bench, "bench", "latency", "--sessions", "1", "--script", script, "--out", "out", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((elsewhere / "out" / "bench.json").read_text())
    (level,) = result["levels"]
    assert level["summary"]["turns"] == 1 and level["summary"]["unanswered"] == 0
    assert (elsewhere / "out" / "sessions-1" / "report.json").is_file()
    assert f"started the server: {python} -m voice_agent serve" in done.stderr
