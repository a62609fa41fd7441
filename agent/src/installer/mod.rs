//! Foothold's installer: what the BPA's installer Jobs run to turn the provisioned hosts of a `Provisioning`
//! into a Kubernetes cluster (`foothold-agent install-cluster`, kubeadm) and to install a `Software`'s packages on them
//! (`foothold-agent install-software`) — reaching the hosts over SSH with the key the Job mounts and taking
//! everything from the appliance (its agent's files, registry and apt repository), nothing from the internet.
//!
//! - `inventory`: the kubespray-style `hosts.ini` the BPA writes.
//! - `kubeadm`: the `kubeadm init` and `kubeadm join` configurations, and bootstrap tokens.
//! - `ssh`: one SSH connection to a host (russh): commands with stdin, output and exit status, timeouts, host
//!   keys pinned for the run.
//! - `software`: `packages.json` checked, and each package put on the hosts of its groups by a script that
//!   downloads it on the host (apt-helper, sha256-checked) and installs it (apt for a `.deb`, else
//!   `/usr/local/bin`), idempotently; a host drained first when a package asks for it.
//! - `rollout`: the order of a package run over the hosts (`maxUnavailable` at a time, stopped at the first
//!   failure) and its per-host report.
//!
//! - `release`: the Kubernetes release `install-cluster` installs (`kubernetes-release.json`), checked.
//! - `host`: the scripts `install-cluster` runs on a host, one per step, each idempotent.
//! - `cluster`: `install-cluster`'s steps over every host (prepare, kubeadm init and join, kube-proxy, the pod
//!   network, every node Ready), and the kubeconfig Secret.
//! - `api`: calls to the new cluster's API, made again while its server restarts.
//! - `dns`: CoreDNS's Corefile without an upstream on hosts with no resolver (an offline site's).
//! - `cli`: both commands' arguments (from the Jobs' environment) and what they print.
//!
//! The appliance serves what `install-cluster` takes (`foothold-build`'s `workload` phase): kubeadm's
//! control-plane images under their upstream names, the node binaries and `kubernetes-release.json` under
//! `/files/foothold/kubernetes-<version>/binary_images/`. Not built yet (issue 24): an installer image (the agent
//! binary in an image, served by the appliance's own registry) as the Jobs' default, with the release file and
//! the site CA handed to the Job.

pub mod api;
pub mod cli;
pub mod cluster;
pub mod dns;
pub mod host;
pub mod inventory;
pub mod kubeadm;
pub mod release;
pub mod remove;
pub mod rollout;
pub mod software;
pub mod ssh;
pub mod step;
