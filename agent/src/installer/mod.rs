//! Foothold's installer: what the BPA's installer Jobs run to turn the provisioned hosts of a `Provisioning`
//! into a Kubernetes cluster (`install-cluster`, not built yet) and to install a `Software`'s packages on them
//! (`foothold-agent install-software`) — reaching the hosts over SSH with the key the Job mounts and taking
//! everything from the appliance (its agent's files, registry and apt repository), nothing from the internet.
//!
//! - `inventory`: the kubespray-style `hosts.ini` the BPA writes.
//! - `kubeadm`: the `kubeadm init` and `kubeadm join` configurations, and bootstrap tokens.
//! - `ssh`: one SSH connection to a host (russh): commands with stdin, output and exit status, timeouts, host
//!   keys pinned for the run.
//! - `software`: `packages.json` checked, and each package put on the hosts of its groups by a script that
//!   downloads it on the host (apt-helper, sha256-checked) and installs it (apt for a `.deb`, else
//!   `/usr/local/bin`), idempotently.
//!
//! Still to build for `install-cluster` (issue 24), in the same shape — a pure plan of idempotent steps per
//! host, each a script run over SSH, each skipped when its result is there:
//! 1. the Kubernetes binaries (kubeadm, kubelet, kubectl, the release the appliance runs) and CNI plugins from
//!    the agent's `/files`, sha256-checked, into `/usr/local/bin` and `/opt/cni/bin`; a kubelet unit;
//! 2. `kubeadm init` on the first control-plane host with a rendered configuration (the images by their
//!    upstream names, which containerd pulls through the agent's mirror; `POD_SUBNET`; the advertise address
//!    from the inventory's `ip`), then `kubeadm join` on the others with a bootstrap token;
//! 3. pod networking without another image: the bridge CNI plugin with each node's pod CIDR and routes between
//!    the nodes, set over SSH;
//! 4. the admin kubeconfig read back and written into `KUBECONFIG_SECRET` with the Job's service account.
//!
//! The appliance does not yet serve what that needs: container images of kube-apiserver,
//! kube-controller-manager, kube-scheduler, kube-proxy and etcd under their upstream names (the builder makes
//! only pause and CoreDNS today), and the binaries under `/files`. Nor does it build an installer image (the
//! agent binary in an image, served by its own registry) to be the Jobs' default.

pub mod inventory;
pub mod kubeadm;
pub mod software;
pub mod ssh;
