//! Foothold's image builder: turns an appliance spec into bootable media (see `build`), and boots them in qemu
//! for labs and tests (see `qemu`).

pub mod auth;
pub mod bios;
pub mod build;
pub mod built_images;
pub mod bundle;
pub mod cache_lock;
pub mod cmd;
pub mod dhcp;
pub mod ext4;
pub mod fetch;
pub mod files;
pub mod firewall;
pub mod go_archive;
pub mod gpt;
pub mod images;
pub mod io;
pub mod ipa;
pub mod kube;
pub mod metal3;
pub mod node;
pub mod overlay;
pub mod pin;
pub mod progress;
pub mod qemu;
pub mod site;
pub mod source;
pub mod sparse;
pub mod spec;
pub mod virtual_site;

/// The builder's version, reported in image manifests.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
