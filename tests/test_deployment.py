"""The Dockerfile and docs/deployment.md use only options the server has.

The image cannot be built on the test machine (no Docker engine), so these
checks keep it in step with the code: every VOICE_AGENT_* variable it sets
and every flag the deployment guide shows is a real setting with a valid value.
"""

from __future__ import annotations

import dataclasses
import re

from tests.conftest import ROOT
from voice_agent.config import ENV_PREFIX, Settings, _parse

FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
DOCKERFILE = (ROOT / "Dockerfile").read_text()
DEPLOYMENT = (ROOT / "docs" / "deployment.md").read_text()


def dockerfile_settings() -> dict[str, str]:
    return dict(re.findall(rf"\b{ENV_PREFIX}([A-Z0-9_]+)=(\S+)", DOCKERFILE))


def test_the_image_sets_only_real_settings_with_valid_values():
    settings = dockerfile_settings()
    assert {"LLM", "STT_DEVICE", "STT_COMPUTE_TYPE", "HOST"} <= settings.keys()
    for name, raw in settings.items():
        field = FIELDS.get(name.lower())
        assert field is not None, f"{ENV_PREFIX}{name} is not a setting"
        _parse(field, raw.rstrip("\\").strip())  # raises SystemExit on a bad value or choice


def test_the_image_runs_the_gpu_defaults():
    settings = {k: v.rstrip("\\").strip() for k, v in dockerfile_settings().items()}
    assert settings["LLM"] == "vllm"
    assert settings["STT_DEVICE"] == "cuda" and settings["STT_COMPUTE_TYPE"] == "float16"
    assert settings["HOST"] == "0.0.0.0"
    assert 'ENTRYPOINT ["voice-agent", "serve"]' in DOCKERFILE
    assert re.search(r"^USER (?!root|0\b)", DOCKERFILE, re.M), "runs as a non-root user"
    assert "HEALTHCHECK" in DOCKERFILE and "/readyz" in DOCKERFILE


# Flags of other programs that the documents show: docker run, and vllm serve.
DOCKER_FLAGS = {"gpus", "rm", "name", "env", "volume", "publish"}
VLLM_FLAGS = {
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "enforce-eager",
    "enable-prefix-caching",
    "max-model-len",
    "port",
}


def test_every_flag_in_the_deployment_guide_is_a_real_flag():
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]+)", DEPLOYMENT))
    assert {"llm", "llm-url", "llm-gpu-memory", "stt-device"} <= flags
    unknown = {f for f in flags - DOCKER_FLAGS - VLLM_FLAGS if f.replace("-", "_") not in FIELDS}
    assert not unknown, f"docs/deployment.md shows flags that voice-agent serve does not have: {sorted(unknown)}"
