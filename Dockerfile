# syntax=docker/dockerfile:1
# The GPU deployment image: vLLM in process (--llm vllm), faster-whisper on
# CUDA in float16, Piper, and `voice-agent serve` as the entry point.
# Build:  docker build -t voice-agent:gpu .
# Run:    see docs/deployment.md (needs --gpus all and a cache volume).
#
# The CUDA base brings cuBLAS 12 and cuDNN 9, which CTranslate2 (faster-whisper)
# loads from the system; torch and vLLM bring their own CUDA libraries as wheels.
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
# Build tools only for llama-cpp-python (the embedded CPU backend, a core
# dependency); they stay in this stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY voice_agent ./voice_agent
# llama.cpp for any x86-64 CPU of the last ten years (AVX2), not the build machine's: the
# image runs elsewhere, and the AMX kernels crashed on a Xeon that has AMX (see README).
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
# Pinned to the versions the CPU tests run (vLLM 0.32.0) and the lock of .venv.
RUN pip install \
        "vllm==0.32.0" \
        "faster-whisper==1.2.1" \
        "ctranslate2==4.8.5" \
        "piper-tts==1.8.0" \
        "httpx==0.28.1" \
    && pip install -e ".[vllm]"

FROM ${CUDA_IMAGE}
# gcc and the Python headers: Triton (vLLM's kernels) compiles a small launcher at run time.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-dev gcc libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 agent \
    && mkdir -p /cache \
    && chown agent:agent /cache
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001

# Model downloads (Whisper, the LLM) and vLLM's compile cache go to /cache:
# mount a volume there so a restart does not download or compile again.
# GPU defaults; every one can be overridden with -e or a flag after the image name.
ENV PATH=/opt/venv/bin:$PATH \
    XDG_CACHE_HOME=/cache \
    HF_HOME=/cache/huggingface \
    VLLM_WORKER_MULTIPROC_METHOD=spawn \
    VOICE_AGENT_HOST=0.0.0.0 \
    VOICE_AGENT_PORT=8000 \
    VOICE_AGENT_STT_MODEL=large-v3-turbo \
    VOICE_AGENT_STT_DEVICE=cuda \
    VOICE_AGENT_STT_COMPUTE_TYPE=float16 \
    VOICE_AGENT_STT_WORKERS=4 \
    VOICE_AGENT_LLM=vllm \
    VOICE_AGENT_LLM_MODEL=Qwen/Qwen2.5-3B-Instruct \
    VOICE_AGENT_LLM_DTYPE=bfloat16 \
    VOICE_AGENT_LLM_CONTEXT=4096 \
    VOICE_AGENT_LLM_GPU_MEMORY=0.6

EXPOSE 8000
# Liveness, not readiness: /readyz also answers 503 while the server is busy, and a
# busy server must not be restarted. The first start downloads the models, hence
# the long start period.
HEALTHCHECK --interval=15s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('VOICE_AGENT_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["voice-agent", "serve"]
