//! The agent's HTTP side and its store, one test binary: the registry against real clients (skopeo, podman,
//! crane, oras, containerd) and the OCI conformance suite, the BPA REST API, tus uploads, the file server,
//! the OpenAPI document (schemathesis), imports, crashes, a full disk, resumed uploads and zero-copy serving.

#[path = "../support/mod.rs"]
mod support;

mod apt;
mod archive;
mod cli;
mod clients;
mod conformance;
mod connection;
mod crash;
mod credentials;
mod disk_full;
mod expiry;
mod hostile;
mod icn_rest;
mod import;
mod limits;
mod monitoring;
mod openapi;
mod registry_api;
mod registry_refs;
mod rest_api;
mod serving;
mod tus;
mod upload_resume;
mod zero_copy;
