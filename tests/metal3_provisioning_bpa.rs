//! The BPA on the hosts `metal3_provisioning.rs` had inspected and installed: it matches and checks them by
//! what inspection found (`status.hardware`), with no annotation written by anyone, makes a cluster of the
//! master, adds the worker to it once that is installed too, and installs a `Software` on both.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;

use foothold_e2e::native_site::{wait_for, Site};
use foothold_e2e::netns::Namespace;
use foothold_e2e::try_run;

use super::nodes::Node;
/// The Provisioning `c1` of the BPA (the agent's reconciler on this appliance): the first node its master, asked
/// for `master_cpus`, and the second, when `worker` is given, its worker, by their MACs, with hardware
/// requirements the BPA checks against `status.hardware`. The master's `memory` requirement (its host has 3 GiB)
/// follows `generation`, only to make each a new generation.
pub(super) fn provisioning(
    master: &Node,
    master_cpus: u64,
    worker: Option<&Node>,
    generation: u32,
) -> String {
    let workers: Vec<serde_json::Value> = worker
        .iter()
        .map(|w| serde_json::json!({"worker-0": {"mac-address": w.mac, "cpu": w.vcpus}}))
        .collect();
    serde_json::json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": "c1", "namespace": "default", "labels": {"cluster": "c1", "owner": "foothold"}},
        "spec": {
            "masters": [{"master-0": {"mac-address": master.mac, "cpu": master_cpus,
                "memory": format!("{}Mi", 2000 + generation)}}],
            "workers": workers,
            // Off until `healing_on`: on these loaded emulated nodes a node can miss its heartbeats for
            // half a minute (seen: the worker rebooted twice, spuriously, with 30 s).
            "healing": {"enabled": false},
        },
    })
    .to_string()
}

/// The Provisioning `c1`'s `path` (a jsonpath), empty while it cannot be read.
pub(super) fn field(site: &Site, path: &str) -> String {
    site.kubectl(&[
        "get",
        "provisioning",
        "c1",
        "-o",
        &format!("jsonpath={path}"),
    ])
    .unwrap_or_default()
}

const MATCHED: &str = "{.status.conditions[?(@.type==\"HostsMatched\")]";

/// Applies `yaml` as generation `generation` of `c1` and waits for the BPA's answer to it (HostsMatched set).
pub(super) fn answer(site: &Site, yaml: &str, generation: u32) {
    let field = |path: &str| field(site, path);
    site.kubectl_apply(yaml);
    wait_for(
        &format!("the BPA's answer to generation {generation}"),
        Duration::from_secs(120),
        || {
            let now = format!(
                "generation {} observed {}, HostsMatched {} {}: {}; phase {}",
                field("{.metadata.generation}"),
                field("{.status.observedGeneration}"),
                field(&format!("{MATCHED}.status}}")),
                field(&format!("{MATCHED}.reason}}")),
                field(&format!("{MATCHED}.message}}")),
                field("{.status.phase}")
            );
            let settled = field("{.status.observedGeneration}") == generation.to_string()
                && !field(&format!("{MATCHED}.reason}}")).is_empty();
            (now.clone(), settled.then_some(now))
        },
    );
}

/// The hosts of `c1` matched, `Installing`, with the addresses inspection recorded for `hosts` (label, node,
/// address: the ones the installed nodes answer SSH at) in its status and its inventory; returns the name of
/// the installer Job it made.
fn matched(site: &Site, hosts: &[(&str, &Node, &str)]) -> String {
    let status: serde_json::Value = serde_json::from_str(
        &site
            .kubectl(&["get", "provisioning", "c1", "-o", "jsonpath={.status}"])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        field(site, &format!("{MATCHED}.status}}")),
        "True",
        "{status:#}"
    );
    assert_eq!(status["phase"], "Installing", "{status:#}");
    let inventory = site
        .kubectl(&[
            "get",
            "configmap",
            status["inventoryConfigMap"].as_str().unwrap(),
            "-o",
            "jsonpath={.data.hosts\\.ini}",
        ])
        .unwrap();
    for (label, n, address) in hosts {
        let host = status["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|h| h["bareMetalHost"] == n.name)
            .unwrap_or_else(|| panic!("{} not among the matched hosts: {status:#}", n.name));
        assert_eq!(host["ip"], *address, "{}: {host}", n.name);
        let line = format!("{label} ansible_host={address} ip={address}");
        assert!(
            inventory.lines().any(|l| l == line),
            "{line} not in\n{inventory}"
        );
    }
    let job = status["jobName"].as_str().unwrap();
    site.kubectl(&["get", "job", job, "-o", "name"])
        .unwrap_or_else(|e| panic!("the installer Job {job}: {e}"));
    job.to_owned()
}

/// The installer's SSH key, in the Secret ICN's BPA names.
pub(super) fn ssh_key(site: &Site, key: &Path) {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ssh-key-secret", "namespace": "default"},
        "stringData": {"id_rsa": std::fs::read_to_string(key).unwrap()},
    });
    site.kubectl_apply(&secret.to_string());
}

/// The BPA on what inspection found, no annotation written, for a cluster of the master alone (the worker is
/// still being installed): a master that asks for more CPUs than its host's inspection counted is refused,
/// naming the host and both counts; asking for what it has, it is matched with the address inspection
/// recorded (`address`) and its inventory lists it. Its installer Job then fails twice, each time `Failed`
/// with the installer's message naming the host and the cause, after one pod (an installer that says another
/// run cannot help fails its Job at once): with an SSH key the host does not know, and with the master's port
/// 6443 taken (`on_master` runs a command there), where `kubeadm init`'s preflight fails after the host was
/// prepared. The causes removed (`key`: the one the host's user data authorises), a new generation goes
/// `Ready` over the prepared host ([`installs_the_cluster`]); its kubeconfig is returned.
pub(super) fn makes_a_cluster_of_the_master(
    site: &Site,
    (master, address): (&Node, &str),
    (key, dir): (&Path, &Path),
    on_master: &dyn Fn(&str) -> String,
) -> String {
    let started = Instant::now();
    answer(site, &provisioning(master, master.vcpus + 1, None, 1), 1);
    let message = field(site, &format!("{MATCHED}.message}}"));
    let unfit = format!(
        "master-0: BareMetalHost {} is unfit: {} CPUs, {} required",
        master.name,
        master.vcpus,
        master.vcpus + 1
    );
    assert_eq!(
        field(site, &format!("{MATCHED}.reason}}")),
        "UnfitHost",
        "{message}"
    );
    assert!(message.contains(&unfit), "{message}");
    assert_eq!(field(site, "{.status.phase}"), "Pending");
    foothold_e2e::say!(
        "metal3_provisioning: the BPA refused the unfit master in {} s",
        started.elapsed().as_secs()
    );

    // A key the host does not know: refused before any step.
    let stranger = dir.join("stranger");
    foothold_e2e::run(
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&stranger),
    );
    ssh_key(site, &stranger);
    let hosts = [("master-0", master, address)];
    let at = |generation: u32| {
        let yaml = provisioning(master, master.vcpus, None, generation);
        answer(site, &yaml, generation);
        matched(site, &hosts)
    };
    fails(
        site,
        &at(2),
        &[
            &format!("master-0 ({address}): connect:"),
            "was refused for user foothold",
        ],
    );

    // The key put right, and the master's API server port taken: the host is prepared, then kubeadm init's
    // preflight check fails.
    ssh_key(site, key);
    on_master(
        "sudo systemd-run --quiet --unit=test-hold-6443 perl -MIO::Socket::INET -e \
         'my $s = IO::Socket::INET->new(LocalPort => 6443, Listen => 5, ReuseAddr => 1) or die $!; sleep 7200'; \
         for i in $(seq 100); do ss -Hltn 'sport = :6443' | grep -q . && exit 0; sleep 0.1; done; \
         echo 'nothing listens on 6443' >&2; exit 1",
    );
    fails(
        site,
        &at(3),
        &[
            &format!("master-0 ({address}): kubeadm init: exit status "),
            "Port 6443 is in use",
        ],
    );

    // The port freed: the cluster, over the host the last run prepared.
    on_master("sudo systemctl stop test-hold-6443");
    let conf = installs_the_cluster(
        site,
        &at(4),
        address,
        (
            &[],
            &[
                "master-0 prepare: prepared for Kubernetes v1.35.4 (unchanged)",
                "master-0 kubeadm init: initialised",
                // Foothold's nodes have no resolver (the site is offline): CoreDNS without an upstream, or it
                // would exit at every start ("no nameservers found").
                "master-0 cluster DNS: CoreDNS answers the cluster's names only: no resolver on master-0 \
                 (/etc/resolv.conf)",
            ],
        ),
    );
    // Its pods' sandbox is the pause image the appliance's build made, by digest (kubernetes-release.json).
    let sandbox = on_master("sudo grep sandbox_image /etc/containerd/config.toml");
    assert!(
        sandbox.contains("registry.k8s.io/pause:3.10.1@sha256:"),
        "the master's containerd: {sandbox}"
    );
    // And kubeadm's images: the control plane's static pods (kubeadm's patches) and CoreDNS by digest too.
    let images = on_master(
        "sudo sh -c 'cd /etc/kubernetes/manifests && grep -h \"^    image:\" etcd.yaml kube-apiserver.yaml \
         kube-controller-manager.yaml kube-scheduler.yaml' && sudo kubectl --kubeconfig /etc/kubernetes/admin.conf \
         -n kube-system get deployment coredns -o jsonpath='{.spec.template.spec.containers[*].image}'",
    );
    for image in [
        "etcd:3.6.6-0",
        "kube-apiserver:v1.35.4",
        "kube-controller-manager:v1.35.4",
        "kube-scheduler:v1.35.4",
        "coredns/coredns:v1.13.1",
    ] {
        assert!(
            images.contains(&format!("registry.k8s.io/{image}@sha256:")),
            "{image} by digest on the master: {images}"
        );
    }
    conf
}

/// The worker added to the `Ready` cluster `c1` (its generation `generation`): both hosts matched by their
/// inspected data, and a new installer Job made; its name is returned.
pub(super) fn adds_the_worker(
    site: &Site,
    nodes: &[Node],
    addresses: &[String],
    generation: u32,
) -> String {
    answer(
        site,
        &provisioning(&nodes[0], nodes[0].vcpus, Some(&nodes[1]), generation),
        generation,
    );
    matched(
        site,
        &[
            ("master-0", &nodes[0], &addresses[0]),
            ("worker-0", &nodes[1], &addresses[1]),
        ],
    )
}

/// The installer Job `job` runs to its end: the Provisioning's phase (`Ready` or `Failed`) and the Job's log.
pub(super) fn outcome(site: &Site, job: &str) -> (String, String) {
    let started = Instant::now();
    let logs = || {
        site.kubectl(&["logs", &format!("job/{job}"), "--tail=200"])
            .unwrap_or_else(|e| e)
    };
    let phase = wait_for(&format!("the installer Job {job}"), INSTALL_LIMIT, || {
        let phase = field(site, "{.status.phase}");
        let pods = pods(site, job);
        let last = logs().lines().last().unwrap_or_default().to_owned();
        let done = ["Ready", "Failed"].contains(&phase.as_str());
        (
            format!("{phase}; pods {pods}; {last}"),
            done.then_some(phase),
        )
    });
    foothold_e2e::say!(
        "metal3_provisioning: the BPA's Job {job} {phase} in {} s",
        started.elapsed().as_secs()
    );
    (phase, logs())
}

/// The pods of the Job `job`: `name phase; ` each.
fn pods(site: &Site, job: &str) -> String {
    site.kubectl(&[
        "get",
        "pods",
        "-l",
        &format!("job-name={job}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.phase}; {end}",
    ])
    .unwrap_or_else(|e| e)
}

/// The installer Job `job` fails: the Provisioning `Failed`, its Failed condition naming each of `wants` and
/// the pod failure policy, after one pod (the installer said another run cannot help).
fn fails(site: &Site, job: &str, wants: &[&str]) {
    let (phase, logs) = outcome(site, job);
    let message = field(site, "{.status.conditions[?(@.type==\"Failed\")].message}");
    assert_eq!(phase, "Failed", "{message}\n{logs}");
    for want in wants.iter().chain(&["(PodFailurePolicy: "]) {
        assert!(message.contains(want), "{want:?} in {message}\n{logs}");
    }
    let pods = pods(site, job);
    assert_eq!(pods.matches("; ").count(), 1, "{job}'s pods: {pods}");
}

/// The installer Job's limit: both disk-installed hosts prepared, kubeadm init and join, the pod network, under
/// TCG (the appliance's units run natively here). The longest seen took 951 s; CI's machine runs this test about
/// 1.5 times slower than the machines it was tuned on.
const INSTALL_LIMIT: Duration = Duration::from_secs(2400);

/// The installer Job `job` the BPA made runs on the appliance's own node (its kubelet and containerd, the
/// installer image from its agent's registry), with the installer's SSH key from the Secret ICN's BPA names
/// (`key`, the one the hosts' user data authorises), holding them to the site SSH CA whose host certificates
/// their user data gave them: the Provisioning goes `Ready`, and the installer's log has each of `steps` (e.g.
/// `master-0 kubeadm init: initialised`), each host of `prepared` prepared, and the kubeconfig Secret written,
/// which names the master's inspected address `master`. Returns that kubeconfig.
pub(super) fn installs_the_cluster(
    site: &Site,
    job: &str,
    master: &str,
    (prepared, steps): (&[&str], &[&str]),
) -> String {
    let (phase, logs) = outcome(site, job);
    assert_eq!(
        phase,
        "Ready",
        "{}\n{logs}",
        field(site, "{.status.conditions}")
    );
    for host in prepared {
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
    for line in steps
        .iter()
        .copied()
        .chain(["kubeconfig written to Secret default/c1-kubeconfig"])
    {
        let line = format!("{line}\n");
        assert!(logs.contains(&line), "{line:?} in {logs}");
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
        conf.contains(&format!("server: https://{master}:6443")),
        "{conf}"
    );
    conf
}

/// The workload cluster's nodes and their Ready conditions (`master-0=True worker-0=True`), asked from the
/// provisioning network (the namespace `ns`) with the kubeconfig the BPA's installer wrote and the appliance's
/// kubectl; an error while the cluster does not answer. Not asked on the master: a login and a kubectl there
/// every few seconds is a load of its own on an emulated host whose control plane is coming up.
pub(super) fn workload_nodes(
    site_of: (&Namespace, &Site, &Path),
    conf: &str,
) -> Result<String, String> {
    workload_get(
        site_of,
        conf,
        &[
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
        ],
    )
}

/// The workload cluster's CoreDNS pods, each as `<name> ready=<true|false> restarts=<n>`, one per line.
pub(super) fn workload_dns(
    site_of: (&Namespace, &Site, &Path),
    conf: &str,
) -> Result<String, String> {
    workload_get(
        site_of,
        conf,
        &[
            "pods",
            "-n",
            "kube-system",
            "-l",
            "k8s-app=kube-dns",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} ready={.status.containerStatuses[0].ready} restarts={.status.containerStatuses[0].restartCount}{\"\\n\"}{end}",
        ],
    )
}

/// `kubectl get <args>` on the workload cluster, as [`workload_nodes`] asks it.
pub(super) fn workload_get(
    site_of: (&Namespace, &Site, &Path),
    conf: &str,
    args: &[&str],
) -> Result<String, String> {
    let args: Vec<&str> = ["get"].into_iter().chain(args.iter().copied()).collect();
    workload_kubectl(site_of, conf, &args, None)
}

/// How often [`workload_kubectl`] asks again when the workload cluster's API server did not answer: its master
/// is an emulated VM, which a drain, an image pull or a kubelet restart can keep from answering within
/// kubectl's 20 s.
const UNANSWERED_TRIES: u32 = 4;

/// Whether kubectl's error says the API server was reached too slowly, not that it is down or refused: a
/// request timed out, or the TLS handshake did ("Unable to connect to the server: net/http: request canceled
/// (Client.Timeout exceeded …)", "… TLS handshake timeout").
fn unanswered(error: &str) -> bool {
    error.contains("Unable to connect to the server") && error.to_lowercase().contains("timeout")
}

/// `kubectl <args>` on the workload cluster from the provisioning network (the namespace `ns`), with the
/// kubeconfig `conf` and the appliance's kubectl; `stdin`, when given, is a file an argument `-` names. A
/// request the API server did not answer in time ([`unanswered`]) is made again, up to
/// [`UNANSWERED_TRIES`] times in all, each retry said; any answer, an error's too, is returned as it is.
pub(super) fn workload_kubectl(
    (ns, site, dir): (&Namespace, &Site, &Path),
    conf: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    let kubeconfig = dir.join("c1.kubeconfig");
    std::fs::write(&kubeconfig, conf).unwrap();
    let input = dir.join("workload-input.yaml");
    if let Some(text) = stdin {
        std::fs::write(&input, text).unwrap();
    }
    let args = args.iter().map(|a| {
        if *a == "-" {
            input.to_str().unwrap()
        } else {
            a
        }
    });
    let args: Vec<&str> = args.collect();
    let mut tries = 0;
    loop {
        tries += 1;
        let said = try_run(
            ns.command(site.root.join("usr/local/bin/kubectl"))
                .arg("--request-timeout=20s")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args),
        );
        match said {
            Err(e) if unanswered(&e) && tries < UNANSWERED_TRIES => {
                foothold_e2e::say!(
                    "metal3_provisioning: the workload cluster did not answer `kubectl {}` (try {tries}): {}",
                    args.join(" "),
                    e.trim()
                );
            }
            said => return said.map(|s| s.trim().to_owned()),
        }
    }
}

/// Deletes the Provisioning: its finalizer removes what it made, the installer Job `job` among it, and
/// releases the BareMetalHosts `bmhs` its cluster was on.
pub(super) fn deleted(site: &Site, job: &str, bmhs: &[&str]) {
    site.kubectl(&["delete", "provisioning", "c1", "--timeout=120s"])
        .unwrap_or_else(|e| panic!("deleting the Provisioning: {e}"));
    wait_for("the installer Job gone", Duration::from_secs(120), || {
        let left = site.kubectl(&["get", "job", job, "-o", "name"]);
        (format!("{left:?}"), left.is_err().then_some(()))
    });
    for bmh in bmhs {
        assert_eq!(
            site.kubectl(&[
                "get",
                "baremetalhost",
                bmh,
                "-o",
                "jsonpath={.spec.consumerRef}"
            ])
            .unwrap_or_else(|e| e),
            "",
            "{bmh} released with its Provisioning"
        );
    }
}

#[test]
fn a_request_the_workload_cluster_did_not_answer_in_time_is_made_again_and_a_refused_one_is_not() {
    // What kubectl said in stop 76's CI, while the installer drained the worker.
    assert!(unanswered(
        "Unable to connect to the server: net/http: request canceled (Client.Timeout exceeded while awaiting \
         headers)\n"
    ));
    assert!(unanswered(
        "Unable to connect to the server: net/http: TLS handshake timeout\n"
    ));
    assert!(!unanswered(
        "The connection to the server 172.22.0.10:6443 was refused - did you specify the right host or port?\n"
    ));
    assert!(!unanswered(
        "Error from server (NotFound): nodes \"worker-0\" not found\n"
    ));
}
