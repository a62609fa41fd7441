//! The agent's HTTP side: one router for the OCI registry (`/v2`), the BPA REST API (`/v1/baremetalcluster`),
//! tus uploads (`/v1/uploads`), the file server (`/files`), the apt repository (`/apt`), the OpenAPI document,
//! metrics and health. Requests
//! flow one way: the router (`router`) → the handlers of one protocol → the services (`images`, `uploads`,
//! `store`).
//! The handlers' shared state is [`state`], a leaf; no handler module imports this one.

pub mod access;
mod admission;
mod apt;
pub mod certs;
pub mod error;
mod files;
pub mod fuzz;
pub mod limits;
pub mod openapi;
pub mod range;
pub mod registry;
mod rest;
mod router;
pub mod schema;
pub mod sendfile;
mod serve;
pub mod serve_file;
pub mod state;
mod tus;

pub use router::router;
pub use serve::{serve, serve_blocking, ServeConfig};
pub use state::{AppState, DEFAULT_MAX_IMAGE_LENGTH};
