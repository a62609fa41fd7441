//! The CRDs: the committed YAML is what `foothold-agent crds` prints, and the real apiserver accepts them,
//! serves their short names, and rejects specs their schemas forbid.

use crate::support;

use std::process::Command;

use crate::support::kube::env;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

#[test]
fn committed_crds_match_the_generated_ones() {
    let printed = support::stdout(Command::new(support::agent_bin()).arg("crds"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/foothold.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        printed == committed,
        "{} is stale: regenerate it with `cargo run -q -p foothold-agent -- crds > agent/crds/foothold.yaml`",
        path.display()
    );
}

fn api(
    client: &kube::Client,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    // The plural the CRD gives (`vinoes`), not kube's guess from the kind.
    let plural = foothold_agent::crd::shipped()
        .into_iter()
        .find(|c| c.spec.group == group && c.spec.names.kind == kind)
        .map_or_else(
            || format!("{}s", kind.to_lowercase()),
            |c| c.spec.names.plural,
        );
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn create(api: &Api<DynamicObject>, value: serde_json::Value) -> Result<(), String> {
    let obj: DynamicObject = serde_json::from_value(value).unwrap();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "a refused spec is 422 Invalid: {s:?}");
            Err(s.message)
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn provisioning(name: &str, masters: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning",
        "metadata": {"name": name},
        "spec": {"masters": masters, "KUDPlugins": ["ovn4nfv"], "PodSubnet": "10.244.64.0/18"},
    })
}

#[tokio::test]
async fn the_apiserver_validates_specs_with_the_crd_schemas() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "crd-validation").await;
    let prov = api(&client, &ns, "bpa.akraino.org", "v1alpha1", "Provisioning");

    create(
        &prov,
        provisioning(
            "ok",
            serde_json::json!([
                {"master-1": {"mac-address": "00:c6:14:04:61:b2", "cpu": 8, "memory": "16Gi"}}
            ]),
        ),
    )
    .await
    .expect("a valid Provisioning is accepted");

    for (name, masters, complaint) in [
        (
            "bad-mac",
            serde_json::json!([{"m": {"mac-address": "00:c6:14:04:61"}}]),
            "mac-address",
        ),
        (
            "no-mac",
            serde_json::json!([{"m": {"cpu": 4}}]),
            "mac-address",
        ),
        (
            "bad-memory",
            serde_json::json!([{"m": {"mac-address": "00:c6:14:04:61:b2", "memory": "lots"}}]),
            "memory",
        ),
        (
            "zero-cpu",
            serde_json::json!([{"m": {"mac-address": "00:c6:14:04:61:b2", "cpu": 0}}]),
            "cpu",
        ),
        (
            "two-hosts-in-one-entry",
            serde_json::json!([{
                "a": {"mac-address": "00:c6:14:04:61:b2"}, "b": {"mac-address": "00:c6:14:04:61:b3"}
            }]),
            "spec.masters[0]: Too many",
        ),
        (
            "empty-entry",
            serde_json::json!([{}]),
            "at least 1 properties",
        ),
    ] {
        let err = create(&prov, provisioning(name, masters))
            .await
            .expect_err(&format!("Provisioning {name} must be refused"));
        assert!(
            err.contains(complaint),
            "{name}: {err:?} does not mention {complaint:?}"
        );
    }

    let sip = api(&client, &ns, "airship.airshipit.org", "v1", "SIPCluster");
    let sip_spec = |role: &str| {
        serde_json::json!({
            "apiVersion": "airship.airshipit.org/v1", "kind": "SIPCluster",
            "metadata": {"name": format!("c-{}", role.to_lowercase())},
            "spec": {
                "nodes": {role: {"labelSelector": {"matchLabels": {"vino.airshipit.org/flavor": "master"}},
                                 "topologyKey": "sip.airshipit.org/rack", "count": {"active": 1, "standby": 1}}},
                "services": {"loadBalancerControlPlane": [{"image": "haproxy:2.6", "nodePort": 30000,
                                                            "nodeInterfaceId": "oam-ipv4"}]},
            },
        })
    };
    create(&sip, sip_spec("ControlPlane"))
        .await
        .expect("a valid SIPCluster is accepted");
    let err = create(&sip, sip_spec("Storage"))
        .await
        .expect_err("an unknown role is refused");
    assert!(
        err.contains("node roles are ControlPlane and Worker"),
        "{err}"
    );

    let vino = api(&client, &ns, "airship.airshipit.org", "v1", "Vino");
    create(&vino, serde_json::json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
        "spec": {"nodeSelector": {"matchLabels": {"beta.kubernetes.io/os": "linux"}},
                 "networks": [{"name": "management", "subnet": "192.168.2.0/20",
                               "dhcpAllocationStart": "192.168.2.10", "dhcpAllocationStop": "192.168.2.14",
                               "macPrefix": "52:54:00:06:00:00", "dns_servers": ["8.8.8.8"]}],
                 "nodes": [{"name": "master", "count": 1, "bootInterfaceName": "management",
                            "networkInterfaces": [{"name": "management", "type": "network",
                                                   "network": "management", "mtu": 1500}]}]},
    }))
    .await
    .expect("a valid Vino is accepted");
    let err = create(
        &vino,
        serde_json::json!({
            "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "neg"},
            "spec": {"nodes": [{"name": "master", "count": -1}]},
        }),
    )
    .await
    .expect_err("a negative VM count is refused");
    assert!(err.contains("count"), "{err}");
}

#[tokio::test]
async fn discovery_serves_short_names_and_the_status_subresource() {
    let client = env().client().await;
    for (gv, kind, short, status) in [
        ("bpa.akraino.org/v1alpha1", "Provisioning", "prov", true),
        ("bpa.akraino.org/v1alpha1", "Software", "sw", true),
        ("airship.airshipit.org/v1", "SIPCluster", "sipc", true),
        ("airship.airshipit.org/v1", "Vino", "vino", true),
        ("airship.airshipit.org/v1", "IPPool", "ippool", false),
        ("metal3.io/v1alpha1", "BareMetalHost", "bmh", true),
    ] {
        let list = client.list_api_group_resources(gv).await.unwrap();
        let main = list
            .resources
            .iter()
            .find(|r| r.kind == kind && !r.name.contains('/'))
            .unwrap_or_else(|| panic!("{kind} not served in {gv}"));
        assert!(
            main.short_names
                .as_ref()
                .is_some_and(|s| s.iter().any(|n| n == short)),
            "{kind}: short names {:?}",
            main.short_names
        );
        let has_status = list
            .resources
            .iter()
            .any(|r| r.name == format!("{}/status", main.name));
        assert_eq!(has_status, status, "{kind}: status subresource");
    }
}
