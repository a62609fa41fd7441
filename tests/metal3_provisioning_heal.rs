//! Healing the workload cluster `metal3_provisioning_bpa.rs` made, with both its nodes in it: while both are
//! unhealthy the share guard holds every remediation back and the `Healthy` condition says why; with the
//! master back, the worker, its kubelet still stopped, is drained (a PodDisruptionBudget holds the drain until
//! the spec's drain time is up, and an Event says so) and rebooted through its BareMetalHost, comes back from
//! its disk and is `Ready` and schedulable again, and the Provisioning's events tell the story.

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::native_site::{lease, wait_for, wait_for_hosts, Site};
use foothold_e2e::netns::Namespace;

use super::bpa::{field, workload_get, workload_nodes};
use super::nodes::Node;

const HEALTHY: &str = "{.status.conditions[?(@.type==\"Healthy\")]";

/// The Provisioning's `Healthy` condition: its reason and message.
fn healthy(site: &Site) -> (String, String) {
    (
        field(site, &format!("{HEALTHY}.reason}}")),
        field(site, &format!("{HEALTHY}.message}}")),
    )
}

/// How long the BPA has seen `node` NotReady, read from the `Healthy` condition's message, whose parts say it
/// per node (`<node>: NotReady for <n> s …`, `<node>: unhealthy (NotReady for <n> s), …`).
fn not_ready_for(message: &str, node: &str) -> Option<u64> {
    message.split("; ").find_map(|part| {
        let (_, after) = part
            .strip_prefix(&format!("{node}: "))?
            .split_once("NotReady for ")?;
        after.split(' ').next()?.parse().ok()
    })
}

/// Healing turned on for `c1`: a node `NotReady` for 30 s is drained (for at most 10 s) and rebooted through
/// its BareMetalHost, while no more than half the nodes are unhealthy. A new generation that installs nothing
/// new, so the installer Job `job` stays the cluster's and it stays `Ready`.
fn healing_on(site: &Site, job: &str) {
    let before = field(site, "{.metadata.generation}");
    site.kubectl(&[
        "patch",
        "provisioning",
        "c1",
        "--type=merge",
        "-p",
        r#"{"spec": {"healing": {"enabled": true, "notReadySeconds": 30, "maxUnhealthyPercent": 50, "drainTimeoutSeconds": 10}}}"#,
    ])
    .unwrap_or_else(|e| panic!("turning healing on: {e}"));
    let generation = field(site, "{.metadata.generation}");
    assert_ne!(generation, before);
    wait_for(
        "the new generation observed",
        Duration::from_secs(120),
        || {
            let now = field(
                site,
                "{.status.observedGeneration} {.status.phase} {.status.jobName}",
            );
            let want = format!("{generation} Ready {job}");
            (now.clone(), (now == want).then_some(()))
        },
    );
}

/// Both nodes' kubelets stopped (`on`: the master's and the worker's commands) while healing is off; once the
/// BPA has seen each `NotReady` for 30 s, healing is turned on and meets the share guard: both unhealthy, more
/// than its 50 %, the `Healthy` condition `TooManyUnhealthy` says so, and nothing is remediated. (Turned on only
/// then: stopped together, the nodes still go `NotReady` up to a lease's 10 s apart, and the first past the
/// threshold alone is half the nodes, which the guard lets through.) Returns when the kubelets were stopped.
pub(super) fn held_while_both_are_unhealthy(
    site: &Site,
    job: &str,
    on: [&dyn Fn(&str) -> String; 2],
) -> Instant {
    let started = Instant::now();
    for on in on {
        on("sudo systemctl stop kubelet");
    }
    wait_for(
        "both nodes NotReady for 30 s, as the BPA sees them",
        Duration::from_secs(300),
        || {
            let (reason, message) = healthy(site);
            let seen = ["master-0", "worker-0"].map(|n| not_ready_for(&message, n));
            let done = seen.iter().all(|s| s.is_some_and(|s| s >= 30));
            (format!("{reason}: {message}"), done.then_some(()))
        },
    );
    healing_on(site, job);
    let (_, message) = wait_for(
        "the share guard's condition",
        Duration::from_secs(120),
        || {
            let now = healthy(site);
            (
                format!("{now:?}"),
                (now.0 == "TooManyUnhealthy").then_some(now),
            )
        },
    );
    assert!(
        message.ends_with("2 of 2 nodes unhealthy, more than 50 %: nothing is remediated"),
        "{message}"
    );
    for node in ["master-0", "worker-0"] {
        let said = format!("{node}: unhealthy (NotReady for ");
        assert!(message.contains(&said), "{said:?} in {message}");
    }
    assert_eq!(
        field(site, "{.status.remediations}"),
        "",
        "a remediation past the share guard"
    );
    started
}

/// The node `node` rebooted by its remediation and ready again, from its disk: the soft reboot Metal3 asks for
/// first (the system shut down by the BMC's power button, handled by logind, before it was powered on again,
/// not cut off after Ironic's wait), its BareMetalHost `provisioned` and on, at its address (the same DHCP
/// lease). Returns the BareMetalHost.
pub(super) fn rebooted_from_disk(site: &Site, node: &Node, address: &str) -> serde_json::Value {
    let again = foothold_e2e::wait_for_nth_marker(&node.console, 2, Duration::from_secs(900));
    assert!(again.contains(&format!("host={} ", node.name)), "{again}");
    let console = String::from_utf8_lossy(&std::fs::read(&node.console).unwrap()).into_owned();
    let first_ready = console.find("FOOTHOLD-READY").expect("the first marker");
    assert!(
        console[first_ready..].contains("reboot: Power down"),
        "{} was not shut down by its power button before it came back",
        node.name
    );
    let host =
        wait_for_hosts(site, &[(node.name, "provisioned")], Duration::from_secs(60)).remove(0);
    assert_eq!(host["status"]["poweredOn"], true);
    assert_eq!(
        lease(&site.root, node.mac),
        address,
        "{}'s address changed",
        node.name
    );
    host
}

/// The workload cluster's node `node` after its reboot (`started`): from its disk, it comes back `Ready`.
pub(super) fn back(site_of: (&Namespace, &Site, &Path), conf: &str, node: &str, started: Instant) {
    let ready = format!("{node}=True");
    wait_for(
        &format!("the workload cluster's {node} after its reboot"),
        Duration::from_secs(600),
        || {
            let now = workload_nodes(site_of, conf);
            let done = now
                .as_deref()
                .is_ok_and(|n| n.split(' ').any(|s| s == ready));
            (format!("{now:?}"), done.then_some(()))
        },
    );
    foothold_e2e::say!(
        "metal3_provisioning: the workload cluster's {node} Ready again {} s after its kubelet stopped",
        started.elapsed().as_secs()
    );
}

/// The BPA healed the cluster's worker, whose kubelet the test stopped: one Event `Remediating` says its node
/// is drained before its reboot through BareMetalHost `bmh`; the spread Deployment's budget (minAvailable 1,
/// its pod on the master the only one Ready) holds that drain, so past the spec's 10 s a Warning `Rebooting`
/// says the reboot goes ahead undrained and names the spread pod; one `Healed` follows, the only remediation
/// in the status (none while the guard held) ended `Healed` with its drain `TimedOut`, the node the drain
/// cordoned is schedulable again, and the cluster is `Healthy` with both nodes.
pub(super) fn healed_the_worker(site_of: (&Namespace, &Site, &Path), conf: &str, bmh: &str) {
    let site = site_of.1;
    let (reason, message) = wait_for(
        "the cluster Healthy again",
        Duration::from_secs(300),
        || {
            let now = healthy(site);
            (format!("{now:?}"), (now.0 == "NodesReady").then_some(now))
        },
    );
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("NodesReady", "all 2 nodes Ready")
    );
    assert_eq!(
        field(
            site,
            "{.status.remediations[*].node} {.status.remediations[*].outcome} {.status.remediations[*].drain}"
        ),
        "worker-0 Healed TimedOut",
        "{}",
        field(site, "{.status.remediations}")
    );
    let cordoned = workload_get(
        site_of,
        conf,
        &["node", "worker-0", "-o", "jsonpath={.spec.unschedulable}"],
    );
    assert_eq!(
        cordoned.as_deref(),
        Ok(""),
        "worker-0 still cordoned after healing"
    );
    let notes = site
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.kind=Provisioning,involvedObject.name=c1",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ])
        .unwrap_or_else(|e| e);
    let remediating = format!(
        "Remediating: draining worker-0 before its reboot through BareMetalHost {bmh}: not Ready for "
    );
    assert_eq!(notes.matches(&remediating).count(), 1, "{notes}");
    assert_eq!(notes.matches("Remediating: ").count(), 1, "{notes}");
    let rebooting = format!(
        "Rebooting: rebooting worker-0 through BareMetalHost {bmh} undrained: the drain had its 10 s \
         (spec.healing.drainTimeoutSeconds): "
    );
    let line = notes
        .lines()
        .find(|l| l.starts_with(&rebooting))
        .unwrap_or_else(|| panic!("no {rebooting:?} in {notes}"));
    assert!(line.contains("default/spread-"), "{line}");
    assert!(
        notes.contains(&format!(
            "Healed: worker-0 is Ready again after its reboot through BareMetalHost {bmh}"
        )),
        "{notes}"
    );
}

#[test]
fn how_long_a_node_was_not_ready_is_read_from_the_healthy_condition() {
    let message = "master-0: unhealthy (NotReady for 41 s), not remediated; worker-0: NotReady for 29 s \
                   (unhealthy after 30 s); 2 of 2 nodes unhealthy, more than 50 %: nothing is remediated";
    assert_eq!(not_ready_for(message, "master-0"), Some(41));
    assert_eq!(not_ready_for(message, "worker-0"), Some(29));
    assert_eq!(not_ready_for(message, "worker-1"), None);
    assert_eq!(not_ready_for("all 2 nodes Ready", "master-0"), None);
}
