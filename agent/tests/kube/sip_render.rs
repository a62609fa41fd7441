//! The SIP services' generated configuration, checked by the real programs that will read it: `haproxy -c` for
//! the load balancers, `ssh -G` for the jump host's ssh_config; and a service that cannot be rendered, reported
//! on the real apiserver as an infra-service failure until the spec is fixed.

use crate::sip::{claimed, hosts, ready, sip_cluster, start_agent};
use crate::support;
use crate::support::kube::{env, until};

use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use foothold_agent::crd::sip::SIPCluster;

use foothold_agent::controllers::sip::configs::{
    haproxy_control_plane, haproxy_workers, ssh_config, Node,
};

fn nodes() -> Vec<Node> {
    (1..=5)
        .map(|i| Node {
            name: format!("rack{i}-node"),
            ip: if i % 2 == 0 {
                format!("fd00:10::{i}").parse().unwrap()
            } else {
                format!("10.23.25.{i}").parse().unwrap()
            },
        })
        .collect()
}

fn haproxy_check(config: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    Command::new("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(&path)
        .output()
        .expect("haproxy is installed by scripts/install-test-tools.sh")
}

#[test]
fn load_balancer_configs_pass_haproxy_check() {
    for (what, cfg) in [
        (
            "control plane",
            haproxy_control_plane(&nodes(), 30001, 6443),
        ),
        ("workers", haproxy_workers(&nodes(), 30100, 30110)),
        (
            "control plane without hosts",
            haproxy_control_plane(&[], 30001, 6443),
        ),
    ] {
        let out = haproxy_check(&cfg);
        assert!(
            out.status.success(),
            "haproxy -c refused the {what} config:\n{}{}\n{cfg}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The check can fail: a broken config is refused.
    let broken = haproxy_control_plane(&nodes(), 30001, 6443)
        .replace("balance roundrobin", "balance sideways");
    assert!(!haproxy_check(&broken).status.success());
}

#[test]
fn jump_host_ssh_config_parses_and_resolves_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ssh_config");
    std::fs::write(
        &path,
        ssh_config(&nodes(), "root", "/etc/foothold/ssh/id_rsa"),
    )
    .unwrap();
    for n in nodes() {
        let out = support::stdout(
            Command::new("ssh")
                .arg("-G")
                .arg("-F")
                .arg(&path)
                .arg(&n.name),
        );
        let get = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} ")))
                .unwrap_or_else(|| panic!("ssh -G printed no {k}:\n{out}"))
                .to_owned()
        };
        assert_eq!(get("hostname"), n.ip.to_string());
        assert_eq!(get("user"), "root");
        assert_eq!(get("identityfile"), "/etc/foothold/ssh/id_rsa");
        assert_eq!(get("stricthostkeychecking"), "false");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_cannot_be_built_is_an_infra_service_failure_until_the_spec_is_fixed() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "sip-infra").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 3, 3).await;
    let _agent = start_agent(tmp.path(), &ns, "agent-i");
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let services = json!({"jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodeInterfaceId": "storage"}]});
    sips.create(
        &PostParams::default(),
        &sip_cluster("x", (2, 0), (0, 0), services),
    )
    .await
    .unwrap();
    let s = until("InfraServiceFailure", || async {
        sips.get_opt("x")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.1 == "InfraServiceFailure"))
    })
    .await;
    assert_eq!(
        ready(&s).unwrap().2,
        format!("x-jump-host: host {ns}/node-00: networkData has no network with id \"storage\"")
    );
    // The hosts are claimed all the same; the service waits for a spec that can be built.
    assert_eq!(claimed(&client, &ns, "x").await.len(), 2);
    assert!(Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt("x-jump-host")
        .await
        .unwrap()
        .is_none());
    sips.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"services": {"jumpHost": [
            {"image": "quay.io/airshipit/jump-host:latest", "nodeInterfaceId": "oam-ipv6"}]}}})),
    )
    .await
    .unwrap();
    until("ReconciliationSucceeded", || async {
        sips.get_opt("x")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.1 == "ReconciliationSucceeded"))
    })
    .await;
    // Each generation went through Progressing, as Events show.
    let reasons: Vec<String> = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("x"))
        .filter_map(|e| e.reason)
        .collect();
    for want in [
        "Progressing",
        "InfraServiceFailure",
        "ReconciliationSucceeded",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }
}
