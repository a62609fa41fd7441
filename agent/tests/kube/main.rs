//! The Kubernetes side, one test binary sharing one control plane (etcd and kube-apiserver, started on first
//! use; each test in a namespace of its own): the BPA, Software, SIP and ViNO reconcilers through the real
//! agent binary, the CRDs it prints, SIP's rendered HAProxy and ssh configurations checked by the real tools,
//! and `vino-builder`'s libvirt side.

#[path = "../support/mod.rs"]
mod support;

mod airship_compat;
mod airship_vino;
mod availability;
mod bpa;
mod bpa_heal;
mod bpa_hold;
mod bpa_members;
mod bpa_reprovision;
mod crds;
mod drain;
mod faults;
mod hosts;
mod installer_secret;
mod jobs;
mod kubelet_serving;
mod rbac;
mod sip;
mod sip_bench;
mod sip_render;
mod software;
mod vino;
mod vino_builder;
mod vino_builder_live;
