//! Running the service: the `subgate` binary's commands, configuration errors and shutdown,
//! request ids and problem+json answers, the database going away, failing over or reached over
//! TLS, connection hygiene, Prometheus metrics, log output, the OpenAPI document against the
//! router, and the code's vocabularies against the schema's constraints.

pub(crate) mod cli;
mod connections;
mod database;
mod failover;
mod http;
mod logs;
mod metrics;
mod metrics_flows;
pub(crate) mod openapi;
mod schema;
mod smoke;
mod tls;
