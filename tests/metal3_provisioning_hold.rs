//! A host of a Ready cluster is not deprovisioned by hand before its node is drained: the agent's admission
//! webhook, which the agent registered with the appliance's API server (`--admission-url`, over HTTPS with the
//! site CA), refuses it naming the host, its cluster and what to do; the drain annotation makes the BPA cordon
//! the node in the workload cluster, over the provisioning network, and evict its pods, then mark the host
//! drained, once a PodDisruptionBudget that held it is gone; the same change then passes (asked as a dry run:
//! the master stays for what follows). The drain taken back makes the node schedulable again.

use std::path::Path;
use std::time::Duration;

use foothold_e2e::native_site::{wait_for, Site};
use foothold_e2e::netns::Namespace;

use super::bpa;

const DRAIN: &str = "bpa.akraino.org/drain";
/// The spread Deployment's budget, asking for both its pods: none may be evicted.
const BOTH: &str = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: spread, namespace: default}\n\
                    spec: {minAvailable: 2, selector: {matchLabels: {app: spread}}}\n";

pub(super) fn drained_before_it_goes(
    site_of: (&Namespace, &Site, &Path),
    conf: &str,
    bmh: &str,
    node: &str,
) {
    let site = site_of.1;
    let deprovision = |dry_run: bool| {
        let mut args = vec!["patch", "baremetalhost", bmh, "--type=merge", "-p"];
        args.push(r#"{"spec": {"image": null}}"#);
        if dry_run {
            args.push("--dry-run=server");
        }
        site.kubectl(&args)
    };
    let refused = deprovision(false).expect_err("deprovisioning a node of a Ready cluster by hand");
    for said in [
        "denied the request",
        &format!("{bmh} runs a node of Provisioning c1's cluster"),
        "deprovisioning it (spec.image removed) waits until the node is drained",
    ] {
        assert!(refused.contains(said), "{said:?} not in {refused}");
    }
    // A spread pod running on the node, and their budget asking for both pods: it holds the drain until it goes.
    let on_it = format!("status.phase=Running,spec.nodeName={node}");
    let running = || {
        let names = [
            "pods",
            "-l",
            "app=spread",
            "--field-selector",
            &on_it,
            "-o",
            "name",
        ];
        bpa::workload_get(site_of, conf, &names).map(|p| p.lines().count())
    };
    wait_for(
        "a spread pod running there",
        Duration::from_secs(300),
        || {
            let now = running();
            (format!("{now:?}"), now.is_ok_and(|n| n >= 1).then_some(()))
        },
    );
    bpa::workload_kubectl(site_of, conf, &["apply", "-f", "-"], Some(BOTH))
        .unwrap_or_else(|e| panic!("the budget asking for both pods: {e}"));
    site.kubectl(&["annotate", "baremetalhost", bmh, &format!("{DRAIN}=")])
        .unwrap_or_else(|e| panic!("asking for the drain: {e}"));
    // The budget holds the drain: the node cordoned, the host `Draining`, the spread pod still running on it,
    // the host not marked, the change still refused.
    let shown = format!("{{.status.hosts[?(@.bareMetalHost==\"{bmh}\")].membership}}");
    wait_for("the drain under way", Duration::from_secs(120), || {
        let now = (bpa::field(site, &shown), unschedulable(site_of, conf, node));
        (
            format!("{now:?}"),
            (now.0 == "Draining" && now.1 == "true").then_some(()),
        )
    });
    let spread = running();
    assert!(
        spread.as_ref().is_ok_and(|n| *n >= 1),
        "no spread pod left running: {spread:?}"
    );
    assert_eq!(
        marked(site, bmh),
        "",
        "marked drained with a pod its budget keeps"
    );
    let waiting = deprovision(false).expect_err("deprovisioning while the drain waits");
    assert!(waiting.contains("its drain is under way"), "{waiting}");
    bpa::workload_kubectl(site_of, conf, &["delete", "pdb", "spread"], None)
        .unwrap_or_else(|e| panic!("deleting the budget: {e}"));
    let drained = wait_for("the host marked drained", Duration::from_secs(300), || {
        let now = marked(site, bmh);
        (now.clone(), (!now.is_empty()).then_some(now))
    });
    assert_eq!(drained, node);
    assert_eq!(bpa::field(site, &shown), "Drained");
    let left = bpa::workload_get(
        site_of,
        conf,
        &[
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={node}"),
            "-o",
            "name",
        ],
    );
    foothold_e2e::say!(
        "metal3_provisioning: left on {node} by its drain (static and DaemonSet pods): {left:?}"
    );
    deprovision(true).unwrap_or_else(|e| panic!("deprovisioning {bmh} once drained: {e}"));
    foothold_e2e::say!("metal3_provisioning: {bmh} held until {node} was drained, then let go");

    site.kubectl(&["annotate", "baremetalhost", bmh, &format!("{DRAIN}-")])
        .unwrap_or_else(|e| panic!("taking the drain back: {e}"));
    wait_for(
        "the node schedulable again",
        Duration::from_secs(120),
        || {
            let now = unschedulable(site_of, conf, node);
            (now.clone(), now.is_empty().then_some(()))
        },
    );
}

/// The host's `bpa.akraino.org/drained` annotation (empty without it), or the error.
fn marked(site: &Site, bmh: &str) -> String {
    let path = r"jsonpath={.metadata.annotations.bpa\.akraino\.org/drained}";
    site.kubectl(&["get", "baremetalhost", bmh, "-o", path])
        .unwrap_or_else(|e| e)
}

/// The node's `spec.unschedulable` (`true`, or empty), or the error.
fn unschedulable(site_of: (&Namespace, &Site, &Path), conf: &str, node: &str) -> String {
    bpa::workload_get(
        site_of,
        conf,
        &["node", node, "-o", "jsonpath={.spec.unschedulable}"],
    )
    .unwrap_or_else(|e| e)
}
