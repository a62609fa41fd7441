//! The SIP reconciler against a real kube-apiserver: the agent binary runs with `--controllers sip`; the
//! fixtures are genuine Metal3 BareMetalHosts with networkData and BMC credential Secrets.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::kube::{controller_agent, env, until, WAIT};
use crate::support::Agent;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use foothold_agent::controllers::sip::configs::{haproxy_control_plane, Node};
use foothold_agent::crd::metal3::BareMetalHost;
use foothold_agent::crd::sip::SIPCluster;

pub(crate) const RACK: &str = "sip.airshipit.org/rack";

pub(crate) fn start_agent(dir: &Path, ns: &str, identity: &str) -> Agent {
    controller_agent(dir, ns, identity, "sip", &env().agent_kubeconfig(), &[])
}

pub(crate) fn ipv4(i: usize) -> String {
    format!("10.23.25.{}", 10 + i)
}

fn ipv6(i: usize) -> String {
    format!("fd00:23::{:x}", 10 + i)
}

/// `count` available hosts `node-00…`, host i in rack `r{i % racks}`, each with a networkData Secret (two
/// networks, JSON for even hosts and YAML for odd ones) and BMC credentials.
pub(crate) async fn hosts(client: &kube::Client, ns: &str, count: usize, racks: usize) {
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for i in 0..count {
        let name = format!("node-{i:02}");
        let networks = json!({"links": [{"id": "eno1", "type": "phy"}], "networks": [
            {"id": "oam-ipv4", "link": "eno1", "type": "ipv4", "ip_address": format!("{}/24", ipv4(i))},
            {"id": "oam-ipv6", "link": "eno1", "type": "ipv6", "ip_address": ipv6(i)}]});
        let text = if i % 2 == 0 {
            networks.to_string()
        } else {
            format!(
                "networks:\n- id: oam-ipv4\n  ip_address: {}/24\n- id: oam-ipv6\n  ip_address: {}\n",
                ipv4(i),
                ipv6(i)
            )
        };
        secrets.create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-network-data")}, "stringData": {"networkData": text},
        })).unwrap()).await.unwrap();
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-bmc")},
                    "stringData": {"username": "admin", "password": format!("pw-{i}")},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        bmhs.create(&PostParams::default(), &serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "labels": {"pool": "sip", RACK: format!("r{}", i % racks)}},
            "spec": {"online": true, "bootMACAddress": format!("02:00:00:00:10:{i:02x}"),
                     "bmc": {"address": format!("redfish+https://[fd00:b::{:x}]:8443/redfish/v1/Systems/1", 10 + i),
                             "credentialsName": format!("{name}-bmc")},
                     "networkData": {"name": format!("{name}-network-data")}},
        })).unwrap()).await.unwrap();
        bmhs.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {
            "errorCount": 0, "errorMessage": "", "operationalStatus": "OK", "poweredOn": false,
            "provisioningFailCount": 0, "provisioning": {"ID": format!("id-{i}"), "state": "available"},
        }}))).await.unwrap();
    }
}

pub(crate) fn sip_cluster(
    name: &str,
    cp: (i32, i32),
    workers: (i32, i32),
    services: Value,
) -> SIPCluster {
    let set = |(active, standby): (i32, i32)| {
        json!({"labelSelector": {"matchLabels": {"pool": "sip"}}, "topologyKey": RACK,
               "count": {"active": active, "standby": standby}})
    };
    let mut nodes = json!({"ControlPlane": set(cp)});
    if workers != (0, 0) {
        nodes["Worker"] = set(workers);
    }
    serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "SIPCluster",
        "metadata": {"name": name}, "spec": {"nodes": nodes, "services": services},
    }))
    .unwrap()
}

pub(crate) fn ready(s: &SIPCluster) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Hosts labelled for `cluster`, as name → (node-type, standby).
pub(crate) async fn claimed(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
) -> Vec<(String, String, bool)> {
    let mut out: Vec<_> = Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("sip.airshipit.org/cluster-name={cluster}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|h| {
            let l = h.labels();
            assert_eq!(l["sip.airshipit.org/cluster-namespace"], ns);
            (
                h.name_any(),
                l["sip.airshipit.org/node-type"].clone(),
                l.get("sip.airshipit.org/standby")
                    .is_some_and(|v| v == "true"),
            )
        })
        .collect();
    out.sort();
    out
}

pub(crate) fn owned_by(name: &str) -> ListParams {
    ListParams::default().labels(&format!("sip.airshipit.org/sipcluster={name}"))
}

async fn secret_text(secrets: &Api<Secret>, name: &str, key: &str) -> String {
    let s = secrets.get(name).await.unwrap();
    String::from_utf8(s.data.unwrap()[key].0.clone()).unwrap()
}

fn run_check(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sipcluster_claims_hosts_runs_services_replaces_a_lost_host_and_cleans_up() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "sip-lifecycle").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 30, 6).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "dex-users"},
        "stringData": {"users": "- email: ops@example.com\n  hash: $2y$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W\n"},
    })).unwrap()).await.unwrap();
    // A host whose BMC credentials are missing: skipped, with the reason in the status.
    let secrets_missing: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "node-0a", "labels": {"pool": "sip", RACK: "r9"}},
        "spec": {"online": true, "bmc": {"address": "ipmi://10.9.9.9", "credentialsName": "node-0a-bmc"},
                 "networkData": {"name": "node-00-network-data"}},
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secrets_missing)
        .await
        .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "ldap-bind"}, "stringData": {"password": "s3cret"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-a");

    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let services = json!({
        "loadBalancerControlPlane": [{"image": "haproxy:2.6", "nodePort": 30443, "nodeInterfaceId": "oam-ipv4"}],
        "loadBalancerWorker": [{"image": "haproxy:2.6", "nodePortRange": {"start": 30080, "end": 30082},
                                "nodeInterfaceId": "oam-ipv6"}],
        "jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodePort": 30022,
                      "nodeInterfaceId": "oam-ipv4", "bmc": {"proxy": true},
                      "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests ops@site"],
                      "nodeSSHPrivateKeys": "tenant1-node-keys"}],
        "auth": [{"image": "ghcr.io/dexidp/dex:v2.41.1", "nodePort": 30556,
                  "issuer": "https://10.23.25.1:30556/dex", "staticConnector": {"usersSecret": "dex-users"},
                  "ldap": {"host": "ldap.site:636", "bindDN": "cn=dex,dc=site", "bindPasswordSecret": "ldap-bind",
                           "userBaseDN": "ou=people,dc=site", "userFilter": "(objectClass=person)",
                           "groupBaseDN": "ou=groups,dc=site"}}],
    });
    sips.create(
        &PostParams::default(),
        &sip_cluster("tenant1", (3, 1), (2, 1), services),
    )
    .await
    .unwrap();
    let s = until("tenant1 Ready", || async {
        sips.get_opt("tenant1")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.0 == "True"))
    })
    .await;
    assert_eq!(ready(&s).unwrap().1, "ReconciliationSucceeded");
    // Name order, one host per rack and role, actives before standbys, no host in two roles.
    let q = |n: &str| format!("{ns}/{n}");
    let st = s.status.clone().unwrap();
    assert_eq!(
        st.hosts["ControlPlane"].active,
        [q("node-00"), q("node-01"), q("node-02")]
    );
    assert_eq!(st.hosts["ControlPlane"].standby, [q("node-03")]);
    assert_eq!(st.hosts["Worker"].active, [q("node-04"), q("node-05")]);
    assert_eq!(st.hosts["Worker"].standby, [q("node-06")]);
    assert_eq!(
        st.skipped_hosts
            .iter()
            .map(|h| (h.name.clone(), h.reason.clone()))
            .collect::<Vec<_>>(),
        [(q("node-0a"), format!("Secret {ns}/node-0a-bmc not found"))]
    );
    let t1 = claimed(&client, &ns, "tenant1").await;
    assert_eq!(
        t1,
        [
            ("node-00".into(), "ControlPlane".into(), false),
            ("node-01".into(), "ControlPlane".into(), false),
            ("node-02".into(), "ControlPlane".into(), false),
            ("node-03".into(), "ControlPlane".into(), true),
            ("node-04".into(), "Worker".into(), false),
            ("node-05".into(), "Worker".into(), false),
            ("node-06".into(), "Worker".into(), true),
        ]
    );
    // Two more clusters competing for the rest of the pool at once, and one that cannot fit (6 racks, 8 hosts
    // wanted).
    sips.create(
        &PostParams::default(),
        &sip_cluster("tenant2", (3, 0), (0, 0), json!({})),
    )
    .await
    .unwrap();
    sips.create(
        &PostParams::default(),
        &sip_cluster("tenant4", (3, 0), (0, 0), json!({})),
    )
    .await
    .unwrap();
    sips.create(
        &PostParams::default(),
        &sip_cluster("tenant3", (8, 0), (0, 0), json!({})),
    )
    .await
    .unwrap();

    let s2 = until("tenant2 Ready", || async {
        sips.get_opt("tenant2")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.0 == "True"))
    })
    .await;
    let t2 = claimed(&client, &ns, "tenant2").await;
    assert_eq!(t2.len(), 3);
    let names =
        |v: &[(String, String, bool)]| v.iter().map(|h| h.0.clone()).collect::<BTreeSet<_>>();
    until("tenant4 Ready", || async {
        sips.get_opt("tenant4")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.0 == "True"))
    })
    .await;
    let t4 = claimed(&client, &ns, "tenant4").await;
    assert_eq!(t4.len(), 3);
    assert!(names(&t1).is_disjoint(&names(&t2)), "{t1:?} / {t2:?}");
    assert!(names(&t1).is_disjoint(&names(&t4)), "{t1:?} / {t4:?}");
    assert!(names(&t2).is_disjoint(&names(&t4)), "{t2:?} / {t4:?}");
    assert_eq!(s2.status.unwrap().hosts["ControlPlane"].active.len(), 3);
    let s3 = until("tenant3 Unschedulable", || async {
        sips.get_opt("tenant3")
            .await
            .unwrap()
            .filter(|s| ready(s).is_some_and(|r| r.1 == "Unschedulable"))
    })
    .await;
    let msg = ready(&s3).unwrap().2;
    assert!(
        msg.starts_with("ControlPlane: 8 active and 0 standby wanted, "),
        "{msg}"
    );
    assert!(
        claimed(&client, &ns, "tenant3").await.is_empty(),
        "an unschedulable cluster claims nothing"
    );

    // The control-plane load balancer: haproxy.cfg from the chosen hosts, accepted by haproxy.
    let cfg = secret_text(&secrets, "tenant1-lb-control-plane", "haproxy.cfg").await;
    let cp_nodes = |ids: &[usize]| -> Vec<Node> {
        ids.iter()
            .map(|i| Node {
                name: format!("node-{i:02}"),
                ip: ipv4(*i).parse().unwrap(),
            })
            .collect()
    };
    assert_eq!(
        cfg,
        haproxy_control_plane(&cp_nodes(&[0, 1, 2]), 30443, 6443)
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cp.cfg"), &cfg).unwrap();
    run_check(
        Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(dir.path().join("cp.cfg")),
    );
    let workers = secret_text(&secrets, "tenant1-lb-worker", "haproxy.cfg").await;
    assert!(
        workers.contains(&format!("server node-05 [{}]:30082\n", ipv6(5))),
        "{workers}"
    );
    std::fs::write(dir.path().join("w.cfg"), &workers).unwrap();
    run_check(
        Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(dir.path().join("w.cfg")),
    );

    // The jump host: hosts with BMC credentials, an ssh_config ssh accepts, authorized keys, host aliases.
    let hosts_json: Value =
        serde_json::from_str(&secret_text(&secrets, "tenant1-jump-host", "hosts").await).unwrap();
    assert_eq!(hosts_json.as_array().unwrap().len(), 7);
    assert_eq!(
        hosts_json[0],
        json!({"name": "node-00", "bmc": {"ip": "fd00:b::a", "username": "admin", "password": "pw-0"}})
    );
    let ssh_config = secret_text(&secrets, "tenant1-jump-host", "ssh_config").await;
    std::fs::write(dir.path().join("ssh_config"), &ssh_config).unwrap();
    let g = support::stdout(
        Command::new("ssh")
            .arg("-G")
            .arg("-F")
            .arg(dir.path().join("ssh_config"))
            .arg("node-06"),
    );
    assert!(
        g.lines().any(|l| l == format!("hostname {}", ipv4(6))),
        "{g}"
    );
    let keys = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("tenant1-jump-host-keys")
        .await
        .unwrap();
    assert!(keys.data.unwrap()["authorized_keys"].starts_with("ssh-ed25519 "));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let jump = deployments.get("tenant1-jump-host").await.unwrap();
    let pod = jump.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_aliases.unwrap().len(), 7);
    assert!(pod.volumes.unwrap().iter().any(|v| v
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.as_deref())
        == Some("tenant1-node-keys")));

    // Dex: its config carries the issuer and the static users.
    let dex: Value =
        serde_json::from_str(&secret_text(&secrets, "tenant1-auth", "config.yaml").await).unwrap();
    assert_eq!(dex["issuer"], "https://10.23.25.1:30556/dex");
    assert_eq!(dex["staticPasswords"][0]["email"], "ops@example.com");
    assert_eq!(dex["staticPasswords"][0]["username"], "ops");
    let ldap = &dex["connectors"][0];
    assert_eq!(
        (ldap["type"].as_str(), ldap["id"].as_str()),
        (Some("ldap"), Some("ldap"))
    );
    assert_eq!(ldap["config"]["host"], "ldap.site:636");
    assert_eq!(ldap["config"]["bindDN"], "cn=dex,dc=site");
    assert_eq!(ldap["config"]["bindPW"], "s3cret");
    assert_eq!(ldap["config"]["userSearch"]["baseDN"], "ou=people,dc=site");
    assert_eq!(ldap["config"]["groupSearch"]["baseDN"], "ou=groups,dc=site");
    assert_eq!(dex["enablePasswordDB"], true);

    // NodePort Services and endpoints in the status.
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
    let lb = svcs
        .get("tenant1-lb-control-plane")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(lb.type_.as_deref(), Some("NodePort"));
    assert_eq!(lb.ports.unwrap()[0].node_port, Some(30443));
    assert_eq!(
        svcs.get("tenant1-lb-worker")
            .await
            .unwrap()
            .spec
            .unwrap()
            .ports
            .unwrap()
            .len(),
        3
    );
    let endpoints: Vec<(String, String)> = st
        .endpoints
        .iter()
        .map(|e| (e.service.clone(), e.address.clone()))
        .collect();
    assert!(endpoints.contains(&(
        "loadBalancerControlPlane".into(),
        format!("tenant1-lb-control-plane.{ns}.svc:30443")
    )));
    assert_eq!(endpoints.len(), 4);

    // A claimed active disappears: the standby is promoted, a new standby found, the services follow.
    Api::<BareMetalHost>::namespaced(client.clone(), &ns)
        .delete("node-01", &DeleteParams::default())
        .await
        .unwrap();
    let s = until("node-01 replaced", || async {
        sips.get_opt("tenant1").await.unwrap().filter(|s| {
            s.status.as_ref().is_some_and(|st| {
                !st.replacements.is_empty() && ready(s).is_some_and(|r| r.0 == "True")
            })
        })
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(st.replacements[0].host, q("node-01"));
    assert_eq!(st.replacements[0].replaced_by, Some(q("node-03")));
    assert_eq!(
        st.hosts["ControlPlane"].active,
        [q("node-00"), q("node-02"), q("node-03")]
    );
    assert_eq!(st.hosts["ControlPlane"].standby.len(), 1);
    let new_standby = st.hosts["ControlPlane"].standby[0]
        .trim_start_matches(&format!("{ns}/"))
        .to_owned();
    assert!(!names(&t2).contains(&new_standby) && !names(&t4).contains(&new_standby));
    let cfg = until("the load balancer following the hosts", || async {
        let c = secret_text(&secrets, "tenant1-lb-control-plane", "haproxy.cfg").await;
        (c == haproxy_control_plane(&cp_nodes(&[0, 2, 3]), 30443, 6443)).then_some(c)
    })
    .await;
    assert!(!cfg.contains("node-01"));
    let rolled = deployments.get("tenant1-lb-control-plane").await.unwrap();
    let hash = rolled
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap()["sip.airshipit.org/config-hash"]
        .clone();
    assert!(!hash.is_empty());

    // A spec change lands: the auth service removed from the spec goes.
    sips.patch(
        "tenant1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"services": {"auth": null}}})),
    )
    .await
    .unwrap();
    until("the auth service gone", || async {
        (svcs.get_opt("tenant1-auth").await.unwrap().is_none()
            && deployments.get_opt("tenant1-auth").await.unwrap().is_none()
            && secrets.get_opt("tenant1-auth").await.unwrap().is_none())
        .then_some(())
    })
    .await;

    // Delete: labels off every host, no service objects left.
    sips.delete("tenant1", &DeleteParams::default())
        .await
        .unwrap();
    until("tenant1 gone", || async {
        sips.get_opt("tenant1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(claimed(&client, &ns, "tenant1").await.is_empty());
    assert!(deployments
        .list(&owned_by("tenant1"))
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(svcs
        .list(&owned_by("tenant1"))
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(secrets
        .list(&owned_by("tenant1"))
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .list(&owned_by("tenant1"))
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(
        claimed(&client, &ns, "tenant2").await,
        t2,
        "deleting tenant1 left tenant2 alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_reconcile_and_restarted_reaches_the_same_end_state() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "sip-restart").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 12, 4).await;
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    // Node ports are left to the apiserver here: a Service create cut off by SIGKILL can leave its explicit
    // nodePort allocated in kube-apiserver until its repair loop frees it minutes later, and the retry would
    // wait for that. (The lifecycle test covers explicit node ports.)
    let services = json!({
        "jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodeInterfaceId": "oam-ipv4"},
                     {"image": "quay.io/airshipit/jump-host:latest", "nodeInterfaceId": "oam-ipv6"}],
    });
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    sips.create(
        &PostParams::default(),
        &sip_cluster("t", (3, 1), (2, 1), services),
    )
    .await
    .unwrap();
    // SIGKILL as soon as the first host carries the cluster's label (the other claims not yet written), and
    // restart the same agent on the same data.
    until("a first claim", || async {
        let c = claimed(&client, &ns, "t").await;
        (!c.is_empty()).then_some(c)
    })
    .await;
    agent.kill();
    let partial = claimed(&client, &ns, "t").await;
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    // Again as soon as the first service object exists.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    until("a first service object", || async {
        let s = secrets.list(&owned_by("t")).await.unwrap().items;
        (!s.is_empty()).then_some(())
    })
    .await;
    agent.kill();
    let _agent = start_agent(tmp.path(), &ns, "agent-r");
    let deadline = tokio::time::Instant::now() + WAIT;
    let s = loop {
        let s = sips.get("t").await.unwrap();
        if ready(&s).is_some_and(|r| r.0 == "True") {
            break s;
        }
        if tokio::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(tmp.path().join("agent-r.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "not Ready after {WAIT:?}: {:?}\nagent log (newest first):\n{}",
                s.status,
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The end state of an uninterrupted reconcile.
    assert!(partial.len() <= 7);
    assert_eq!(
        claimed(&client, &ns, "t").await,
        [
            ("node-00".into(), "ControlPlane".into(), false),
            ("node-01".into(), "ControlPlane".into(), false),
            ("node-02".into(), "ControlPlane".into(), false),
            ("node-03".into(), "ControlPlane".into(), true),
            ("node-04".into(), "Worker".into(), false),
            ("node-05".into(), "Worker".into(), false),
            ("node-06".into(), "Worker".into(), true),
        ]
    );
    let st = s.status.unwrap();
    assert_eq!(st.hosts["Worker"].standby, [format!("{ns}/node-06")]);
    assert_eq!(st.endpoints.len(), 2);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let listed = deployments.list(&owned_by("t")).await.unwrap().items;
    let mut names: Vec<String> = listed.iter().map(|d| d.name_any()).collect();
    names.sort();
    assert_eq!(names, ["t-jump-host", "t-jump-host-1"]);
    // SIP's own generation label, not BPA's (which SIP objects once carried).
    for d in &listed {
        let labels = d.labels();
        assert_eq!(
            labels.get("sip.airshipit.org/generation"),
            Some(&s.metadata.generation.unwrap().to_string()),
            "{labels:?}"
        );
        assert!(
            !labels.contains_key("bpa.akraino.org/generation"),
            "{labels:?}"
        );
    }
    assert_eq!(
        Api::<Service>::namespaced(client.clone(), &ns)
            .list(&owned_by("t"))
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert!(s
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&"sip.airship.airshipit.org/finalizer".to_owned()));
}
