//! Airship ViNO's networkData templates and its published Vino sample on the real apiserver through the agent
//! binary: what the agent renders is what Go's own text/template with sprig (`gotmpl-oracle`) renders from
//! the same template over ViNO's values, which the test rebuilds from what the agent published (the VM's
//! interfaces in the Vino's status, the node's bridge address in the IPPool, the VNC password in its Secret).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{json, Value};

use crate::support::kube::{controller_agent, env, until, OwnPlane};
use foothold_agent::controllers::vino::airship::{template_values, VmValues};
use foothold_agent::crd::metal3::BareMetalHost;
use foothold_agent::crd::vino::{IPPool, Vino, VmStatus};
use foothold_agent::vino_plan::InterfacePlan;

fn fixture(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/airship")
            .join(path),
    )
    .unwrap()
}

/// ViNO's values for `vm` on `node`, from what the agent published.
async fn published_values(
    client: &kube::Client,
    ns: &str,
    vino: &Vino,
    node: &str,
    vm: &VmStatus,
) -> Value {
    let name = vino.metadata.name.as_deref().unwrap();
    let set = vino
        .spec
        .nodes
        .iter()
        .find(|s| vm.name.starts_with(&format!("{node}-{}-", s.name)))
        .unwrap();
    let interfaces: Vec<InterfacePlan> = set
        .network_interfaces
        .iter()
        .map(|i| {
            let a = vm
                .interfaces
                .iter()
                .find(|a| a.network == i.network)
                .unwrap();
            InterfacePlan {
                name: i.name.clone(),
                network: i.network.clone(),
                mac: a.mac.clone(),
                ip: Some(a.ip.clone()),
                ..InterfacePlan::default()
            }
        })
        .collect();
    let pools: Api<IPPool> = Api::namespaced(client.clone(), ns);
    let mut bridge_ips = BTreeMap::new();
    for net in &vino.spec.networks {
        let pool = pools.get(&format!("{name}-{}", net.name)).await.unwrap();
        let bridge = pool
            .spec
            .allocated_ips
            .iter()
            .find(|a| a.allocated_to == format!("node/{node}"));
        bridge_ips.insert(
            net.name.clone(),
            bridge.expect("the node's bridge address").ip.clone(),
        );
    }
    let vnc = match set.enable_vnc {
        false => None,
        true => {
            let s = Api::<Secret>::namespaced(client.clone(), ns)
                .get(&format!("{name}-vnc"))
                .await
                .unwrap();
            Some(String::from_utf8(s.data.unwrap()[&vm.name].0.clone()).unwrap())
        }
    };
    let boot = set
        .boot_interface_name
        .as_ref()
        .and_then(|b| interfaces.iter().find(|i| i.name == *b));
    let boot_mac = boot.or(interfaces.first()).map(|i| i.mac.clone());
    template_values(&VmValues {
        bmh: &vm.bare_metal_host,
        vm: &vm.name,
        set,
        networks: &vino.spec.networks,
        interfaces: &interfaces,
        boot_mac: boot_mac.as_deref(),
        bridge_ips: &bridge_ips,
        vnc_password: vnc.as_deref(),
    })
}

/// The node plan (`plan.json`) in ConfigMap `name`, once the agent wrote it.
pub(crate) async fn node_plan(maps: &Api<ConfigMap>, name: &str) -> Value {
    until("the node's plan", || async {
        let cm = maps.get_opt(name).await.unwrap()?;
        serde_json::from_str(&cm.data?["plan.json"]).ok()
    })
    .await
}

/// What Go's own text/template with sprig renders from `template` over `values`.
fn go_render(dir: &Path, template: &str, values: &Value) -> String {
    let (t, d) = (dir.join("t.tmpl"), dir.join("d.json"));
    std::fs::write(&t, template).unwrap();
    std::fs::write(&d, values.to_string()).unwrap();
    crate::support::stdout(
        std::process::Command::new(crate::support::tool("gotmpl-oracle"))
            .arg(&t)
            .arg(&d),
    )
}

/// The VM's networkData, once the agent wrote it.
async fn network_data(client: &kube::Client, ns: &str, bmh: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    until("the BareMetalHost's networkData", || async {
        let s = secrets
            .get_opt(&format!("{bmh}-network-data"))
            .await
            .unwrap()?;
        Some(String::from_utf8(s.data?["networkData"].0.clone()).unwrap())
    })
    .await
}

/// Airship's sample networkData template Secret (`agent/tests/fixtures/airship`, unmodified: Go's text/template
/// with sprig, in namespace `default`) named by a node set: the BareMetalHost's networkData Secret is what Go's
/// own text/template renders from the same template over ViNO's values for that VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airships_network_template_gives_the_network_data_go_gives() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-netdata").await;
    let tmp = tempfile::tempdir().unwrap();
    let host = format!("{ns}-a");
    crate::vino::node(&client, &host, json!({"vino-host": &ns}), "10.0.0.31").await;
    let sample: Secret = serde_saphyr::from_str(&fixture("network-template-secret.yaml")).unwrap();
    let template = sample.string_data.clone().unwrap()["template"].clone();
    let _ = Api::<Secret>::namespaced(client.clone(), "default")
        .delete("test-template", &DeleteParams::default())
        .await;
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    let _agent = crate::vino::start_agent(tmp.path(), &ns, "agent-n");
    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    let vino: Vino = serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
        "spec": {
            "nodeSelector": {"matchLabels": {"vino-host": ns}},
            "bmcCredentials": {"username": "admin", "password": "passw0rd"},
            "vmBridge": "lo", "daemonSetOptions": {"nodeAnnotatorImage": "quay.io/airshipit/nodelabeler"},
            "networks": [{"name": "management", "subnet": "192.168.2.0/24", "type": "ipv4",
                          "staticAllocationStart": "192.168.2.10", "staticAllocationStop": "192.168.2.24",
                          "dhcpAllocationStart": "192.168.2.128", "dhcpAllocationStop": "192.168.2.191",
                          "instanceSubnetBitStep": 4, "dns_servers": ["135.188.34.124"],
                          "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.168.2.1"},
                                     {"network": "10.0.0.0", "netmask": "255.255.255.0", "gateway": "$vinobridge"}],
                          "macPrefix": "52:54:00:06:00:00"}],
            "nodes": [{"name": "master", "count": 1, "bootInterfaceName": "management",
                       "networkDataTemplate": {"name": "test-template", "namespace": "default"},
                       "networkInterfaces": [{"name": "management", "type": "network", "network": "management",
                                              "mtu": 1500}],
                       "flavor": {"vcpus": 1, "memoryMiB": 1024, "rootDiskGb": 10}}],
        },
    }))
    .unwrap();
    vinos.create(&PostParams::default(), &vino).await.unwrap();
    let vm = until("the VM planned", || async {
        let v = vinos.get("v").await.ok()?;
        v.status?.nodes.first()?.vms.first().cloned()
    })
    .await;
    let rendered = network_data(&client, &ns, &vm.bare_metal_host).await;
    let values = published_values(&client, &ns, &vino, &host, &vm).await;
    assert_eq!(rendered, go_render(tmp.path(), &template, &values));
    let iface = &vm.interfaces[0];
    assert!(
        rendered.contains(&format!("ethernet_mac_address: {}", iface.mac)),
        "{rendered}"
    );
    assert!(
        rendered.contains(&format!("ip_address: {}", iface.ip)),
        "{rendered}"
    );
    // Airship's fields that change nothing here are named in a condition, not dropped.
    let v = vinos.get("v").await.unwrap();
    let c = v
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "FieldsHonoured")
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "WithoutEffect"),
        "{c:?}"
    );
    assert!(
        c.message.starts_with("vmBridge \"lo\": ")
            && c.message.contains("; daemonSetOptions.nodeAnnotatorImage"),
        "{c:?}"
    );
    // `$vinobridge` is the node's address on the bridge, as in Airship.
    let bridge = values["Networks"][0]["BridgeIP"].as_str().unwrap();
    assert!(bridge.starts_with("192.168.2."), "{values}");
    assert!(
        rendered.contains(&format!("gateway: {bridge}")),
        "{rendered}"
    );
}

/// Airship ViNO's published Vino sample (`agent/tests/fixtures/airship/vino`, unmodified) in a control plane
/// of its own (it selects every Linux node), with the sample's networkData template Secret and Airship's
/// flavors in `vino-flavors`, applied as `kubectl apply` would: the apiserver keeps every field of it under
/// `vinoes`, and the agent publishes the node's VM as a BareMetalHost whose networkData is what Go renders,
/// sized by Airship's flavor, on the bridge and routed network Airship's `management` template describes,
/// with its DHCP block in the `instanceSubnet` and its addresses in `allocationStart..allocationStop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airships_vino_sample_yields_a_baremetalhost_with_the_network_data_go_gives() {
    let plane = tokio::task::spawn_blocking(|| OwnPlane::start("vino-sample"))
        .await
        .unwrap();
    let client = plane.env.client().await;
    let tmp = tempfile::tempdir().unwrap();
    let ns = "default";
    let node = "rdm9r006c001";
    let labels = json!({"beta.kubernetes.io/os": "linux", "airshipit.org/server": "s6", "airshipit.org/rack": "r6"});
    crate::vino::node(&client, node, labels, "10.23.25.101").await;
    let sample: Secret =
        serde_saphyr::from_str(&fixture("vino/network-template-secret.yaml")).unwrap();
    let template = sample.string_data.clone().unwrap()["template"].clone();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    let flavors = json!({"metadata": {"name": "vino-flavors"}, "data": {"flavors.yaml": fixture("vino/flavors.yaml")}});
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(flavors).unwrap(),
    )
    .await
    .unwrap();
    let _agent = controller_agent(
        tmp.path(),
        ns,
        "agent-s",
        "vino",
        &plane.env.agent_kubeconfig(),
        &[],
    );

    let text = fixture("vino/vino_cr.yaml");
    let manifest: Value = serde_saphyr::from_str(&text).unwrap();
    let vinoes = ApiResource {
        group: "airship.airshipit.org".into(),
        version: "v1".into(),
        api_version: "airship.airshipit.org/v1".into(),
        kind: "Vino".into(),
        plural: "vinoes".into(),
    };
    let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &vinoes);
    raw.create(
        &PostParams::default(),
        &serde_json::from_value(manifest.clone()).unwrap(),
    )
    .await
    .unwrap();
    let stored = raw.get("vino-test-cr").await.unwrap();
    assert_eq!(
        stored.data["spec"], manifest["spec"],
        "the apiserver pruned part of the sample"
    );

    let vinos: Api<Vino> = Api::namespaced(client.clone(), ns);
    let (vino, vm) = until("the VM planned", || async {
        let v = vinos.get("vino-test-cr").await.ok()?;
        let vm = v.status.as_ref()?.nodes.first()?.vms.first()?.clone();
        Some((v, vm))
    })
    .await;
    let conditions = &vino.status.as_ref().unwrap().conditions;
    let invalid = conditions.iter().find(|c| c.reason == "InvalidSpec");
    assert!(invalid.is_none(), "{invalid:?}");
    let honoured = conditions
        .iter()
        .find(|c| c.type_ == "FieldsHonoured")
        .unwrap();
    assert_eq!(honoured.status, "True", "{honoured:?}");
    assert_eq!(vm.name, format!("{node}-master-0"));
    assert_eq!(
        vm.bare_metal_host,
        format!("default-vino-test-cr-{node}-master-0")
    );

    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    let bmh = until("the BareMetalHost", || async {
        hosts.get_opt(&vm.bare_metal_host).await.unwrap()
    })
    .await;
    let bmh_labels = bmh.metadata.labels.clone().unwrap();
    for (k, v) in [
        ("airshipit.org/k8s-role", "master"),
        ("airshipit.org/server", "s6"),
        ("airshipit.org/rack", "r6"),
    ] {
        assert_eq!(
            bmh_labels.get(k).map(String::as_str),
            Some(v),
            "{bmh_labels:?}"
        );
    }
    let iface = &vm.interfaces[0];
    assert_eq!(
        bmh.spec.boot_mac_address.as_deref(),
        Some(iface.mac.as_str())
    );
    assert!(iface.mac.starts_with("52:54:00:06:"), "{iface:?}");
    let ip: std::net::Ipv4Addr = iface.ip.parse().unwrap();
    assert!(
        (ip.octets()[2], ip.octets()[3]) >= (2, 10) && (ip.octets()[2], ip.octets()[3]) <= (2, 24),
        "{ip}"
    );

    let rendered = network_data(&client, ns, &vm.bare_metal_host).await;
    let values = published_values(&client, ns, &vino, node, &vm).await;
    assert_eq!(rendered, go_render(tmp.path(), &template, &values));
    for line in [
        format!("ethernet_mac_address: {}", iface.mac),
        format!("ip_address: {}", iface.ip),
        "netmask: 255.255.240.0".to_owned(),
        "type: bridge".to_owned(),
        "dns_nameservers: [135.188.34.124]".to_owned(),
    ] {
        assert!(rendered.contains(&line), "{line:?} not in\n{rendered}");
    }

    // The node's plan: Airship's flavor, and the network its `management` template describes.
    let plan = node_plan(&maps, &format!("vino-test-cr-node-{node}")).await;
    let v = &plan["vms"][0];
    assert_eq!(
        (
            &v["vcpus"],
            &v["memoryMiB"],
            &v["rootDiskGb"],
            &v["hugepages"],
            &v["enableVNC"]
        ),
        (
            &json!(1),
            &json!(4096),
            &json!(30),
            &json!(true),
            &json!(true)
        ),
        "{plan}"
    );
    let net = &plan["networks"][0];
    assert_eq!(
        (
            &net["bridge"],
            &net["routed"],
            &net["physicalInterface"],
            &net["prefixLength"]
        ),
        (
            &json!("vm-infra"),
            &json!(true),
            &json!("enp3s7"),
            &json!(20)
        ),
        "{plan}"
    );
    assert_eq!(net["ip"], values["Networks"][0]["BridgeIP"], "{plan}");
    assert_eq!(
        net.get("bootpFile"),
        None,
        "no pxeBootImageHost, no BOOTP file: {plan}"
    );
    let start: std::net::Ipv4Addr = net["dhcpStart"].as_str().unwrap().parse().unwrap();
    let stop: std::net::Ipv4Addr = net["dhcpStop"].as_str().unwrap().parse().unwrap();
    let (lo, hi) = (
        "192.168.4.4".parse::<std::net::Ipv4Addr>().unwrap(),
        "192.168.7.254".parse::<std::net::Ipv4Addr>().unwrap(),
    );
    assert!(lo <= start && start <= stop && stop <= hi, "{plan}");
    assert_eq!(plan["cpuExclude"], "0-1");
    drop(plane);
}
