# toolgate in a container: the release binary on a slim base. The model is a GGUF file
# mounted at /models, or a Hub repository id pulled into /cache at start (docs/deploy.md).
#
#   docker build -t toolgate .
#   docker run -p 8080:8080 -v "$PWD/models:/models" toolgate \
#       serve --model /models/model.gguf --host 0.0.0.0 --port 8080
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin toolgate

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /cache toolgate \
    && mkdir -p /cache /models && chown toolgate /cache
COPY --from=build /src/target/release/toolgate /usr/local/bin/toolgate
USER toolgate
# Hub pulls go to the Hugging Face cache layout under /cache.
ENV HF_HOME=/cache \
    TOOLGATE_DRAIN_SECONDS=10
EXPOSE 8080
ENTRYPOINT ["toolgate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--model", "/models/model.gguf"]
