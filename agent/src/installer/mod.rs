//! Foothold's installer: what the BPA's installer Job runs (`foothold-agent install-cluster`) to turn the
//! provisioned hosts of a `Provisioning` into a Kubernetes cluster, and (`install-software`) to install a
//! `Software`'s packages on them — reaching the hosts over SSH with the key the Job mounts, taking everything
//! from the appliance (its agent's files, registry and apt repository), nothing from the internet.
//!
//! Built so far: the inventory the BPA writes (`inventory`) and the SSH transport (`ssh`). The kubeadm steps,
//! the Software steps and the kubeconfig Secret are still to come (issue 24).

pub mod inventory;
pub mod software;
pub mod ssh;
