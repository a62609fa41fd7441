//! The ViNO reconciler against a real kube-apiserver: Node objects stand in for the hosts, the test plays the
//! DaemonSet controller (it patches the DaemonSet's status), and the BareMetalHosts are checked against Metal3's
//! own CRD.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::kube::{controller_agent, env, until};
use crate::support::Agent;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use foothold_agent::crd::metal3::BareMetalHost;
use foothold_agent::crd::vino::{IPPool, Vino};

pub(crate) async fn node(client: &kube::Client, name: &str, labels: Value, ip: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        )
        .await
        .unwrap();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [
            {"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}})),
        )
        .await
        .unwrap();
}

fn condition(v: &Vino, t: &str) -> Option<(String, String, String)> {
    v.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub(crate) fn start_agent(dir: &Path, ns: &str, identity: &str) -> Agent {
    controller_agent(dir, ns, identity, "vino", &env().agent_kubeconfig(), &[])
}

fn owned(name: &str) -> ListParams {
    ListParams::default().labels(&format!("vino.airshipit.org/vino={name}"))
}

/// BareMetalHost `name` claimed by Provisioning `c1` of `ns` and `provisioned`: it runs a node of that cluster.
async fn claimed_and_provisioned(bmhs: &Api<BareMetalHost>, name: &str, ns: &str) {
    let claim = json!({"spec": {"consumerRef": {
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning", "name": "c1", "namespace": ns}}});
    bmhs.patch(name, &PatchParams::default(), &Patch::Merge(claim))
        .await
        .unwrap();
    let status = json!({"status": {
        "errorCount": 0, "errorMessage": "", "operationalStatus": "OK", "poweredOn": true,
        "provisioningFailCount": 0, "provisioning": {"ID": "id", "state": "provisioned"}}});
    bmhs.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vino_publishes_vms_as_baremetalhosts_scales_down_and_cleans_up() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "vino-lifecycle").await;
    let tmp = tempfile::tempdir().unwrap();
    let (n1, n2, n3) = (format!("{ns}-a"), format!("{ns}-b"), format!("{ns}-c"));
    node(
        &client,
        &n1,
        json!({"vino-host": &ns, "rack": "r1"}),
        "10.0.0.11",
    )
    .await;
    node(
        &client,
        &n2,
        json!({"vino-host": &ns, "rack": "r2"}),
        "fd00:aa::12",
    )
    .await;
    node(&client, &n3, json!({"rack": "r3"}), "10.0.0.13").await;
    let _agent = start_agent(tmp.path(), &ns, "agent-v");

    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    let vino: Vino = serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
        "spec": {
            "nodeSelector": {"matchLabels": {"vino-host": ns}},
            "nodeLabelKeysToCopy": ["rack"],
            "bmcCredentials": {"username": "admin", "password": "redfish-pw"},
            "configuration": {"cpuExclude": "0-1"},
            "networks": [
                {"name": "oam", "subnet": "192.168.100.0/24", "staticAllocationStart": "192.168.100.10",
                 "staticAllocationStop": "192.168.100.50", "dhcpAllocationStart": "192.168.100.128",
                 "dhcpAllocationStop": "192.168.100.191", "instanceSubnetBitStep": 4, "macPrefix": "52:54:00",
                 "dns_servers": ["192.168.100.1"]},
                {"name": "prov", "subnet": "fd00:50::/64", "staticAllocationStart": "fd00:50::100",
                 "staticAllocationStop": "fd00:50::1ff", "dhcpAllocationStart": "fd00:50::1:0",
                 "dhcpAllocationStop": "fd00:50::1:ffff", "instanceSubnetBitStep": 8, "macPrefix": "52:54:01"},
            ],
            "nodes": [{"name": "worker", "count": 2, "bmhLabels": {"airshipit.org/k8s-role": "worker"},
                       "bootInterfaceName": "enp2s0",
                       "networkInterfaces": [{"name": "enp1s0", "network": "oam", "mtu": 1500},
                                             {"name": "enp2s0", "network": "prov"}],
                       "flavor": {"vcpus": 2, "memoryMiB": 4096, "rootDiskGb": 20}}],
        },
    }))
    .unwrap();
    vinos.create(&PostParams::default(), &vino).await.unwrap();

    // Published, waiting for the DaemonSet.
    let v = until("VMs published", || async {
        vinos
            .get_opt("v")
            .await
            .unwrap()
            .filter(|v| condition(v, "Ready").is_some_and(|c| c.1 == "DaemonSetNotReady"))
    })
    .await;
    let cred = condition(&v, "CredentialsInSecret").unwrap();
    assert_eq!(
        (cred.0.as_str(), cred.1.as_str()),
        ("False", "CopiedFromInline")
    );
    assert!(cred.2.contains("v-bmc-credentials"));
    let st = v.status.clone().unwrap();
    assert_eq!(
        st.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
        [n1.clone(), n2.clone()]
    );
    assert_eq!(st.nodes[0].vms.len(), 2);

    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let hosts = bmhs.list(&owned("v")).await.unwrap().items;
    // ViNO's own generation label, not BPA's (which ViNO objects once carried).
    for h in &hosts {
        let labels = h.labels();
        assert!(
            labels.contains_key("vino.airshipit.org/generation")
                && !labels.contains_key("bpa.akraino.org/generation"),
            "{labels:?}"
        );
    }
    let mut names: Vec<String> = hosts.iter().map(|h| h.name_any()).collect();
    names.sort();
    assert_eq!(
        names,
        [0, 1]
            .iter()
            .map(|i| format!("{ns}-v-{n1}-worker-{i}"))
            .chain([0, 1].iter().map(|i| format!("{ns}-v-{n2}-worker-{i}")))
            .collect::<Vec<_>>()
    );
    let h = bmhs.get(&format!("{ns}-v-{n2}-worker-1")).await.unwrap();
    let bmc = h.spec.bmc.clone().unwrap();
    assert_eq!(
        bmc.address,
        format!("redfish+http://[fd00:aa::12]:8000/redfish/v1/Systems/{n2}-worker-1")
    );
    assert_eq!(
        bmc.credentials_name,
        format!("{}-credentials", h.name_any())
    );
    assert_eq!(h.labels()["rack"], "r2");
    assert_eq!(h.labels()["airshipit.org/k8s-role"], "worker");
    assert_eq!(
        h.spec
            .root_device_hints
            .clone()
            .unwrap()
            .device_name
            .as_deref(),
        Some("/dev/vda")
    );
    let vm = &st.nodes[1].vms[1];
    assert_eq!(vm.bare_metal_host, h.name_any());
    let prov = vm.interfaces.iter().find(|i| i.network == "prov").unwrap();
    assert_eq!(h.spec.boot_mac_address.as_deref(), Some(prov.mac.as_str()));
    assert!(prov.mac.starts_with("52:54:01:") && prov.ip.starts_with("fd00:50::1"));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let text =
        |s: &Secret, k: &str| String::from_utf8(s.data.clone().unwrap()[k].0.clone()).unwrap();
    let creds = secrets.get(&bmc.credentials_name).await.unwrap();
    assert_eq!(
        (text(&creds, "username"), text(&creds, "password")),
        ("admin".into(), "redfish-pw".into())
    );
    let nd = secrets
        .get(&format!("{}-network-data", h.name_any()))
        .await
        .unwrap();
    let oam = vm.interfaces.iter().find(|i| i.network == "oam").unwrap();
    assert_eq!(
        foothold_agent::controllers::sip::configs::network_data_ip(
            &text(&nd, "networkData"),
            Some("oam")
        )
        .unwrap()
        .to_string(),
        oam.ip
    );

    // The address pools: every VM interface and node bridge once, no address or MAC twice.
    let pools: Api<IPPool> = Api::namespaced(client.clone(), &ns);
    for (pool, subnet) in [("v-oam", "192.168.100.0/24"), ("v-prov", "fd00:50::/64")] {
        let p = pools.get(pool).await.unwrap().spec;
        assert_eq!(p.subnet, subnet);
        assert_eq!(p.allocated_ips.len(), 4 + 2, "{pool}");
        assert_eq!(
            p.allocated_ips
                .iter()
                .map(|a| &a.ip)
                .collect::<BTreeSet<_>>()
                .len(),
            6
        );
        let macs: Vec<_> = p
            .allocated_ips
            .iter()
            .filter_map(|a| a.mac.clone())
            .collect();
        assert_eq!(macs.iter().collect::<BTreeSet<_>>().len(), 4);
        assert_eq!(p.allocated_ranges.len(), 2);
    }
    // The node plan for vino-builder.
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get(&format!("v-node-{n1}"))
        .await
        .unwrap();
    let plan: Value = serde_json::from_str(&cm.data.unwrap()["plan.json"]).unwrap();
    assert_eq!(plan["cpuExclude"], "0-1");
    assert_eq!(plan["vms"].as_array().unwrap().len(), 2);
    assert_eq!(plan["vms"][0]["memoryMiB"], 4096);
    assert_eq!(plan["networks"][0]["dhcpStart"], "192.168.100.128");
    assert_eq!(plan["networks"][0]["dhcpStop"], "192.168.100.143");

    // The DaemonSet becomes ready (the test plays its controller): Ready.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let ds = daemonsets.get("v-vino").await.unwrap();
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.node_selector.unwrap()["vino-host"], ns);
    assert_eq!(
        pod.containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["libvirt", "sushy", "vino-builder"]
    );
    daemonsets
        .patch_status("v-vino", &PatchParams::default(), &Patch::Merge(json!({"status": {
            "currentNumberScheduled": 2, "desiredNumberScheduled": 2, "numberMisscheduled": 0,
            "numberReady": 2, "numberAvailable": 2, "updatedNumberScheduled": 2, "observedGeneration": 1}})))
        .await
        .unwrap();
    until("Ready", || async {
        vinos
            .get_opt("v")
            .await
            .unwrap()
            .filter(|v| condition(v, "Ready").is_some_and(|c| c.0 == "True"))
    })
    .await;

    // The second VM of n2 runs a node of a Provisioning's cluster: its host claimed and provisioned.
    let held = format!("{ns}-v-{n2}-worker-1");
    claimed_and_provisioned(&bmhs, &held, &ns).await;

    // Scale down: the second VM of each node goes, with its Secrets and addresses; n2's only once its node
    // is drained (the BPA's mark, played here).
    vinos
        .patch("v", &PatchParams::default(), &Patch::Merge(json!({"spec": {"nodes": [
            {"name": "worker", "count": 1, "bmhLabels": {"airshipit.org/k8s-role": "worker"}, "bootInterfaceName": "enp2s0",
             "networkInterfaces": [{"name": "enp1s0", "network": "oam", "mtu": 1500}, {"name": "enp2s0", "network": "prov"}],
             "flavor": {"vcpus": 2, "memoryMiB": 4096, "rootDiskGb": 20}}]}})))
        .await
        .unwrap();
    let gone = format!("{ns}-v-{n1}-worker-1");
    until("n1's second VM gone", || async {
        bmhs.get_opt(&gone).await.unwrap().is_none().then_some(())
    })
    .await;
    let waiting = until("the scale-down waiting for a drain", || async {
        vinos
            .get_opt("v")
            .await
            .unwrap()
            .and_then(|v| condition(&v, "ScaledDown"))
            .filter(|c| c.1 == "WaitingForDrain")
    })
    .await;
    assert_eq!(waiting.0, "False");
    assert!(
        waiting.2.ends_with(&format!("BareMetalHost {held}")),
        "{}",
        waiting.2
    );
    let host = bmhs.get(&held).await.unwrap();
    assert_eq!(
        host.annotations()
            .get("bpa.akraino.org/drain")
            .map(String::as_str),
        Some(""),
        "the drain was not asked"
    );
    let plan = |node: String| {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        async move {
            let cm = maps.get(&format!("v-node-{node}")).await.unwrap();
            cm.data.unwrap().remove("plan.json").unwrap()
        }
    };
    assert!(
        plan(n2.clone()).await.contains(&format!("{n2}-worker-1")),
        "the held VM left n2's plan"
    );
    assert!(!plan(n1.clone()).await.contains(&format!("{n1}-worker-1")));
    bmhs.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
        "bpa.akraino.org/drained": format!("{n2}-worker-1")}}})),
    )
    .await
    .unwrap();
    until("scaled down", || async {
        (bmhs.list(&owned("v")).await.unwrap().items.len() == 2).then_some(())
    })
    .await;
    assert!(!plan(n2.clone()).await.contains(&format!("{n2}-worker-1")));
    let done = until("nothing leaving", || async {
        vinos
            .get_opt("v")
            .await
            .unwrap()
            .and_then(|v| condition(&v, "ScaledDown"))
            .filter(|c| c.1 == "NothingLeaving")
    })
    .await;
    assert_eq!(done.0, "True");
    until("its Secrets gone", || async {
        (secrets
            .get_opt(&format!("{gone}-credentials"))
            .await
            .unwrap()
            .is_none()
            && secrets
                .get_opt(&format!("{gone}-network-data"))
                .await
                .unwrap()
                .is_none())
        .then_some(())
    })
    .await;
    let p = pools.get("v-oam").await.unwrap().spec;
    assert_eq!(p.allocated_ips.len(), 2 + 2);
    assert!(!p
        .allocated_ips
        .iter()
        .any(|a| a.allocated_to.starts_with(&gone)));
    // The remaining VMs kept their addresses.
    let kept = bmhs.get(&format!("{ns}-v-{n2}-worker-0")).await.unwrap();
    let before = st.nodes[1].vms[0].interfaces.clone();
    let after = until("status after scaling", || async {
        vinos
            .get_opt("v")
            .await
            .unwrap()
            .and_then(|v| v.status)
            .filter(|s| s.nodes.iter().all(|n| n.vms.len() == 1))
    })
    .await;
    assert_eq!(after.nodes[1].vms[0].interfaces, before);
    let prov_mac = before
        .iter()
        .find(|i| i.network == "prov")
        .map(|i| i.mac.clone());
    assert_eq!(kept.spec.boot_mac_address, prov_mac);

    // Delete: n1's VM runs a node of a Provisioning's cluster, so nothing goes before its drain; then nothing
    // of the Vino is left.
    let node_host = format!("{ns}-v-{n1}-worker-0");
    claimed_and_provisioned(&bmhs, &node_host, &ns).await;
    vinos.delete("v", &DeleteParams::default()).await.unwrap();
    until("the drain asked for the deleted Vino's node", || async {
        let host = bmhs.get(&node_host).await.unwrap();
        host.annotations()
            .contains_key("bpa.akraino.org/drain")
            .then_some(())
    })
    .await;
    assert!(
        vinos.get_opt("v").await.unwrap().is_some(),
        "the Vino went before the drain"
    );
    assert!(
        plan(n1.clone()).await.contains(&format!("{n1}-worker-0")),
        "n1's plan emptied before the drain"
    );
    bmhs.patch(
        &node_host,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
        "bpa.akraino.org/drained": format!("{n1}-worker-0")}}})),
    )
    .await
    .unwrap();
    until("the Vino gone", || async {
        vinos.get_opt("v").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(bmhs.list(&owned("v")).await.unwrap().items.is_empty());
    assert!(secrets.list(&owned("v")).await.unwrap().items.is_empty());
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .list(&owned("v"))
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(daemonsets.list(&owned("v")).await.unwrap().items.is_empty());
    assert!(pools.list(&owned("v")).await.unwrap().items.is_empty());
    for n in [n1, n2, n3] {
        Api::<Node>::all(client.clone())
            .delete(&n, &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_reconcile_and_restarted_reaches_the_same_end_state() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "vino-restart").await;
    let tmp = tempfile::tempdir().unwrap();
    let n1 = format!("{ns}-a");
    node(&client, &n1, json!({"vino-host": &ns}), "10.0.1.11").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "metadata": {"name": "redfish"}, "stringData": {"username": "u", "password": "p"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    vinos
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
            "spec": {
                "nodeSelector": {"matchLabels": {"vino-host": ns}},
                "bmcCredentialsSecret": "redfish",
                "networks": [{"name": "oam", "subnet": "10.9.0.0/24", "staticAllocationStart": "10.9.0.10",
                              "staticAllocationStop": "10.9.0.99", "dhcpAllocationStart": "10.9.0.128",
                              "dhcpAllocationStop": "10.9.0.255"}],
                "nodes": [{"name": "w", "count": 6, "networkInterfaces": [{"name": "eth0", "network": "oam"}],
                           "flavor": {"vcpus": 1, "memoryMiB": 1024, "rootDiskGb": 10}}],
            },
        })).unwrap())
        .await
        .unwrap();
    // SIGKILL as soon as the address pool exists (before the VMs' objects), then as soon as the first
    // BareMetalHost exists; restart the same agent on the same data each time.
    let pools: Api<IPPool> = Api::namespaced(client.clone(), &ns);
    until("the address pool", || async {
        pools.get_opt("v-oam").await.unwrap()
    })
    .await;
    agent.kill();
    let first_pool = pools.get("v-oam").await.unwrap().spec;
    let mut agent = start_agent(tmp.path(), &ns, "agent-r");
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    until("a first BareMetalHost", || async {
        let l = bmhs.list(&owned("v")).await.unwrap().items;
        (!l.is_empty()).then_some(())
    })
    .await;
    agent.kill();
    let _agent = start_agent(tmp.path(), &ns, "agent-r");
    let v = until("every VM published", || async {
        vinos.get_opt("v").await.unwrap().filter(|v| {
            condition(v, "Ready").is_some_and(|c| c.1 == "DaemonSetNotReady")
                && v.status
                    .as_ref()
                    .is_some_and(|s| s.nodes.first().is_some_and(|n| n.vms.len() == 6))
        })
    })
    .await;
    // The same end state as one uninterrupted reconcile: six hosts, each with its two Secrets, the addresses
    // allocated before the kills unchanged, one pool entry per interface and bridge.
    let hosts = bmhs.list(&owned("v")).await.unwrap().items;
    assert_eq!(hosts.len(), 6);
    for h in &hosts {
        assert!(secrets
            .get_opt(&format!("{}-credentials", h.name_any()))
            .await
            .unwrap()
            .is_some());
        assert!(secrets
            .get_opt(&format!("{}-network-data", h.name_any()))
            .await
            .unwrap()
            .is_some());
    }
    let pool = pools.get("v-oam").await.unwrap().spec;
    assert_eq!(pool.allocated_ips.len(), 7);
    assert_eq!(
        pool.allocated_ips
            .iter()
            .map(|a| &a.ip)
            .collect::<BTreeSet<_>>()
            .len(),
        7
    );
    for a in &first_pool.allocated_ips {
        assert!(
            pool.allocated_ips.contains(a),
            "{a:?} changed across the restarts"
        );
    }
    let mut macs: Vec<String> = v.status.unwrap().nodes[0]
        .vms
        .iter()
        .map(|vm| vm.interfaces[0].mac.clone())
        .collect();
    macs.sort();
    macs.dedup();
    assert_eq!(macs.len(), 6);
    assert_eq!(
        Api::<DaemonSet>::namespaced(client.clone(), &ns)
            .list(&owned("v"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    vinos.delete("v", &DeleteParams::default()).await.unwrap();
    until("the Vino gone", || async {
        vinos.get_opt("v").await.unwrap().is_none().then_some(())
    })
    .await;
    Api::<Node>::all(client.clone())
        .delete(&n1, &DeleteParams::default())
        .await
        .unwrap();
}
