# syntax=docker/dockerfile:1
#
# Build:  docker build -t subgate .      (or: make docker-build)
# Run:    docker run --rm -p 8080:8080 -e DATABASE_URL=... -e JWT_SECRET=... subgate
# See docker-compose.yml for a complete setup with PostgreSQL.

# ---------------------------------------------------------------- build stage
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and compiled dependencies between
# builds (BuildKit, the default builder since Docker 23). target/ is a cache
# mount, so copy the binary out of it in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && install -m 0755 target/release/subgate /usr/local/bin/subgate

# ---------------------------------------------------------------- runtime stage
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 subgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin subgate
COPY --from=builder /usr/local/bin/subgate /usr/local/bin/subgate
ENV BIND_ADDR=0.0.0.0:8080 \
    LOG_FORMAT=json
EXPOSE 8080
USER 10001:10001
# No HEALTHCHECK here: the image has no curl. docker-compose.yml checks health
# with `subgate healthcheck`, which GETs /readyz on the BIND_ADDR port.
ENTRYPOINT ["subgate"]
CMD ["serve"]
