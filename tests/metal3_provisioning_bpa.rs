//! The BPA on the hosts `metal3_provisioning.rs` had inspected and installed: it matches and checks them by
//! what inspection found (`status.hardware`), with no annotation written by anyone.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;

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

/// The Provisioning `c1`'s `path` (a jsonpath), empty while it cannot be read.
fn field(site: &Site, path: &str) -> String {
    site.kubectl(&[
        "get",
        "provisioning",
        "c1",
        "-o",
        &format!("jsonpath={path}"),
    ])
    .unwrap_or_default()
}

/// The BPA on what inspection found, no annotation written: a worker that asks for more CPUs than its host's
/// inspection counted is refused, naming the host and both counts; asking for what it has, both hosts are
/// matched with the addresses inspection recorded (the ones the installed nodes answer SSH at, `addresses`),
/// its inventory lists them, and the installer Job is made; its name is returned.
pub(super) fn matches_the_inspected_hosts(
    site: &Site,
    nodes: &[Node],
    addresses: &[String],
) -> String {
    let field = |path: &str| field(site, path);
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
    job.to_owned()
}

/// The installer Job's limit: both disk-installed hosts prepared, kubeadm init and join, the pod network, under
/// TCG (the appliance's units run natively here).
const INSTALL_LIMIT: Duration = Duration::from_secs(1500);

/// The installer Job `job` the BPA made runs on the appliance's own node (its kubelet and containerd, the
/// installer image from its agent's registry), with the installer's SSH key from the Secret ICN's BPA names
/// (`key`, the one the hosts' user data authorises), holding them to the site SSH CA whose host certificates
/// their user data gave them: the Provisioning goes `Ready`, the installer's log says
/// each host was prepared and the cluster initialised and joined, and the kubeconfig Secret it wrote names the
/// master's inspected address. Returns that kubeconfig.
pub(super) fn installs_the_cluster(
    site: &Site,
    job: &str,
    key: &Path,
    addresses: &[String],
) -> String {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ssh-key-secret", "namespace": "default"},
        "stringData": {"id_rsa": std::fs::read_to_string(key).unwrap()},
    });
    site.kubectl_apply(&secret.to_string());
    let started = Instant::now();
    let field = |path: &str| field(site, path);
    let logs = || {
        site.kubectl(&["logs", &format!("job/{job}"), "--tail=200"])
            .unwrap_or_else(|e| e)
    };
    let phase = wait_for("the installer Job", INSTALL_LIMIT, || {
        let phase = field("{.status.phase}");
        let pods = site
            .kubectl(&[
                "get",
                "pods",
                "-l",
                &format!("job-name={job}"),
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.phase}; {end}",
            ])
            .unwrap_or_else(|e| e);
        let last = logs().lines().last().unwrap_or_default().to_owned();
        let done = ["Ready", "Failed"].contains(&phase.as_str());
        (
            format!("{phase}; pods {pods}; {last}"),
            done.then_some(phase),
        )
    });
    let logs = logs();
    assert_eq!(phase, "Ready", "{}\n{logs}", field("{.status.conditions}"));
    eprintln!(
        "metal3_provisioning: the BPA's cluster on both disk-installed hosts Ready in {} s",
        started.elapsed().as_secs()
    );
    for host in ["master-0", "worker-0"] {
        let prepared = format!("{host} prepare: prepared for Kubernetes v1.35.4");
        assert!(logs.contains(&prepared), "{prepared:?} in {logs}");
    }
    // Held to the site SSH CA: the Job has its public key, and the installer took no host key on first use
    // (each node showed the certificate of its user data).
    let ca = site
        .kubectl(&[
            "get",
            "job",
            job,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"SSH_HOST_CA\")].value}",
        ])
        .unwrap_or_default();
    let site_ca = std::fs::read_to_string(site.root.join("etc/foothold/ssh-ca/ca.pub")).unwrap();
    assert_eq!(ca.trim(), site_ca.trim(), "the Job's SSH_HOST_CA");
    assert!(
        logs.contains("hosts must show a host certificate from the site SSH CA")
            && !logs.contains("no SSH_HOST_CA"),
        "{logs}"
    );
    for line in [
        "master-0 kubeadm init: initialised\n",
        "worker-0 kubeadm join: joined\n",
        "kubeconfig written to Secret default/c1-kubeconfig\n",
    ] {
        assert!(logs.contains(line), "{line:?} in {logs}");
    }
    let conf = site
        .kubectl(&[
            "get",
            "secret",
            "c1-kubeconfig",
            "-o",
            "jsonpath={.data.kubeconfig}",
        ])
        .unwrap_or_else(|e| panic!("the kubeconfig Secret: {e}"));
    let conf = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(conf.trim())
            .expect("the kubeconfig Secret's data is base64"),
    )
    .expect("the kubeconfig is text");
    assert!(
        conf.contains(&format!("server: https://{}:6443", addresses[0])),
        "{conf}"
    );
    conf
}

/// The workload cluster's nodes and their Ready conditions (`master-0=True worker-0=True`), asked on the master
/// with the kubeconfig the BPA's installer wrote (`node` runs a command there); an error while it does not answer.
pub(super) fn workload_nodes(
    node: &dyn Fn(&str) -> Result<String, String>,
    conf: &str,
) -> Result<String, String> {
    let conf = base64::engine::general_purpose::STANDARD.encode(conf);
    node(&format!(
        "echo {conf} | base64 -d > c1.kubeconfig && kubectl --request-timeout=20s --kubeconfig c1.kubeconfig get nodes \
         -o jsonpath='{{range .items[*]}}{{.metadata.name}}={{.status.conditions[?(@.type==\"Ready\")].status}} {{end}}'"
    ))
    .map(|s| s.trim().to_owned())
}

/// Deletes the Provisioning: its finalizer removes what it made, the installer Job `job` among it.
pub(super) fn deleted(site: &Site, job: &str) {
    site.kubectl(&["delete", "provisioning", "c1", "--timeout=120s"])
        .unwrap_or_else(|e| panic!("deleting the Provisioning: {e}"));
    wait_for("the installer Job gone", Duration::from_secs(120), || {
        let left = site.kubectl(&["get", "job", job, "-o", "name"]);
        (format!("{left:?}"), left.is_err().then_some(()))
    });
}
