//! Foothold's image builder: turns an appliance spec into bootable media. Only the skeleton exists so far;
//! the build phases arrive with the image-builder issue.
#![forbid(unsafe_code)]

/// The builder's version, reported in image manifests.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
