# Build:  docker build -t subgate .      (or: make docker-build; BuildKit is required)
# Run:    docker run --rm -p 8080:8080 -e DATABASE_URL=... -e JWT_SECRET=... subgate
# Check:  make docker-smoke builds this image, runs docker-compose.yml and logs in.
# See docker-compose.yml for a complete setup with PostgreSQL.
#
# No `# syntax=` line: it would make BuildKit fetch a frontend image from a registry; the
# builder's own Dockerfile frontend already knows `RUN --mount`.

# ---------------------------------------------------------------- build stage
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and compiled dependencies between builds, so a
# rebuild after a source change compiles only the subgate crate. target/ is a cache mount, so
# the binary is copied out of it in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin subgate \
    && install -m 0755 target/release/subgate /usr/local/bin/subgate

# ---------------------------------------------------------------- runtime stage
# The binary and CA certificates only: no compiler, no package cache, no shell tools beyond
# the base image's.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && groupadd --system --gid 10001 subgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin subgate
COPY --from=builder /usr/local/bin/subgate /usr/local/bin/subgate
ENV BIND_ADDR=0.0.0.0:8080 \
    LOG_FORMAT=json
EXPOSE 8080
USER 10001:10001
# `subgate healthcheck` GETs /readyz on BIND_ADDR's port (127.0.0.1) and exits 0 or 1, so the
# container is healthy only while the server answers and its database is reachable and migrated.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["subgate", "healthcheck"]
ENTRYPOINT ["subgate"]
CMD ["serve"]
