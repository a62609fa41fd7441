//! Foothold's site agent: the OCI registry that compute nodes use as a mirror, the BPA image upload API (REST
//! and tus) and file server, their shared content store, the BPA, Software, SIP and ViNO reconcilers
//! (`controllers`) and ViNO's node side (`vino_builder`), and the tools around them (import, fsck, mirror
//! configuration, the CRDs).
// Denied everywhere but `store::mapped` (memory-mapped blob reads for serving).
#![deny(unsafe_code)]

pub mod apt;
pub mod archive;
pub mod auth;
pub mod cli;
pub mod controllers;
pub mod crd;
pub mod digest;
pub mod expiry;
pub mod fsck;
pub mod fuzz;
pub mod gotmpl;
pub mod http;
pub mod images;
pub mod import;
pub mod installer;
pub mod json_depth;
pub mod manifest;
pub mod metrics;
pub mod mirror_config;
pub mod names;
pub mod neighbors;
pub mod pki;
pub mod reference;
pub mod ssh_ca;
pub mod store;
pub mod uploads;
pub mod vino_builder;
pub mod vino_plan;
pub mod watched;
