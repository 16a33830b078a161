# zarrd container image: build with cargo in a Rust image, run from slim Debian.
#
#   docker build -t zarrd .
#   docker run --rm -p 127.0.0.1:8080:8080 -v "$PWD/data:/data" zarrd
#
# The build step is the README's build command (`cargo build --release --locked`).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY src ./src
COPY openapi ./openapi
COPY config ./config
RUN cargo build --release --locked && cp target/release/zarrd /usr/local/bin/zarrd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin zarrd \
    && mkdir -p /data /etc/zarrd && chown zarrd /data
COPY --from=build /usr/local/bin/zarrd /usr/local/bin/zarrd
COPY config/docker.toml /etc/zarrd/zarrd.toml
USER zarrd
VOLUME ["/data"]
EXPOSE 8080
ENV RUST_LOG=info
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/zarrd"]
CMD ["serve", "--config", "/etc/zarrd/zarrd.toml"]
