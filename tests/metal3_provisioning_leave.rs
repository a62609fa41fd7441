//! A host leaving the workload cluster `metal3_provisioning_bpa.rs` made, and coming back: taken out of the
//! Provisioning, the worker is drained through the Eviction API past a PodDisruptionBudget, reset over SSH and
//! its Node deleted by the installer Job, and its BareMetalHost released; added back, it joins again and gets
//! the cluster's Software again.

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::native_site::{wait_for, Site};
use foothold_e2e::netns::Namespace;

use super::bpa::{
    adds_the_worker, answer, field, installs_the_cluster, outcome, provisioning, workload_get,
    workload_kubectl, workload_nodes,
};
use super::nodes::Node;
use super::software;

/// The test Deployment's pods on the workload cluster: `name node phase` each, one per line.
fn spread(site_of: (&Namespace, &Site, &Path), conf: &str) -> Result<String, String> {
    workload_get(
        site_of,
        conf,
        &[
            "pods",
            "-l",
            "app=spread",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{\"\\n\"}{end}",
        ],
    )
}

/// For each pod `spread` lists as `Pending`, its newest event (`reason: message`), so that a pod which does not
/// start says where it stands (scheduling, the sandbox, an image pull); empty when none is pending.
fn pending_why(site_of: (&Namespace, &Site, &Path), conf: &str, pods: &str) -> String {
    pods.lines()
        .filter(|l| l.ends_with(" Pending"))
        .filter_map(|l| l.split(' ').next())
        .map(|pod| {
            let selector = format!("involvedObject.name={pod}");
            let events = workload_get(
                site_of,
                conf,
                &[
                    "events",
                    "--field-selector",
                    &selector,
                    "--sort-by=.lastTimestamp",
                    "-o",
                    "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
                ],
            );
            let newest = match &events {
                Ok(text) => text.lines().last().unwrap_or("no event").to_owned(),
                Err(e) => e.trim().to_owned(),
            };
            format!("; {pod}: {newest}")
        })
        .collect()
}

/// The worker taken out of the `Ready` cluster `c1` (a new generation naming the master alone): the BPA shows
/// it `Removing`, and its installer Job drains it through the Eviction API: a Deployment of two pods, one on
/// each node, whose PodDisruptionBudget first allows no disruption, holds the drain (the Job says it waits, the
/// pod stays) until the budget allows one; then the worker is reset over SSH (kubelet stopped, kubeadm's files
/// gone) and its Node deleted, both pods run on the master, the Provisioning is `Ready` with the worker
/// `Removed`, its BareMetalHost released and the master's still claimed. `on_worker` runs a command there.
pub(super) fn removes_the_worker(
    site_of: (&Namespace, &Site, &Path),
    nodes: &[Node],
    conf: &str,
    on_worker: &dyn Fn(&str) -> String,
) {
    let (_, site, _) = site_of;
    let spread_yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: spread, namespace: default}\n\
         spec:\n  replicas: 2\n  selector: {matchLabels: {app: spread}}\n  template:\n    \
         metadata: {labels: {app: spread}}\n    spec:\n      \
         tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]\n      \
         topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, \
         whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: spread}}}]\n      \
         terminationGracePeriodSeconds: 5\n      \
         containers: [{name: pause, image: \"registry.k8s.io/pause:3.10.1\", imagePullPolicy: IfNotPresent}]\n\
         ---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: spread, namespace: default}\n\
         spec: {minAvailable: 2, selector: {matchLabels: {app: spread}}}\n";
    let apply = |yaml: &str| {
        wait_for(
            "the workload cluster to take it",
            Duration::from_secs(300),
            || {
                let r = workload_kubectl(site_of, conf, &["apply", "-f", "-"], Some(yaml));
                (format!("{r:?}"), r.ok())
            },
        )
    };
    apply(spread_yaml);
    // The first pod on the loaded master has taken 141-298 s to start in passing runs (its own events say
    // where); the limit is a deadline for a fault, not a measure.
    let placed = wait_for(
        "a spread pod on each node",
        Duration::from_secs(600),
        || {
            let now = spread(site_of, conf);
            let done = now.as_deref().is_ok_and(|p| {
                p.lines().filter(|l| l.ends_with(" Running")).count() == 2
                    && p.contains(" master-0 Running")
                    && p.contains(" worker-0 Running")
            });
            let why = pending_why(site_of, conf, now.as_deref().unwrap_or_default());
            (format!("{now:?}{why}"), done.then(|| now.unwrap()))
        },
    );
    let on_worker_pod = placed
        .lines()
        .find(|l| l.contains(" worker-0 "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .to_owned();

    // The Software goes first: installed again on every new generation, it is not what this shows.
    site.kubectl(&["delete", "software", "tools", "--timeout=120s"])
        .unwrap_or_else(|e| panic!("deleting the Software: {e}"));
    let started = Instant::now();
    answer(site, &provisioning(&nodes[0], nodes[0].vcpus, None, 6), 6);
    let job = field(site, "{.status.jobName}");
    let membership = |label: &str| {
        field(
            site,
            &format!("{{.status.hosts[?(@.label==\"{label}\")].membership}}"),
        )
    };
    assert_eq!(membership("worker-0"), "Removing");
    assert_eq!(membership("master-0"), "Member");
    // Held by the budget: the Job says so, and the pod stays on the cordoned worker.
    let logs = || {
        site.kubectl(&["logs", &format!("job/{job}"), "--tail=200"])
            .unwrap_or_else(|e| e)
    };
    let waiting = format!("worker-0 drain: waiting, eviction refused: default/{on_worker_pod}: ");
    wait_for(
        "the drain held by the budget",
        Duration::from_secs(600),
        || {
            let logs = logs();
            let last = logs.lines().last().unwrap_or_default().to_owned();
            (last, logs.contains(&waiting).then_some(()))
        },
    );
    let now = spread(site_of, conf).unwrap_or_else(|e| e);
    assert!(now.contains(&format!("{on_worker_pod} worker-0 ")), "{now}");
    let cordoned = workload_get(
        site_of,
        conf,
        &["node", "worker-0", "-o", "jsonpath={.spec.unschedulable}"],
    );
    assert_eq!(cordoned.as_deref(), Ok("true"));
    apply(&spread_yaml.replace("minAvailable: 2", "minAvailable: 1"));
    let (phase, logs) = outcome(site, &job);
    assert_eq!(
        phase,
        "Ready",
        "{}\n{logs}",
        field(site, "{.status.conditions}")
    );
    // The spread pod among what the drain evicted: with it, whatever else ran there (CoreDNS, which the
    // Software's drain of the master moved to the worker), each named and counted.
    let drained = logs
        .lines()
        .find_map(|l| l.strip_prefix("worker-0 drain: cordoned, "))
        .unwrap_or_else(|| panic!("no drain in {logs}"));
    let (count, pods) = drained
        .strip_suffix(')')
        .and_then(|d| d.split_once(" pod(s) evicted ("))
        .unwrap_or_else(|| panic!("a drain's line: {drained}"));
    let pods: Vec<&str> = pods.split(", ").collect();
    assert_eq!(count, pods.len().to_string(), "{drained}");
    assert!(
        pods.contains(&format!("default/{on_worker_pod}").as_str()),
        "{drained}"
    );
    for line in ["worker-0 reset: reset", "worker-0 removed: Node deleted"] {
        assert!(logs.contains(&format!("{line}\n")), "{line:?} in {logs}");
    }
    foothold_e2e::say!(
        "metal3_provisioning: the worker removed from the cluster {} s after the spec left it out",
        started.elapsed().as_secs()
    );
    assert_eq!(membership("worker-0"), "Removed");
    let consumer = |bmh: &str| {
        site.kubectl(&[
            "get",
            "baremetalhost",
            bmh,
            "-o",
            "jsonpath={.spec.consumerRef.name}",
        ])
        .unwrap_or_else(|e| e)
    };
    assert_eq!(consumer(nodes[1].name), "", "the worker's host released");
    assert_eq!(
        consumer(nodes[0].name),
        "c1",
        "the master's host still the cluster's"
    );
    assert_eq!(
        workload_nodes(site_of, conf).as_deref(),
        Ok("master-0=True"),
        "the worker's Node deleted"
    );
    wait_for(
        "both spread pods on the master",
        Duration::from_secs(300),
        || {
            let now = spread(site_of, conf);
            let done = now.as_deref().is_ok_and(|p| {
                p.lines().count() == 2 && p.lines().all(|l| l.ends_with(" master-0 Running"))
            });
            (format!("{now:?}"), done.then_some(()))
        },
    );
    // Reset: kubelet stopped and disabled, kubeadm's and the installer's files gone.
    let said = on_worker(
        "systemctl is-active kubelet; systemctl is-enabled kubelet; \
         ls /etc/kubernetes/kubelet.conf /etc/foothold/kubernetes/joined 2>&1 | sed 's/.*cannot access //'",
    );
    assert_eq!(
        said,
        "inactive\ndisabled\n'/etc/kubernetes/kubelet.conf': No such file or directory\n\
         '/etc/foothold/kubernetes/joined': No such file or directory\n",
        "the worker after its reset"
    );
}

/// The worker added back to the `Ready` cluster after its removal. The Software is applied again first (its
/// run installs on the master alone, which has it all) and its binary deleted on the worker, as on a host that
/// comes back without what the cluster gave it. The Provisioning's generation 7 names the worker again: its
/// installer Job joins it (the reset left it able to), the cluster is `Ready` with both nodes, and the
/// Software's run for that generation installs the binary on the worker alone. Then one of the spread
/// Deployment's two pods, both on the master since the removal, is deleted: its replacement goes to the worker,
/// where healing's drain meets the budget. `addresses`: the master's and the worker's. Returns the installer
/// Job's name and the kubeconfig.
pub(super) fn comes_back(
    site_of: (&Namespace, &Site, &Path),
    nodes: &[Node],
    addresses: &[String],
    on_worker: &dyn Fn(&str) -> String,
) -> (String, String) {
    let (_, site, _) = site_of;
    let before = software::applied_again(site);
    on_worker("sudo rm /usr/local/bin/hello-tool");
    let started = Instant::now();
    let job = adds_the_worker(site, nodes, addresses, 7);
    let conf = installs_the_cluster(
        site,
        &job,
        &addresses[0],
        (
            &["master-0", "worker-0"],
            &[
                "master-0 kubeadm init: already initialised",
                "worker-0 kubeadm join: joined",
            ],
        ),
    );
    assert_eq!(
        workload_nodes(site_of, &conf).as_deref(),
        Ok("master-0=True worker-0=True"),
        "the cluster once Ready again"
    );
    foothold_e2e::say!(
        "metal3_provisioning: the worker joined again {} s after the spec named it",
        started.elapsed().as_secs()
    );
    let member = field(site, "{.status.hosts[?(@.label==\"worker-0\")].membership}");
    assert_eq!(member, "Member");
    software::follows_the_cluster(site, &before, on_worker);

    let on_master = spread(site_of, &conf).unwrap_or_else(|e| e);
    let pod = on_master
        .lines()
        .find(|l| l.contains(" master-0 "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no spread pod on the master: {on_master}"))
        .to_owned();
    workload_kubectl(
        site_of,
        &conf,
        &["delete", "pod", &pod, "--wait=false"],
        None,
    )
    .unwrap_or_else(|e| panic!("deleting {pod}: {e}"));
    wait_for(
        "a spread pod on each node again",
        Duration::from_secs(600),
        || {
            let now = spread(site_of, &conf);
            let done = now.as_deref().is_ok_and(|p| {
                p.lines().filter(|l| l.ends_with(" Running")).count() == 2
                    && p.contains(" master-0 Running")
                    && p.contains(" worker-0 Running")
            });
            let why = pending_why(site_of, &conf, now.as_deref().unwrap_or_default());
            (format!("{now:?}{why}"), done.then_some(()))
        },
    );
    (job, conf)
}
