"""The Dockerfile and docs/deployment.md use only options the server has.

The image cannot be built on the test machine (no Docker engine), so these
checks keep it in step with the code: every VOICE_AGENT_* variable it sets
and every flag the deployment guide shows is a real setting with a valid value.
"""

from __future__ import annotations

import dataclasses
import re

from tests.conftest import ROOT
from voice_agent.config.settings import ENV_PREFIX, Settings, _parse

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
    assert "HEALTHCHECK" in DOCKERFILE and "/healthz" in DOCKERFILE  # liveness: a busy server is not restarted


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
# Flags of scripts/topology (voice_agent/topology.py) and of kubernetes-validate that the guide shows.
TOOL_FLAGS = {"gateways", "out", "strict"}


def test_every_flag_in_the_deployment_guide_is_a_real_flag():
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]+)", DEPLOYMENT))
    assert {"llm", "llm-url", "llm-gpu-memory", "stt-device"} <= flags
    unknown = {f for f in flags - DOCKER_FLAGS - VLLM_FLAGS - TOOL_FLAGS if f.replace("-", "_") not in FIELDS}
    assert not unknown, f"docs/deployment.md shows flags that voice-agent serve does not have: {sorted(unknown)}"


def k8s(name: str) -> list[dict]:
    import yaml

    return [doc for doc in yaml.safe_load_all((ROOT / "deploy" / "k8s" / name).read_text()) if doc]


def test_the_kubernetes_gateways_drain_within_their_grace_period_and_reach_the_vllm_service():
    gateway = next(d for d in k8s("gateway.yaml") if d["kind"] == "Deployment")
    pod = gateway["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e["value"] for e in container["env"]}
    for name, raw in env.items():
        if name.startswith(ENV_PREFIX):
            _parse(FIELDS[name[len(ENV_PREFIX) :].lower()], raw)
    # The drain: the grace for answers in flight, then uvicorn's own shutdown (5 s) and the process's exit.
    assert pod["terminationGracePeriodSeconds"] >= float(env[f"{ENV_PREFIX}SHUTDOWN_GRACE_S"]) + 10
    args = container["args"]
    flags = {a[2:] for a in args if a.startswith("--")}
    assert not {f for f in flags if f.replace("-", "_") not in FIELDS}
    assert args[args.index("--llm") + 1] == "openai"
    vllm_service = next(d for d in k8s("vllm.yaml") if d["kind"] == "Service")
    port = vllm_service["spec"]["ports"][0]["port"]
    assert args[args.index("--llm-url") + 1] == f"http://{vllm_service['metadata']['name']}:{port}/v1"
    ingress = k8s("ingress.yaml")[0]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == gateway["metadata"]["name"]


def test_the_guide_shows_the_haproxy_config_that_scripts_topology_writes():
    from voice_agent.topology import haproxy_config

    assert f"```haproxy\n{haproxy_config(8080, [8101, 8102], 8404)}```" in DEPLOYMENT
