//! The BPA on the hosts `metal3_provisioning.rs` had inspected and installed: it matches and checks them by
//! what inspection found (`status.hardware`), with no annotation written by anyone.

use std::time::{Duration, Instant};

use foothold_e2e::native_site::{wait_for, Site};

use super::nodes::Node;
/// The Provisioning `c1` of the BPA (the agent's reconciler on this appliance): the first node its master, the
/// second its worker, by their MACs, with hardware requirements the BPA checks against `status.hardware`.
fn provisioning(nodes: &[Node], worker_cpus: u64) -> String {
    serde_json::json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": "c1", "namespace": "default", "labels": {"cluster": "c1", "owner": "foothold"}},
        "spec": {
            "masters": [{"master-0": {"mac-address": nodes[0].mac, "cpu": nodes[0].vcpus, "memory": "2Gi"}}],
            "workers": [{"worker-0": {"mac-address": nodes[1].mac, "cpu": worker_cpus}}],
        },
    })
    .to_string()
}

/// The BPA on what inspection found, no annotation written: a worker that asks for more CPUs than its host's
/// inspection counted is refused, naming the host and both counts; asking for what it has, both hosts are
/// matched with the addresses inspection recorded (the ones the installed nodes answer SSH at, `addresses`),
/// its inventory lists them, and the installer Job is made (it does not run here: the appliance's root runs
/// natively, with no kubelet). The Provisioning is deleted again, and what it made with it.
pub(super) fn matches_the_inspected_hosts(site: &Site, nodes: &[Node], addresses: &[String]) {
    let field = |path: &str| {
        site.kubectl(&[
            "get",
            "provisioning",
            "c1",
            "-o",
            &format!("jsonpath={path}"),
        ])
        .unwrap_or_default()
    };
    let matched = "{.status.conditions[?(@.type==\"HostsMatched\")]";
    let state = |generation: &str| {
        let now = format!(
            "generation {} observed {}, HostsMatched {} {}: {}; phase {}",
            field("{.metadata.generation}"),
            field("{.status.observedGeneration}"),
            field(&format!("{matched}.status}}")),
            field(&format!("{matched}.reason}}")),
            field(&format!("{matched}.message}}")),
            field("{.status.phase}")
        );
        let settled = field("{.status.observedGeneration}") == generation
            && !field(&format!("{matched}.reason}}")).is_empty();
        (now.clone(), settled.then_some(now))
    };
    let started = Instant::now();
    site.kubectl_apply(&provisioning(nodes, nodes[1].vcpus + 1));
    wait_for(
        "the BPA's answer to generation 1",
        Duration::from_secs(120),
        || state("1"),
    );
    let message = field(&format!("{matched}.message}}"));
    let unfit = format!(
        "worker-0: BareMetalHost {} is unfit: {} CPUs, {} required",
        nodes[1].name,
        nodes[1].vcpus,
        nodes[1].vcpus + 1
    );
    assert_eq!(
        field(&format!("{matched}.reason}}")),
        "UnfitHost",
        "{message}"
    );
    assert!(message.contains(&unfit), "{message}");
    assert_eq!(field("{.status.phase}"), "Pending");

    site.kubectl_apply(&provisioning(nodes, nodes[1].vcpus));
    wait_for(
        "the BPA's answer to generation 2",
        Duration::from_secs(120),
        || state("2"),
    );
    let status: serde_json::Value = serde_json::from_str(
        &site
            .kubectl(&["get", "provisioning", "c1", "-o", "jsonpath={.status}"])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(field(&format!("{matched}.status}}")), "True", "{status:#}");
    assert_eq!(status["phase"], "Installing", "{status:#}");
    for (n, address) in nodes.iter().zip(addresses) {
        let host = status["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|h| h["bareMetalHost"] == n.name)
            .unwrap_or_else(|| panic!("{} not among the matched hosts: {status:#}", n.name));
        assert_eq!(host["ip"], address.as_str(), "{}: {host}", n.name);
    }
    let inventory = site
        .kubectl(&[
            "get",
            "configmap",
            status["inventoryConfigMap"].as_str().unwrap(),
            "-o",
            "jsonpath={.data.hosts\\.ini}",
        ])
        .unwrap();
    for (label, address) in ["master-0", "worker-0"].iter().zip(addresses) {
        let line = format!("{label} ansible_host={address} ip={address}");
        assert!(
            inventory.lines().any(|l| l == line),
            "{line} not in\n{inventory}"
        );
    }
    let job = status["jobName"].as_str().unwrap();
    site.kubectl(&["get", "job", job, "-o", "name"])
        .unwrap_or_else(|e| panic!("the installer Job {job}: {e}"));
    eprintln!(
        "metal3_provisioning: the BPA refused the unfit worker and matched both hosts in {} s",
        started.elapsed().as_secs()
    );
    // Its finalizer removes what it made.
    site.kubectl(&["delete", "provisioning", "c1", "--timeout=120s"])
        .unwrap_or_else(|e| panic!("deleting the Provisioning: {e}"));
    wait_for("the installer Job gone", Duration::from_secs(120), || {
        let left = site.kubectl(&["get", "job", job, "-o", "name"]);
        (format!("{left:?}"), left.is_err().then_some(()))
    });
}
