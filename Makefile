# subgate developer tasks (GNU make). `make help` lists them.
# Extra arguments for cargo test / cargo bench: make test ARGS="-- --nocapture"

SHELL := /bin/bash
.DEFAULT_GOAL := help

ARGS ?=
IMAGE ?= subgate

.PHONY: help run test statements-update chaos docs-test fuzz bench fmt lint doc lint-js shellcheck clean-db docker-build docker-smoke

help:
	@echo "make run           build and run the server locally (PostgreSQL and dev secrets set up for you)"
	@echo "make test          run cargo test --workspace against PostgreSQL (ARGS=... passed through); without ARGS, also compare the SQL sent with tests/snapshots/statements.sql"
	@echo "make statements-update  the whole suite, then take the SQL it sent as tests/snapshots/statements.sql (a change meant)"
	@echo "make chaos         payments through a database failover: a primary and a synchronous standby, the primary killed mid-flood, the standby promoted; nothing acknowledged lost or doubled (ARGS='--help')"
	@echo "make docs-test     run the docs' shell walk-throughs against a live server on a fresh database"
	@echo "make fuzz          fuzz a live server against its OpenAPI document (schemathesis): no 5xx, answers as documented"
	@echo "make bench         payment path (with and without TLS), re-deliveries and sweep vs references, statistics, time to access and grant bursts, bot storms (ARGS=... to the payment bench, e.g. ARGS='--duration 30'; SWEEP_BENCH_ROWS=...; BENCH_SKIP_*=1)"
	@echo "make fmt           cargo fmt --check"
	@echo "make lint          cargo clippy --all-targets -- -D warnings"
	@echo "make doc           cargo doc of the crate, private items included; a broken intra-doc link or any other rustdoc warning fails"
	@echo "make lint-js       ESLint over the console's and the Mini App's JavaScript (pinned in scripts/eslint/, installed under target/eslint with npm ci; Debian's nodejs and npm when node is missing and root)"
	@echo "make shellcheck    ShellCheck over scripts/ and .ci/run (installs Debian's shellcheck when missing and root)"
	@echo "make clean-db      stop the private PostgreSQL cluster in target/pgdata"
	@echo "make docker-build  docker build -t $(IMAGE) ."
	@echo "make docker-smoke  build the image, run docker-compose.yml on throwaway secrets, check health, /readyz and a staff login, tear down"

run:
	scripts/run-dev.sh

test:
	scripts/test.sh $(ARGS)

statements-update:
	UPDATE_STATEMENTS=1 scripts/test.sh

chaos:
	scripts/chaos.sh $(ARGS)

docs-test:
	scripts/docs-walkthrough.sh

fuzz:
	scripts/fuzz-api.sh

bench:
	scripts/bench.sh $(ARGS)

fmt:
	cargo fmt --check

lint:
	cargo clippy --all-targets -- -D warnings

# The code is documented for its developers, so private items are documented and links to them
# are expected (rustdoc's private_intra_doc_links is allowed); every other warning, a broken
# link first, fails.
doc:
	RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" cargo doc --no-deps --document-private-items

lint-js:
	scripts/lint-js.sh

shellcheck:
	scripts/lint-shell.sh

clean-db:
	scripts/stop-postgres.sh

docker-build:
	docker build -t $(IMAGE) .

docker-smoke:
	scripts/docker-smoke.sh
