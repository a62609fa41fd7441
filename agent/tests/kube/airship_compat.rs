//! Airship's own habits, on the real apiserver through the agent binary: what an operator moving from Airship's
//! SIP brings (its finalizer in a SIPCluster's metadata, hosts that share an address) and what an older
//! Foothold left behind (SIPClusters under its former finalizer, Vinos under its former plural `vinos`), and
//! ICN's published BPA samples as they are.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use serde_json::json;

use crate::sip::{hosts, ipv4, ready, sip_cluster, start_agent};
use crate::support::kube::{controller_agent, env, until};
use foothold_agent::controllers::sip::{FINALIZER, FORMER_FINALIZER};
use foothold_agent::controllers::vino::{FINALIZER as VINO_FINALIZER, FORMER_CRD};
use foothold_agent::crd::bpa::Software;
use foothold_agent::crd::metal3::BareMetalHost;
use foothold_agent::crd::sip::SIPCluster;
use foothold_agent::crd::vino::Vino;

/// A SIPCluster as Airship's samples write it: with Airship's finalizer already in its metadata.
fn with_finalizer(mut s: SIPCluster, finalizer: &str) -> SIPCluster {
    s.metadata.finalizers = Some(vec![finalizer.to_owned()]);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_sharing_an_address_get_one_jump_host_alias_and_airships_finalizer_lets_deletion_end()
{
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-sip").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 2, 2).await;
    // node-01's oam-ipv4 address is node-00's, as two of Airship's sample hosts share theirs.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .patch(
            "node-01-network-data",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"networkData": format!(
                "networks:\n- id: oam-ipv4\n  ip_address: {}/24\n", ipv4(0)
            )}})),
        )
        .await
        .unwrap();
    let _agent = start_agent(tmp.path(), &ns, "agent-a");
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let services = json!({"jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodePort": 30000,
                                        "nodeInterfaceId": "oam-ipv4"}]});
    sips.create(
        &PostParams::default(),
        &with_finalizer(sip_cluster("shared", (1, 1), (0, 0), services), FINALIZER),
    )
    .await
    .unwrap();
    let s = until("SIPCluster shared Ready", || async {
        let s = sips.get("shared").await.ok()?;
        let (status, reason, message) = ready(&s)?;
        assert_ne!(reason, "InfraServiceFailure", "{message}");
        (status == "True").then_some(s)
    })
    .await;
    assert_eq!(s.finalizers(), [FINALIZER]);
    let pod = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("shared-jump-host")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let aliases: BTreeMap<String, Vec<String>> = pod
        .host_aliases
        .unwrap()
        .into_iter()
        .map(|a| (a.ip, a.hostnames.unwrap()))
        .collect();
    assert_eq!(
        aliases,
        BTreeMap::from([(ipv4(0), vec!["node-00".to_owned(), "node-01".to_owned()])])
    );

    sips.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    until("SIPCluster shared gone", || async {
        sips.get_opt("shared")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for h in ["node-00", "node-01"] {
        let labels = bmhs.get(h).await.unwrap().labels().clone();
        assert!(
            !labels.contains_key("sip.airshipit.org/cluster-name"),
            "{h}: {labels:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_under_the_former_finalizer_are_migrated_or_cleaned_up_and_deleted() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-sip-former").await;
    let tmp = tempfile::tempdir().unwrap();
    hosts(&client, &ns, 2, 2).await;
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    // What an older Foothold left: `old` holding node-00 and then deleted while no agent ran, `kept` alive.
    bmhs.patch(
        "node-00",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {
            "sip.airshipit.org/cluster-name": "old",
            "sip.airshipit.org/cluster-namespace": ns,
            "sip.airshipit.org/node-type": "ControlPlane",
        }}})),
    )
    .await
    .unwrap();
    for name in ["old", "kept"] {
        sips.create(
            &PostParams::default(),
            &with_finalizer(
                sip_cluster(name, (1, 0), (0, 0), json!({})),
                FORMER_FINALIZER,
            ),
        )
        .await
        .unwrap();
    }
    sips.delete("old", &DeleteParams::default()).await.unwrap();
    assert!(sips
        .get("old")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());

    let _agent = start_agent(tmp.path(), &ns, "agent-a");
    until("SIPCluster old cleaned up and gone", || async {
        sips.get_opt("old").await.unwrap().is_none().then_some(())
    })
    .await;
    let labels = bmhs.get("node-00").await.unwrap().labels().clone();
    assert_ne!(
        labels
            .get("sip.airshipit.org/cluster-name")
            .map(String::as_str),
        Some("old"),
        "{labels:?}"
    );
    until("SIPCluster kept under the current finalizer", || async {
        let s = sips.get("kept").await.ok()?;
        (s.finalizers() == [FINALIZER]).then_some(())
    })
    .await;
}

/// Creates `crd` and waits until it is established.
async fn establish(api: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition) {
    api.create(&PostParams::default(), crd).await.unwrap();
    crate::support::kube::established(api, crd.metadata.name.as_deref().unwrap()).await;
}

/// Deletes `name` of `api` and waits until it is gone.
async fn delete_and_wait<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default()).await.unwrap();
    until(&format!("{name} gone"), || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// A site an older Foothold ran: Vino served as `vinos`. The agent refuses to start ViNO, naming the fix; the
/// README's move (the Vino saved, its finalizer removed and deleted, the old CRD deleted, `vinoes` installed,
/// the Vino created again) brings it back under Airship's plural, reconciled. Its own control plane: the
/// former CRD would stop every other test's ViNO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_former_vinos_crd_stops_vino_with_the_fix_and_a_moved_vino_is_reconciled_as_vinoes() {
    use crate::support::kube::OwnPlane;
    let plane = tokio::task::spawn_blocking(|| OwnPlane::start("vinoes"))
        .await
        .unwrap();
    let client = plane.env.client().await;
    let ns = plane.env.namespace(&client, "vino-move").await;
    let tmp = tempfile::tempdir().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let current = Vino::crd();
    delete_and_wait(&crds, current.metadata.name.as_deref().unwrap()).await;
    let mut former = current.clone();
    former.metadata.name = Some(FORMER_CRD.into());
    former.spec.names.plural = "vinos".into();
    establish(&crds, &former).await;
    let resource = ApiResource {
        group: "airship.airshipit.org".into(),
        version: "v1".into(),
        api_version: "airship.airshipit.org/v1".into(),
        kind: "Vino".into(),
        plural: "vinos".into(),
    };
    let old: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let vino = json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino",
        "metadata": {"name": "v", "finalizers": [VINO_FINALIZER]},
        "spec": {
            "nodeSelector": {"matchLabels": {"vino-host": "none"}},
            "bmcCredentials": {"username": "admin", "password": "redfish-pw"},
            "networks": [{"name": "oam", "subnet": "192.168.100.0/24", "staticAllocationStart": "192.168.100.10",
                          "staticAllocationStop": "192.168.100.50", "macPrefix": "52:54:00:06:00:00"}],
        },
    });
    old.create(
        &PostParams::default(),
        &serde_json::from_value(vino.clone()).unwrap(),
    )
    .await
    .unwrap();

    let data = tmp.path().join("agent-v");
    let mut agent = controller_agent(
        tmp.path(),
        &ns,
        "agent-v",
        "vino",
        &plane.env.agent_kubeconfig(),
        &[],
    );
    let log = data.with_extension("log");
    let said = until("the agent refusing ViNO", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("ViNO not started").then_some(text)
    })
    .await;
    assert!(
        said.contains(&format!("the CRD {FORMER_CRD}"))
            && said.contains("--cascade=orphan")
            && said.contains("Moving Vinos to vinoes"),
        "{said}"
    );
    agent.kill();

    // The move, as the README gives it.
    let saved = old.get("v").await.unwrap();
    old.patch(
        "v",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    delete_and_wait(&old, "v").await;
    delete_and_wait(&crds, FORMER_CRD).await;
    establish(&crds, &current).await;
    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    let again: Vino = serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino",
        "metadata": {"name": "v"}, "spec": saved.data["spec"],
    }))
    .unwrap();
    vinos.create(&PostParams::default(), &again).await.unwrap();

    let _agent = controller_agent(
        tmp.path(),
        &ns,
        "agent-v2",
        "vino",
        &plane.env.agent_kubeconfig(),
        &[],
    );
    until("the moved Vino reconciled under vinoes", || async {
        let v = vinos.get("v").await.ok()?;
        let reconciled = v.finalizers() == [VINO_FINALIZER]
            && v.status.as_ref().is_some_and(|s| !s.conditions.is_empty());
        reconciled.then_some(())
    })
    .await;
    drop(plane);
}

/// Airship's node sets carry no flavor: their sizes come from the `vino-flavors` ConfigMap (its
/// `config/manager/flavors.yaml`: memory in GiB, root disk in GB, huge pages), by node set name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_set_without_a_flavor_is_sized_by_airships_vino_flavors() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "airship-flavors").await;
    let tmp = tempfile::tempdir().unwrap();
    let host = format!("{ns}-a");
    crate::vino::node(&client, &host, json!({"vino-host": &ns}), "10.0.0.21").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "vino-flavors"},
        "data": {"flavors.yaml": "flavors:\n  master:\n    vcpus: 1\n    memory: 4\n    hugepages: true\n    rootSize: 30\n  worker:\n    vcpus: 1\n    memory: 2\n    hugepages: true\n    rootSize: 10\n"},
    })).unwrap()).await.unwrap();
    let _agent = crate::vino::start_agent(tmp.path(), &ns, "agent-f");
    let vinos: Api<Vino> = Api::namespaced(client.clone(), &ns);
    vinos.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "Vino", "metadata": {"name": "v"},
        "spec": {
            "nodeSelector": {"matchLabels": {"vino-host": ns}},
            "bmcCredentials": {"username": "admin", "password": "passw0rd"},
            "networks": [{"name": "management", "subnet": "192.168.2.0/24",
                          "staticAllocationStart": "192.168.2.10", "staticAllocationStop": "192.168.2.24",
                          "dhcpAllocationStart": "192.168.2.128", "dhcpAllocationStop": "192.168.2.191",
                          "instanceSubnetBitStep": 4,
                          "macPrefix": "52:54:00:06:00:00"}],
            "nodes": [{"name": "worker", "count": 1,
                       "networkInterfaces": [{"name": "management", "network": "management", "mtu": 1500}]}],
        },
    })).unwrap()).await.unwrap();
    let v = until("the Vino planned", || async {
        let v = vinos.get("v").await.ok()?;
        let ready = v
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        Some((ready.reason, ready.message))
    })
    .await;
    assert_ne!(v.0, "InvalidSpec", "{}", v.1);
    let plan = crate::airship_vino::node_plan(&maps, &format!("v-node-{host}")).await;
    let vm = &plan["vms"][0];
    assert_eq!(
        (
            &vm["vcpus"],
            &vm["memoryMiB"],
            &vm["rootDiskGb"],
            &vm["hugepages"]
        ),
        (&json!(1), &json!(2048), &json!(10), &json!(true)),
        "{plan}"
    );
    assert!(
        vm["interfaces"][0]["mac"]
            .as_str()
            .unwrap()
            .starts_with("52:54:00:06:"),
        "{vm}"
    );
}

/// ICN's own BPA samples (`agent/tests/fixtures/icn`, unmodified): the apiserver takes them through Foothold's
/// CRDs, and the BPA reconciles them: each Provisioning over BareMetalHosts with its MACs gets its inventory and
/// installer Job (the KUD plugins in the Job's environment), and the Software waits for its cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icns_sample_provisionings_and_software_are_taken_as_they_are() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "icn-samples").await;
    let tmp = tempfile::tempdir().unwrap();
    for (name, mac, ip) in [
        ("m1", "00:c6:14:04:61:b2", "10.10.0.11"),
        ("w1", "00:c4:13:04:62:b5", "10.10.0.12"),
        ("k1", "00:e1:ba:ce:df:bd", "10.10.0.13"),
    ] {
        crate::hosts::bmh(
            &client,
            &ns,
            (name, mac, ip, 4, 8192, "provisioned"),
            json!({}),
        )
        .await;
    }
    let _agent = crate::bpa::start_agent(tmp.path(), &ns, "agent-icn");
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/icn");
    for (file, plural) in [
        (
            "bpa_v1alpha1_provisioning_cr_sample_multiple_1.yaml",
            "provisionings",
        ),
        ("provisioning_cr_kud_plugins_sample.yaml", "provisionings"),
        ("bpa_v1alpha1_software_cr.yaml", "softwares"),
    ] {
        let text = std::fs::read_to_string(fixtures.join(file)).unwrap();
        let obj: DynamicObject = serde_saphyr::from_str(&text).unwrap();
        let types = obj.types.clone().unwrap();
        let resource = ApiResource {
            group: "bpa.akraino.org".into(),
            version: "v1alpha1".into(),
            api_version: types.api_version,
            kind: types.kind,
            plural: plural.into(),
        };
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &resource)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let hosts = until("cluster-abc's inventory", || async {
        let cm = maps
            .get_opt("provisioning-test-1-inventory")
            .await
            .unwrap()?;
        cm.data?.remove("hosts.ini")
    })
    .await;
    for want in [
        "master-1 ansible_host=10.10.0.11",
        "worker-1 ansible_host=10.10.0.12",
    ] {
        assert!(hosts.contains(want), "{want:?} in {hosts}");
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = until("the KUD plugins sample's Job", || async {
        jobs.get_opt("sample-kud-plugins-install-g1").await.unwrap()
    })
    .await;
    let env_vars = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let kud = env_vars.iter().find(|e| e.name == "KUD_PLUGINS");
    assert_eq!(kud.and_then(|e| e.value.as_deref()), Some("onap4k8s"));
    // The two Provisionings reconcile independently: one's Job says nothing of the other's.
    until("the multiple-hosts sample's Job", || async {
        jobs.get_opt("provisioning-test-1-install-g1")
            .await
            .unwrap()
    })
    .await;

    let softwares: Api<Software> = Api::namespaced(client.clone(), &ns);
    let waiting = until("the sample Software waiting for cluster-xyz", || async {
        let s = softwares.get("sample-software").await.ok()?;
        let c = s
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ClusterReady")?;
        (c.status == "False").then_some(c.message)
    })
    .await;
    assert!(waiting.contains("cluster-xyz"), "{waiting}");
}

/// Airship SIP's published samples (`agent/tests/fixtures/airship/sip`, unmodified: the SIPCluster with its
/// finalizer, the six BareMetalHosts, their BMC and networkData Secrets, the SSH keys Secret) in their
/// namespace, the hosts `available` as BMO would report them. Their networkData give two hosts one oam-ipv4
/// address and four another. The SIPCluster goes Ready with two control-plane and two worker hosts and its
/// four services; deleting it completes and releases them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airships_sip_samples_schedule_run_their_services_and_delete() {
    let env = env();
    let client = env.client().await;
    let ns = "sipcluster-system";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/airship/sip");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let ssh: Secret = serde_saphyr::from_str(&read("ssh_private_keys_secret.yaml")).unwrap();
    secrets.create(&PostParams::default(), &ssh).await.unwrap();
    for doc in read("bmh_secrets.yaml").split("---\n") {
        let secret: Secret = serde_saphyr::from_str(doc).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    for doc in read("bmh.yaml").split("---\n") {
        let bmh: BareMetalHost = serde_saphyr::from_str(doc).unwrap();
        let name = bmh.name_any();
        bmhs.create(&PostParams::default(), &bmh).await.unwrap();
        bmhs.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {
            "errorCount": 0, "errorMessage": "", "operationalStatus": "OK", "poweredOn": false,
            "provisioningFailCount": 0, "provisioning": {"ID": format!("id-{name}"), "state": "available"},
        }})))
        .await
        .unwrap();
    }
    let _agent = start_agent(tmp.path(), ns, "agent-sample");
    let sips: Api<SIPCluster> = Api::namespaced(client.clone(), ns);
    let sample: SIPCluster =
        serde_saphyr::from_str(&read("airship_v1beta1_sipcluster.yaml")).unwrap();
    sips.create(&PostParams::default(), &sample).await.unwrap();
    let name = sample.name_any();
    until("the sample SIPCluster Ready", || async {
        let s = sips.get(&name).await.ok()?;
        let (status, reason, message) = ready(&s)?;
        assert_ne!(reason, "InfraServiceFailure", "{message}");
        (status == "True").then_some(())
    })
    .await;
    let mut roles: Vec<String> = bmhs
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("sip.airshipit.org/cluster-name={name}")),
        )
        .await
        .unwrap()
        .items
        .iter()
        .map(|h| h.labels()["sip.airshipit.org/node-type"].clone())
        .collect();
    roles.sort();
    assert_eq!(roles, ["ControlPlane", "ControlPlane", "Worker", "Worker"]);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&crate::sip::owned_by(&name))
        .await
        .unwrap()
        .items;
    assert_eq!(
        deployments.len(),
        4,
        "{:?}",
        deployments.iter().map(|d| d.name_any()).collect::<Vec<_>>()
    );

    sips.delete(&name, &DeleteParams::default()).await.unwrap();
    until("the sample SIPCluster gone", || async {
        sips.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    for h in bmhs.list(&Default::default()).await.unwrap().items {
        assert!(
            !h.labels().contains_key("sip.airshipit.org/cluster-name"),
            "{:?}",
            h.labels()
        );
    }
}
