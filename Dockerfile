# RocBoard on AMD GPUs: AMD's rocm/pytorch image keeps its ROCm build of torch; the app's
# requirements go on top. See docs/docker.md.
#
# Pick another tag with `--build-arg ROCM_PYTORCH_IMAGE=...` (or ROCM_PYTORCH_IMAGE in .env for
# compose). It needs Python >= 3.11 (LLaMA-Factory 0.9.5) and torch >= 2.4.
ARG ROCM_PYTORCH_IMAGE=rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.7.1
FROM ${ROCM_PYTORCH_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_DISABLE_TELEMETRY=1 \
    HOME=/home/rocboard

WORKDIR /app

# Keep the image's torch. Every torch package the image ships is pinned as a pip constraint,
# so a requirement that wants another torch makes the build fail here instead of silently
# replacing the ROCm build with a CUDA wheel from PyPI. (The same idea as the Makefile's
# --system-site-packages venv, which reuses a torch it finds.) The last line proves it.
COPY requirements.txt /app/requirements.txt
RUN python3 -c "import importlib.metadata as md; have = {d.metadata['Name'].lower().replace('_', '-'): d.version for d in md.distributions()}; print('\n'.join(f'{n}=={have[n]}' for n in ('torch', 'torchvision', 'torchaudio', 'triton', 'pytorch-triton-rocm') if n in have))" > /etc/rocboard-keep-torch.txt \
 && cat /etc/rocboard-keep-torch.txt \
 && grep -q '^torch==' /etc/rocboard-keep-torch.txt \
 && python3 -m pip install -c /etc/rocboard-keep-torch.txt -r /app/requirements.txt \
 && python3 -c "import torch; assert torch.version.hip, 'torch lost its ROCm build'; print('torch', torch.__version__, 'HIP', torch.version.hip)"

# The app runs from this copy of the source, as `python app.py` does in a clone (/app is the
# working directory and the script's directory), so RocBoard itself needs no pip install here.
COPY . /app
# The offline demo (tiny model + dataset) is built into the image: the app runs as a non-root
# user that cannot write /app.
RUN python3 -m backend.demo \
 && mkdir -p /home/rocboard /runs /models /data \
 && chmod 1777 /home/rocboard

EXPOSE 7860
# Inside the container the app listens on all interfaces (the port is published on the host's
# loopback only, see docker-compose.yml); app.py refuses that without a login, which
# ROCBOARD_AUTH_FILE provides.
CMD ["python3", "/app/app.py", "--host", "0.0.0.0", "--port", "7860", "--runs-dir", "/runs"]
