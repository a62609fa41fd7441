//! `install-cluster`: the hosts of a `Provisioning`'s inventory made into a Kubernetes cluster with kubeadm, over
//! SSH, from the appliance alone (the release's binaries from the agent's files, the images through its mirror).
//!
//! The steps, each a script of `host` (idempotent, so a re-run over a half-installed cluster converges):
//! 1. `prepare` every host at once: binaries, kernel settings, containerd for kubelet, kubelet's unit;
//! 2. `kubeadm init` on the control-plane host, then `remove`: every node of the cluster the inventory no longer
//!    lists drained, reset and deleted (`remove`);
//! 3. `kubeadm join` on every other host at once, trusting the cluster CA by its hash;
//! 4. `cluster DNS`: CoreDNS without an upstream when a host has no resolver (`dns`);
//! 5. `kube-proxy` on every host, with a kubeconfig the control-plane host makes;
//! 6. `pod network`: once the controller manager has given every node its pod range, the bridge plugin on each
//!    node and routes to the others' ranges;
//! 7. every node `Ready`: the caller writes the admin kubeconfig into the Secret.
//!
//! After `kubeadm init` the installer reads the admin kubeconfig and watches the nodes through the new
//! cluster's API from where it runs, not with kubectl on the control-plane host: that host is the busiest of a
//! cluster coming up, and each kubectl there is a Go program's start and a TLS handshake on it.
//!
//! A failure ends the run and names the host, the step and the output's tail. One control-plane host: a
//! second would need kubeadm's certificate upload, which is not built.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use k8s_openapi::api::core::v1::Node as KubeNode;
use russh::keys::PrivateKey;

use crate::installer::api::retrying;
use crate::installer::dns;
use crate::installer::host::{self, ADMIN_CONF, CA_CERT, DONE};
use crate::installer::inventory::{Host, Inventory};
use crate::installer::kubeadm;
use crate::installer::release::Release;
use crate::installer::remove;
use crate::installer::ssh::{Connection, KnownHosts, Target};
pub use crate::installer::step::Failure;
use crate::installer::step::{Node, CONNECT, KUBEADM, NODES};

/// What the BPA's Job gives the installer beyond the inventory.
pub struct Params<'a> {
    /// `CLUSTER_NAME`.
    pub cluster: &'a str,
    /// `POD_SUBNET`, else kubeadm's default.
    pub pod_subnet: &'a str,
    pub release: &'a Release,
    /// How long a leaving host's drain may wait for its pods to go (`DRAIN_TIMEOUT_SECONDS`).
    pub drain_timeout: Duration,
    /// The read token hosts pull from the agent with, where reads need one (`READ_TOKEN_FILE`).
    pub read_token: Option<&'a str>,
}

fn refuse(reason: String) -> Failure {
    Failure {
        host: "inventory".into(),
        step: "plan",
        reason,
        lasting: true,
    }
}

/// A Kubernetes object name (RFC 1123 label): what node names and the cluster name must be.
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `a.b.c.d/n` with room for `nodes` /24 pod ranges (the controller manager's default node mask).
fn pod_subnet_fits(subnet: &str, nodes: usize) -> Result<(), String> {
    let (ip, len) = subnet
        .split_once('/')
        .ok_or_else(|| format!("POD_SUBNET {subnet:?}: not an IPv4 CIDR like 10.244.0.0/16"))?;
    let (Ok(ip), Ok(len)) = (ip.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
        return Err(format!(
            "POD_SUBNET {subnet:?}: not an IPv4 CIDR like 10.244.0.0/16"
        ));
    };
    if len > 23 || (u32::from(ip) & (u32::MAX >> len)) != 0 {
        return Err(format!(
            "POD_SUBNET {subnet:?}: must be a network of prefix /23 or shorter (each node gets a /24)"
        ));
    }
    if (1usize << (24 - len)) < nodes {
        return Err(format!(
            "POD_SUBNET {subnet:?}: {} /24 ranges for {nodes} nodes",
            1usize << (24 - len)
        ));
    }
    Ok(())
}

/// Checks what the inventory and parameters put into kubeadm's configuration and the hosts' scripts.
pub fn check(inv: &Inventory, p: &Params) -> Result<(), Failure> {
    if !dns_label(p.cluster) {
        return Err(refuse(format!(
            "CLUSTER_NAME {:?}: not a DNS label (lowercase letters, digits, '-')",
            p.cluster
        )));
    }
    if inv.control_plane.len() != 1 {
        return Err(refuse(format!(
            "{} control-plane hosts ({}): the installer makes clusters of one control-plane host",
            inv.control_plane.len(),
            inv.control_plane.join(", ")
        )));
    }
    for h in inv.members() {
        if !dns_label(&h.name) {
            return Err(refuse(format!(
                "host {:?}: not usable as a Kubernetes node name (lowercase letters, digits, '-')",
                h.name
            )));
        }
        if h.ip.parse::<Ipv4Addr>().is_err() {
            return Err(refuse(format!(
                "host {}: ip {:?}: not an IPv4 address (the pod network is IPv4)",
                h.name, h.ip
            )));
        }
    }
    pod_subnet_fits(p.pod_subnet, inv.members().len()).map_err(refuse)
}

/// Downloading a release's binaries (some 300 MB) and setting a host up.
const PREPARE: Duration = Duration::from_secs(30 * 60);
const SHORT: Duration = Duration::from_secs(5 * 60);
/// Between two looks at the nodes: a list the API server answers from its cache, over a kept connection.
const NODES_POLL: Duration = Duration::from_secs(3);
/// One request to the new cluster's API: its server may be restarting (kubelet restarts it when a slow host
/// answers its probes late), and a request that hangs is tried again.
const API_REQUEST: Duration = Duration::from_secs(20);

/// Every result of joining `futures`, or the first failure among them.
async fn all<T>(
    futures: impl IntoIterator<Item = impl std::future::Future<Output = Result<T, Failure>>>,
) -> Result<Vec<T>, Failure> {
    join_all(futures).await.into_iter().collect()
}

/// The new cluster's admin kubeconfig, read from the control-plane host, and a client of its API.
async fn cluster_api(cp: &Node<'_>) -> Result<(String, kube::Client), Failure> {
    const STEP: &str = "read the admin kubeconfig";
    let out = cp
        .capture(STEP, &format!("cat {ADMIN_CONF}\n"), SHORT)
        .await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The installer tries again by itself (`retrying`, the drain's rounds), so the client does not.
    let client = crate::controllers::common::workload::client(&text, API_REQUEST)
        .await
        .map_err(|e| cp.fail(STEP, format!("{ADMIN_CONF}: {e}")))?;
    Ok((text, client))
}

/// The `Ready` condition's status of a node, if it has one.
fn ready(n: &KubeNode) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The pod range the controller manager gave a node, if any yet.
fn pod_range(n: &KubeNode) -> Option<String> {
    n.spec.as_ref()?.pod_cidr.clone()
}

/// Lists the cluster's nodes (name and `field` of each) until `done` holds for every host of the inventory, or
/// `NODES` passes.
async fn wait_nodes(
    api: &kube::Client,
    cp: &Node<'_>,
    inv: &Inventory,
    step: &'static str,
    field: fn(&KubeNode) -> Option<String>,
    done: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, Failure> {
    let deadline = Instant::now() + NODES;
    let nodes: kube::Api<KubeNode> = kube::Api::all(api.clone());
    let all_of_them = kube::api::ListParams::default();
    loop {
        let said = retrying(step, deadline, || nodes.list(&all_of_them))
            .await
            .map_err(|e| cp.fail(step, format!("the cluster's API: {e}")))?;
        let seen: Vec<(String, String)> = said
            .items
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, field(n).unwrap_or_default())))
            .collect();
        let missing: Vec<&str> = inv
            .members()
            .iter()
            .map(|h| h.name.as_str())
            .filter(|n| !seen.iter().any(|(s, v)| s == n && done(v)))
            .collect();
        if missing.is_empty() {
            return Ok(seen);
        }
        if Instant::now() >= deadline {
            let said: Vec<String> = seen.iter().map(|(n, v)| format!("{n} {v}")).collect();
            return Err(cp.fail(
                step,
                format!(
                    "within {NODES:?}, not yet for {} (the cluster said: {})",
                    missing.join(", "),
                    said.join("; ")
                ),
            ));
        }
        tokio::time::sleep(NODES_POLL).await;
    }
}

/// Installs the cluster and returns its admin kubeconfig. `say` hears one line per host and step done.
pub async fn install(
    inv: &Inventory,
    p: &Params<'_>,
    key: Arc<PrivateKey>,
    default_user: &str,
    known: &KnownHosts,
    say: &(dyn Fn(String) + Sync),
) -> Result<String, Failure> {
    check(inv, p)?;
    let members = inv.members();
    let nodes = all(members.iter().map(|h| {
        let key = key.clone();
        async move {
            let target = Target::of(h, default_user);
            let conn = Connection::open(&target, key, known, CONNECT)
                .await
                .map_err(|e| Failure {
                    host: target.label(),
                    step: "connect",
                    reason: e.to_string(),
                    lasting: e.lasting(),
                })?;
            Ok(Node {
                host: h,
                conn,
                target,
            })
        }
    }))
    .await?;
    let reach = remove::Reach {
        key: &key,
        known,
        user: default_user,
    };
    let result = converge(inv, p, &nodes, &reach, say).await;
    for n in nodes {
        n.conn.close().await;
    }
    result
}

async fn converge(
    inv: &Inventory,
    p: &Params<'_>,
    nodes: &[Node<'_>],
    reach: &remove::Reach<'_>,
    say: &(dyn Fn(String) + Sync),
) -> Result<String, Failure> {
    let report = |n: &Node, step: &str, done: &str| say(format!("{} {step}: {done}", n.host.name));
    let prepare = host::prepare(p.release, p.read_token);
    all(nodes.iter().map(|n| async {
        let done = n.step("prepare", &prepare, PREPARE).await?;
        report(n, "prepare", &done);
        Ok(())
    }))
    .await?;

    let cp = &nodes[0];
    let first = inv.first_control_plane();
    let token = kubeadm::token();
    let cluster = kubeadm::Cluster {
        name: p.cluster,
        version: &p.release.version,
        endpoint: &first.ip,
        pod_subnet: p.pod_subnet,
        token: &token,
        images: &p.release.images,
    };
    fn node(h: &Host) -> kubeadm::Node<'_> {
        kubeadm::Node {
            name: &h.name,
            ip: &h.ip,
        }
    }
    let init = kubeadm::init(&cluster, &node(first));
    let done = cp
        .step(
            "kubeadm init",
            &host::init(p.cluster, &init, &p.release.images),
            KUBEADM,
        )
        .await?;
    report(cp, "kubeadm init", &done);
    let (admin, api) = cluster_api(cp).await?;
    remove::departed_hosts(inv, (p.cluster, p.drain_timeout), &api, cp, reach, say).await?;

    // The token the joins use: made anew by each run (the one in a first run's init configuration may have
    // expired by a later run's), with the CA's hash read from the control-plane host.
    let joining = &nodes[1..];
    if !joining.is_empty() {
        // Tried for up to 5 minutes: the API server may be restarting just after init.
        cp.step(
            "bootstrap token",
            &format!(
                "set -u\nfor i in $(seq 30); do\n  \
                 kubeadm token delete '{token}' --kubeconfig={ADMIN_CONF} >/dev/null 2>&1\n  \
                 if kubeadm token create '{token}' --ttl 2h0m0s --kubeconfig={ADMIN_CONF} >/dev/null; then\n    \
                 echo '{DONE} token'; exit 0\n  fi\n  sleep 10\ndone\nexit 1\n"
            ),
            KUBEADM,
        )
        .await?;
        let ca = cp
            .capture("read the cluster CA", &format!("cat {CA_CERT}\n"), SHORT)
            .await?;
        let hash = kubeadm::ca_cert_hash(&String::from_utf8_lossy(&ca.stdout))
            .map_err(|e| cp.fail("read the cluster CA", format!("{CA_CERT}: {e}")))?;
        all(joining.iter().map(|n| {
            let config = kubeadm::join(&cluster, &node(n.host), &hash, false);
            async move {
                let done = n
                    .step(
                        "kubeadm join",
                        &host::join(p.cluster, &config, &p.release.images),
                        KUBEADM,
                    )
                    .await?;
                report(n, "kubeadm join", &done);
                Ok(())
            }
        }))
        .await?;
    }

    cluster_dns(cp, nodes, &api, &report).await?;

    let conf = cp
        .capture(
            "kube-proxy kubeconfig",
            &host::kube_proxy_kubeconfig(),
            SHORT,
        )
        .await?;
    let conf = String::from_utf8_lossy(&conf.stdout).into_owned();
    all(nodes.iter().map(|n| {
        let script = host::kube_proxy(&n.host.name, p.pod_subnet, &conf);
        async move {
            let done = n.step("kube-proxy", &script, SHORT).await?;
            report(n, "kube-proxy", &done);
            Ok(())
        }
    }))
    .await?;

    let ranges = wait_nodes(&api, cp, inv, "pod ranges", pod_range, |v| !v.is_empty()).await?;
    remove::label_members(inv, p.cluster, &api, cp).await?;
    let range_of = |n: &Node| {
        ranges
            .iter()
            .find(|(name, _)| *name == n.host.name)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    for (name, range) in &ranges {
        if !pod_range_ok(range) {
            return Err(cp.fail(
                "pod ranges",
                format!("node {name} has pod range {range:?}, not an IPv4 CIDR"),
            ));
        }
    }
    all(nodes.iter().map(|n| {
        let routes: Vec<(String, String)> = nodes
            .iter()
            .filter(|o| o.host.name != n.host.name)
            .map(|o| (range_of(o), o.host.ip.clone()))
            .collect();
        let script = host::network(&range_of(n), &routes);
        async move {
            let done = n.step("pod network", &script, SHORT).await?;
            report(n, "pod network", &done);
            Ok(())
        }
    }))
    .await?;

    wait_nodes(&api, cp, inv, "nodes Ready", ready, |v| v == "True").await?;
    for n in nodes {
        report(n, "node", "Ready");
    }
    Ok(admin)
}

/// Step `cluster DNS` (`dns`): CoreDNS without an upstream when a host has no resolver for it to forward to.
async fn cluster_dns(
    cp: &Node<'_>,
    nodes: &[Node<'_>],
    api: &kube::Client,
    report: &(dyn Fn(&Node, &str, &str) + Sync),
) -> Result<(), Failure> {
    const STEP: &str = "cluster DNS";
    let script = dns::resolvers_script();
    let counts = all(nodes.iter().map(|n| {
        let script = &script;
        async move {
            let said = n.step(STEP, script, SHORT).await?;
            let (count, file) = dns::parse_resolvers(&said).map_err(|e| n.fail(STEP, e))?;
            Ok((n.host.name.as_str(), count, file))
        }
    }))
    .await?;
    let without: Vec<String> = counts
        .iter()
        .filter(|(_, count, _)| *count == 0)
        .map(|(name, _, file)| format!("{name} ({file})"))
        .collect();
    if without.is_empty() {
        report(
            cp,
            STEP,
            "CoreDNS forwards other names to the hosts' resolvers",
        );
        return Ok(());
    }
    let changed = dns::answer_cluster_names_only(api)
        .await
        .map_err(|e| cp.fail(STEP, e))?;
    let what = if changed { "" } else { " (already)" };
    report(
        cp,
        STEP,
        &format!(
            "CoreDNS answers the cluster's names only{what}: no resolver on {}",
            without.join(", ")
        ),
    );
    Ok(())
}

/// What the controller manager gives a node: `a.b.c.d/n`.
fn pod_range_ok(r: &str) -> bool {
    r.split_once('/').is_some_and(|(ip, len)| {
        ip.parse::<Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32)
    })
}

/// Writes `kubeconfig` into the Secret `name` of `namespace` (key `kubeconfig`, as the BPA reads it), creating
/// or updating it by server-side apply: what the installer's account may do to that one Secret.
pub async fn publish(
    client: kube::Client,
    namespace: &str,
    name: &str,
    kubeconfig: &str,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": {"kubeconfig": kubeconfig},
    });
    Api::<Secret>::namespaced(client, namespace)
        .patch(
            name,
            &PatchParams::apply("foothold-installer").force(),
            &Patch::Apply(secret),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::ssh::Output;
    use crate::installer::step::preflight_failed;

    #[test]
    fn a_nodes_pod_range_and_readiness_are_read_from_the_api_object() {
        let node: KubeNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "worker-0"},
            "spec": {"podCIDR": "10.244.1.0/24"},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"}
            ]}
        }))
        .unwrap();
        assert_eq!(pod_range(&node).as_deref(), Some("10.244.1.0/24"));
        assert_eq!(ready(&node).as_deref(), Some("True"));
        // Just registered: no range yet, no conditions yet.
        let fresh: KubeNode =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "worker-0"}})).unwrap();
        assert_eq!(pod_range(&fresh), None);
        assert_eq!(ready(&fresh), None);
    }

    fn release() -> Release {
        let text = crate::installer::release::sample("http://10.0.0.1:5000/files").to_string();
        Release::parse(&text).unwrap()
    }

    fn inventory(extra: &str) -> Inventory {
        Inventory::parse(&format!(
            "[all]\nmaster-0 ansible_host=10.0.0.5\nworker-0 ansible_host=10.0.0.6{extra}\n\
             [kube_control_plane]\nmaster-0\n[kube_node]\nworker-0\n"
        ))
        .unwrap()
    }

    #[test]
    fn what_kubeadm_cannot_take_is_refused_before_any_host_is_touched() {
        let r = release();
        let p = |cluster, pod_subnet| Params {
            cluster,
            pod_subnet,
            release: &r,
            drain_timeout: Duration::from_secs(600),
            read_token: None,
        };
        let inv = inventory("");
        assert_eq!(check(&inv, &p("c1", "10.244.0.0/16")), Ok(()));
        let why = |inv: &Inventory, cluster, subnet| {
            check(inv, &p(cluster, subnet)).unwrap_err().to_string()
        };
        assert_eq!(
            why(&inv, "C_1", "10.244.0.0/16"),
            "inventory: plan: CLUSTER_NAME \"C_1\": not a DNS label (lowercase letters, digits, '-')"
        );
        assert_eq!(
            why(&inv, "c1", "10.244.0.0/24"),
            "inventory: plan: POD_SUBNET \"10.244.0.0/24\": must be a network of prefix /23 or shorter (each node gets a /24)"
        );
        assert_eq!(
            why(&inv, "c1", "10.244.1.0/16"),
            "inventory: plan: POD_SUBNET \"10.244.1.0/16\": must be a network of prefix /23 or shorter (each node gets a /24)"
        );
        assert!(why(&inv, "c1", "fd00::/64").contains("not an IPv4 CIDR"));
        let inv = Inventory::parse(
            "[all]\nm0 ansible_host=10.0.0.5\nm1 ansible_host=10.0.0.6\n[kube_control_plane]\nm0\nm1\n[kube_node]\nm1\n",
        )
        .unwrap();
        assert_eq!(
            why(&inv, "c1", "10.244.0.0/16"),
            "inventory: plan: 2 control-plane hosts (m0, m1): the installer makes clusters of one control-plane host"
        );
        let inv = Inventory::parse(
            "[all]\nm.0 ansible_host=10.0.0.5\n[kube_control_plane]\nm.0\n[kube_node]\nm.0\n",
        )
        .unwrap();
        assert!(why(&inv, "c1", "10.244.0.0/16").contains("host \"m.0\": not usable"));
    }

    #[test]
    fn a_plan_refused_and_kubeadm_preflight_on_the_host_are_lasting_failures() {
        let r = release();
        let p = Params {
            cluster: "C_1",
            pod_subnet: "10.244.0.0/16",
            release: &r,
            drain_timeout: Duration::from_secs(600),
            read_token: None,
        };
        assert!(check(&inventory(""), &p).unwrap_err().lasting);
        let failed = |stderr: &str| Output {
            status: Some(1),
            stderr: stderr.as_bytes().to_vec(),
            ..Output::default()
        };
        // In the shape kubeadm v1.35.4 printed on this machine (its container-runtime case was run here; the
        // port's line is the one the appliance test's third BPA generation gets back).
        let port = "[preflight] Running pre-flight checks\n[preflight] Some fatal errors occurred:\n\
                    \t[ERROR Port-6443]: Port 6443 is in use\n[preflight] If you know what you are doing, you \
                    can make a check non-fatal with `--ignore-preflight-errors=...`\n\
                    error: error execution phase preflight: preflight checks failed\n\
                    To see the stack trace of this error execute with --v=5 or higher\n";
        assert!(preflight_failed(&failed(port)));
        let runtime = "[preflight] Some fatal errors occurred:\n\t[ERROR CRI]: could not connect to the \
                       container runtime: …\n\t[ERROR FileContent--proc-sys-net-ipv4-ip_forward]: …\n\
                       error: error execution phase preflight: preflight checks failed\n";
        assert!(!preflight_failed(&failed(runtime)));
        let waiting = "error: error execution phase wait-control-plane: failed while waiting for the control \
                       plane to start: kube-apiserver check failed at https://10.0.2.50:6443/livez\n";
        assert!(!preflight_failed(&failed(waiting)));
    }

    #[test]
    fn three_nodes_need_two_ranges_of_room() {
        assert_eq!(pod_subnet_fits("10.244.0.0/23", 2), Ok(()));
        assert_eq!(
            pod_subnet_fits("10.244.0.0/23", 3).unwrap_err(),
            "POD_SUBNET \"10.244.0.0/23\": 2 /24 ranges for 3 nodes"
        );
        assert!(pod_range_ok("10.244.1.0/24"));
        assert!(!pod_range_ok("10.244.1.0"));
        assert!(!pod_range_ok("<none>/24"));
    }
}
