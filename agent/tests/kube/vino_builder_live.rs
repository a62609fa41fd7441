//! `foothold-agent vino-builder` as a process beside the reconciler: it follows its node's plan with its own
//! account, reports on the plan, and on deletion removes its VMs before its DaemonSet goes.

use crate::support;
use crate::support::kube::{env, until};
use crate::vino::{node, start_agent};
use foothold_agent::crd::vino::Vino;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};

/// `foothold-agent vino-builder` on libvirt's test driver, killed on drop.
struct Builder(std::process::Child);

impl Drop for Builder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The builder's report on its plan ConfigMap.
async fn builder_status(maps: &Api<ConfigMap>, name: &str) -> Option<Value> {
    let cm = maps.get_opt(name).await.unwrap()?;
    let text = cm
        .annotations()
        .get("vino.airshipit.org/builder-status")?
        .clone();
    Some(serde_json::from_str(&text).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vino_builder_follows_the_node_plan_with_its_own_account() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "vino-builder").await;
    let tmp = tempfile::tempdir().unwrap();
    let n1 = format!("{ns}-a");
    node(&client, &n1, json!({"vino-host": &ns}), "10.0.0.21").await;
    let _agent = start_agent(tmp.path(), &ns, "agent-b");
    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    let vino: Vino = serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
        "spec": {
            "nodeSelector": {"matchLabels": {"vino-host": ns}},
            "bmcCredentials": {"username": "admin", "password": "redfish-pw"},
            "configuration": {"cpuExclude": "0"},
            "networks": [
                {"name": "oam", "subnet": "192.168.110.0/24", "staticAllocationStart": "192.168.110.10",
                 "staticAllocationStop": "192.168.110.50", "dhcpAllocationStart": "192.168.110.128",
                 "dhcpAllocationStop": "192.168.110.191", "instanceSubnetBitStep": 4, "macPrefix": "52:54:00"},
                {"name": "prov", "subnet": "fd00:60::/64", "staticAllocationStart": "fd00:60::100",
                 "staticAllocationStop": "fd00:60::1ff", "dhcpAllocationStart": "fd00:60::1:0",
                 "dhcpAllocationStop": "fd00:60::1:ffff", "instanceSubnetBitStep": 8, "macPrefix": "52:54:01"},
            ],
            "nodes": [{"name": "worker", "count": 2, "enableVNC": true,
                       "networkInterfaces": [{"name": "enp1s0", "network": "oam", "mtu": 9000},
                                             {"name": "enp2s0", "network": "prov"}],
                       "diskDrives": [{"name": "data", "type": "file", "options": {"sizeGb": 5}}],
                       "flavor": {"vcpus": 2, "memoryMiB": 2048, "rootDiskGb": 10}}],
        },
    }))
    .unwrap();
    vinos.create(&PostParams::default(), &vino).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let plan_map = format!("v-node-{n1}");
    // The reconciler writes the plans and the builder's account before the DaemonSet: wait for all three.
    let ds = until(
        "the node plan, the builder's account and the DaemonSet",
        || async {
            let plan = maps.get_opt(&plan_map).await.unwrap();
            let binding =
                Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns)
                    .get_opt("v-vino-builder")
                    .await
                    .unwrap();
            let ds = Api::<DaemonSet>::namespaced(client.clone(), &ns)
                .get_opt("v-vino")
                .await
                .unwrap();
            ds.filter(|_| plan.is_some() && binding.is_some())
        },
    )
    .await;
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("v-vino-builder"));
    let builder_container = pod
        .containers
        .iter()
        .find(|c| c.name == "vino-builder")
        .unwrap();
    assert_eq!(
        builder_container.image.as_deref(),
        Some("127.0.0.1:5000/foothold/vino-builder:latest")
    );

    // The builder runs as its ServiceAccount (impersonated), so the Role the reconciler wrote is what it has.
    let mut kubeconfig: Value =
        serde_json::from_str(&std::fs::read_to_string(&env.kubeconfig).unwrap()).unwrap();
    kubeconfig["users"][0]["user"]["as"] =
        json!(format!("system:serviceaccount:{ns}:v-vino-builder"));
    let kubeconfig_path = tmp.path().join("builder.kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig.to_string()).unwrap();
    let log = std::fs::File::create(tmp.path().join("builder.log")).unwrap();
    let _builder = Builder(
        std::process::Command::new(support::agent_bin())
            .arg("vino-builder")
            .arg("--kubeconfig")
            .arg(&kubeconfig_path)
            .args(["--node", &n1, "--namespace", &ns, "--vino", "v"])
            .args(["--connect", "test:///default", "--host-cpus", "0-3"])
            .arg("--work-dir")
            .arg(tmp.path().join("work"))
            .arg("--pool-dir")
            .arg(tmp.path().join("pool"))
            .env("FOOTHOLD_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let vm = |i: u32| format!("{n1}-worker-{i}");
    let status = until("the builder's report of two domains", || async {
        builder_status(&maps, &plan_map)
            .await
            .filter(|s| s["domains"] == json!([vm(0), vm(1)]))
    })
    .await;
    assert_eq!(status["error"], Value::Null, "{status}");
    assert_eq!(
        status["networks"],
        json!([format!("vino-{ns}-v-oam"), format!("vino-{ns}-v-prov")])
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let vnc = secrets.get("v-vnc").await.unwrap().data.unwrap();
    assert_eq!(vnc.keys().cloned().collect::<Vec<_>>(), [vm(0), vm(1)]);
    assert!(vnc.values().all(|p| p.0.len() == 8));
    assert_ne!(vnc[&vm(0)].0, b"redfish-pw".to_vec());

    // Scaled down: the plan changes, the builder follows it without a resync.
    vinos
        .patch(
            "v",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"nodes": [{"name": "worker", "count": 1, "enableVNC": true,
                "networkInterfaces": [{"name": "enp1s0", "network": "oam", "mtu": 9000},
                                      {"name": "enp2s0", "network": "prov"}],
                "diskDrives": [{"name": "data", "type": "file", "options": {"sizeGb": 5}}],
                "flavor": {"vcpus": 2, "memoryMiB": 2048, "rootDiskGb": 10}}]}}),
            ),
        )
        .await
        .unwrap();
    until("the builder's report of one domain", || async {
        builder_status(&maps, &plan_map)
            .await
            .filter(|s| s["domains"] == json!([vm(0)]))
    })
    .await;
    let vnc = secrets.get("v-vnc").await.unwrap().data.unwrap();
    assert_eq!(vnc.keys().cloned().collect::<Vec<_>>(), [vm(0)]);

    // A plan the host cannot satisfy is reported on the plan, with the reason.
    vinos
        .patch(
            "v",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": {"cpuExclude": "0-3"}}})),
        )
        .await
        .unwrap();
    let status = until("the builder's error", || async {
        builder_status(&maps, &plan_map)
            .await
            .filter(|s| s["error"].is_string())
    })
    .await;
    assert!(
        status["error"]
            .as_str()
            .unwrap()
            .contains("cpuExclude 0-3 leaves none of the host's CPUs (0-3)"),
        "{status}"
    );
    // Satisfiable again, then deleted. A builder pod dies with its DaemonSet: this one is killed as the
    // DaemonSet goes. The reconciler empties the plans first and keeps the DaemonSet until the builder reports
    // its VMs and networks removed, so nothing is left in libvirt.
    vinos
        .patch(
            "v",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": {"cpuExclude": "0"}}})),
        )
        .await
        .unwrap();
    until("the builder's report of one domain again", || async {
        builder_status(&maps, &plan_map)
            .await
            .filter(|s| s["domains"] == json!([vm(0)]) && s["error"].is_null())
    })
    .await;
    let daemonsets = Api::<DaemonSet>::namespaced(client.clone(), &ns);
    let builder = std::sync::Mutex::new(Some(_builder));
    // The plan's last state is what its deletion event carries: a watch sees it whatever the timing, where
    // polling could miss a report the reconciler acted on at once.
    let from = maps
        .get(&plan_map)
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    let watch = WatchParams::default()
        .fields(&format!("metadata.name={plan_map}"))
        .timeout(120);
    let mut events = maps.watch(&watch, &from).await.unwrap().boxed();
    let deleted = tokio::spawn(async move {
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Deleted(cm) => return cm,
                WatchEvent::Error(e) => panic!("watching the plan: {e:?}"),
                _ => {}
            }
        }
        panic!("the plan's watch ended before the plan was deleted");
    });
    // The builder paused, the deletion waits for it: the plan is emptied, the reconciler says it waits, and the
    // DaemonSet and the plan stay (without the drain they go at once, with the builder's last report on the plan
    // still naming its VM).
    let pid = builder.lock().unwrap().as_ref().unwrap().0.id().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {name} {pid}: {status}");
    };
    signal("-STOP");
    vinos.delete("v", &DeleteParams::default()).await.unwrap();
    let agent_log = tmp.path().join("agent-b.log");
    until("the reconciler waiting for the paused builder", || async {
        let log = std::fs::read_to_string(&agent_log).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("cleanup waits") && l.contains(&n1))
            .then_some(())
    })
    .await;
    let plan = maps.get(&plan_map).await.unwrap();
    let planned: Value = serde_json::from_str(&plan.data.unwrap()["plan.json"]).unwrap();
    assert_eq!(
        (&planned["vms"], &planned["networks"]),
        (&json!([]), &json!([]))
    );
    assert!(daemonsets.get_opt("v-vino").await.unwrap().is_some());
    signal("-CONT");
    until("the Vino gone", || async {
        if daemonsets.get_opt("v-vino").await.unwrap().is_none() {
            drop(builder.lock().unwrap().take()); // killed with its DaemonSet
        }
        vinos.get_opt("v").await.unwrap().is_none().then_some(())
    })
    .await;
    drop(builder);
    let plan = tokio::time::timeout(std::time::Duration::from_secs(60), deleted)
        .await
        .expect("the plan's deletion event within 60 s of the Vino's")
        .unwrap();
    let last: Value = serde_json::from_str(
        plan.annotations()
            .get("vino.airshipit.org/builder-status")
            .expect("the deleted plan has the builder's report"),
    )
    .unwrap();
    assert_eq!(
        (&last["domains"], &last["networks"]),
        (&json!([]), &json!([])),
        "the plan went before its builder reported the VMs removed: {last}"
    );
    let log = std::fs::read_to_string(tmp.path().join("builder.log")).unwrap();
    let removed = log
        .lines()
        .filter(|l| l.contains("libvirt updated"))
        .any(|l| l.contains(&format!(r#""domainsRemoved":["{}"]"#, vm(0))));
    assert!(removed, "the builder never removed {}:\n{log}", vm(0));
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let gone = (
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get_opt("v-vino-builder")
            .await
            .unwrap(),
        Api::<Role>::namespaced(client.clone(), &ns)
            .get_opt("v-vino-builder")
            .await
            .unwrap(),
        Api::<RoleBinding>::namespaced(client.clone(), &ns)
            .get_opt("v-vino-builder")
            .await
            .unwrap(),
        secrets.get_opt("v-vnc").await.unwrap(),
    );
    assert!(
        gone.0.is_none() && gone.1.is_none() && gone.2.is_none() && gone.3.is_none(),
        "left behind: {gone:?}"
    );
    Api::<Node>::all(client.clone())
        .delete(&n1, &DeleteParams::default())
        .await
        .unwrap();
}
