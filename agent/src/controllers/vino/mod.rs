//! The ViNO reconciler for `Vino` (airship.airshipit.org/v1): VMs on the selected Kubernetes nodes, each
//! published as a Metal3 BareMetalHost with a Redfish BMC (sushy-tools on the node).
//!
//! Observe (the Vino, the selected Nodes, its IPPools, BareMetalHosts, DaemonSet) → plan (VMs, flavors,
//! `vino_ipam`) → apply:
//! - IPPool `<vino>-<network>` per network, replaced with its resourceVersion as a precondition;
//! - the BMC credentials Secret (`bmcCredentialsSecret`, or `<vino>-bmc-credentials` copied from the inline
//!   `bmcCredentials`, which the status then reports);
//! - a ConfigMap `<vino>-node-<node>` per node with the node's VM plan (`plan.json`) for `vino-builder`;
//! - a Secret `<vino>-vnc` with a generated password per VNC-enabled VM (key: the VM name), kept across
//!   reconciles;
//! - the DaemonSet (libvirt, sushy-tools and vino-builder) on the selected nodes, with a ServiceAccount whose
//!   Role lets `vino-builder` read and annotate the plans and read the VNC Secret;
//! - per VM a BareMetalHost `<ns>-<vino>-<node>-<nodeset>-<i>` with `<bmh>-credentials` and
//!   `<bmh>-network-data` Secrets.
//!
//! Objects no longer planned (a node set scaled down, a node unlabelled) are deleted and their addresses
//! released; deleting the Vino removes everything (finalizer `vino.airshipit.org`). Readiness of the DaemonSet
//! comes from watching it.
//!
//! networkData templates (`nodes[].networkDataTemplate`: a Secret, key `template`) are minijinja templates with
//! the variables `name` (the BareMetalHost), `node`, `vm`, and `interfaces`: a list of `{name, network, mac,
//! ip, prefix_length, type, mtu, dns_servers, routes}` (`routes`: `{network, netmask, gateway}`). Without a
//! template the networkData is OpenStack network_data JSON with a link and a network per interface.

pub mod ipam;
pub mod plan;

pub use self::plan::{
    bmc_address, plan_vms, render_network_data, resolve_flavor, Vm, REDFISH_PORT,
};
use self::plan::{bridge_name, disk_plan, node_ip, prefix_len, vnc_password};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams, ResourceExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use serde_json::json;

use self::ipam::{Ranges, Wanted};
use super::common::child_name;
use super::common::report::{report, Headline};
use super::common::secrets;
use super::common::{
    apply_account, delete_ignoring_missing, delete_owned, owned_meta, publish, scoped_api,
    server_side_apply, set_conditions, Base, Error,
};
use super::common::{every, run as run_controller, Reconciler};
use super::settings::Settings;
use crate::crd::metal3::BareMetalHost;
use crate::crd::vino::{
    AllocatedIp, IPPool, IPPoolSpec, NodeVms, Vino, VinoStatus, VmInterface, VmStatus,
};
use crate::metrics::Metrics;
use crate::vino_plan::{InterfacePlan, NetworkPlan, Plan, VmPlan};

pub const FINALIZER: &str = "vino.airshipit.org";
/// On every object the reconciler creates: the Vino's name.
pub const OWNER_LABEL: &str = "vino.airshipit.org/vino";
/// On per-node objects: the node.
pub const NODE_LABEL: &str = "vino.airshipit.org/node";

struct Ctx {
    base: Base,
}

/// Runs the Vino controller until it is dropped.
pub async fn run(client: kube::Client, settings: Arc<Settings>, metrics: Arc<Metrics>) {
    let ns = &settings.namespace;
    let owned = watcher::Config::default().labels(OWNER_LABEL);
    let ctx = Arc::new(Ctx {
        base: Base::new("vino", client.clone(), settings.clone(), metrics),
    });
    let controller = Controller::new(scoped_api::<Vino>(&client, ns), watcher::Config::default());
    let store = controller.store();
    let controller = controller
        .owns(scoped_api::<DaemonSet>(&client, ns), owned.clone())
        .owns(scoped_api::<BareMetalHost>(&client, ns), owned.clone())
        .owns(scoped_api::<ConfigMap>(&client, ns), owned.clone())
        .owns(scoped_api::<IPPool>(&client, ns), owned)
        // A node labelled, unlabelled or readdressed changes every Vino's plan.
        .watches(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            move |_: Node| every(&store, |_| true),
        );
    run_controller(controller, ctx).await;
}

impl Reconciler for Ctx {
    type Object = Vino;
    const FINALIZER: &'static str = FINALIZER;

    fn base(&self) -> &Base {
        &self.base
    }

    async fn apply(&self, vino: &Vino, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let generation = vino.metadata.generation.unwrap_or(0);
        let old = vino.status.clone().unwrap_or_default();
        let mut status = VinoStatus {
            conditions: old.conditions.clone(),
            observed_generation: Some(generation),
            ..VinoStatus::default()
        };
        let result = realise(vino, ns, ctx, &mut status).await;
        let (ready, reason, message) = match &result {
            Ok(Ok(ready_ds)) => {
                if *ready_ds {
                    (
                        true,
                        "Ready",
                        "the DaemonSet is ready and every VM is published".to_owned(),
                    )
                } else {
                    (
                        false,
                        "DaemonSetNotReady",
                        "waiting for the DaemonSet".to_owned(),
                    )
                }
            }
            Ok(Err(Invalid(m))) => (false, "InvalidSpec", m.clone()),
            Err(e) => (false, "ReconcileError", e.to_string()),
        };
        set_conditions(
            &mut status.conditions,
            generation,
            &[("Ready", ready, reason, &message)],
        );
        let old_reason = old
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.as_str());
        report(
            &ctx.base,
            vino,
            ns,
            Headline {
                before: old_reason,
                now: reason,
                warning: !(ready || reason == "DaemonSetNotReady"),
                note: &message,
            },
            &status,
        )
        .await?;
        // A spec that cannot be realised waits for a change (or the periodic requeue); API errors back off.
        result.map(|_| Action::requeue(Duration::from_secs(300)))
    }

    /// Removes every object of the Vino (it does not rely on a garbage collector), its address pools included.
    async fn cleanup(&self, vino: &Vino, ns: &str) -> Result<Action, Error> {
        let ctx = self;
        let name = vino.name_any();
        let c = &ctx.base.client;
        delete_owned(
            &Api::<BareMetalHost>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<DaemonSet>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<ConfigMap>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<Secret>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<RoleBinding>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<Role>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<ServiceAccount>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        delete_owned(
            &Api::<IPPool>::namespaced(c.clone(), ns),
            OWNER_LABEL,
            &name,
            None,
        )
        .await?;
        publish(
            &ctx.base.recorder,
            vino,
            EventType::Normal,
            "Deleted",
            "removed the VMs' BareMetalHosts, Secrets, plans, DaemonSet and address pools",
        )
        .await;
        Ok(Action::await_change())
    }
}

/// Why the Vino cannot be realised as specified.
struct Invalid(String);

/// Applies everything; `Ok(Ok(daemonset_ready))`, or `Ok(Err(_))` for a spec that cannot be realised.
async fn realise(
    vino: &Vino,
    ns: &str,
    ctx: &Ctx,
    status: &mut VinoStatus,
) -> Result<Result<bool, Invalid>, Error> {
    let client = &ctx.base.client;
    let name = vino.name_any();
    let generation = vino.metadata.generation.unwrap_or(0);
    let spec = &vino.spec;

    // Credentials.
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let (credentials, inline) = match (&spec.bmc_credentials_secret, &spec.bmc_credentials) {
        (Some(s), _) => (s.clone(), false),
        (None, Some(c)) => {
            let s = child_name(&name, "bmc-credentials");
            server_side_apply(
                &secret_api,
                &s,
                json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": owned_meta(vino, OWNER_LABEL, ns, &s), "type": "Opaque",
                "stringData": {"username": c.username, "password": c.password}}),
            )
            .await?;
            (s, true)
        }
        (None, None) => {
            return Ok(Err(Invalid(
                "bmcCredentialsSecret (or the inline bmcCredentials) is required".into(),
            )))
        }
    };
    let cred = match (
        secrets::read(client, ns, &credentials, "username").await?,
        secrets::read(client, ns, &credentials, "password").await?,
    ) {
        (Ok(u), Ok(p)) => (u, p),
        (Err(why), _) | (_, Err(why)) => return Ok(Err(Invalid(why))),
    };
    set_conditions(
        &mut status.conditions,
        generation,
        &[(
            "CredentialsInSecret",
            !inline,
            if inline {
                "CopiedFromInline"
            } else {
                "SecretReferenced"
            },
            &if inline {
                format!("the inline bmcCredentials were copied into Secret {credentials}; reference it with bmcCredentialsSecret and drop them from the spec")
            } else {
                format!("BMC credentials from Secret {credentials}")
            },
        )],
    );

    // Nodes.
    let selector: Vec<String> = spec
        .node_selector
        .as_ref()
        .map(|s| {
            s.match_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
        .unwrap_or_default();
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&selector.join(",")))
        .await?
        .items;
    nodes.sort_by_key(|n| n.name_any());
    let node_names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    let vms = plan_vms(ns, &name, &node_names, &spec.nodes);

    // Flavors.
    let flavors: BTreeMap<String, String> = match &spec.flavors_config_map {
        None => BTreeMap::new(),
        Some(cm) => match Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(cm)
            .await?
        {
            Some(c) => c.data.unwrap_or_default(),
            None => return Ok(Err(Invalid(format!("flavorsConfigMap {cm} not found")))),
        },
    };
    let mut sizes = BTreeMap::new();
    for set in &spec.nodes {
        match resolve_flavor(&set.name, set.flavor.as_ref(), &flavors) {
            Ok(f) => {
                sizes.insert(set.name.clone(), f);
            }
            Err(e) => return Ok(Err(Invalid(e))),
        }
    }

    // IPAM, one pool per network.
    let pools: Api<IPPool> = Api::namespaced(client.clone(), ns);
    let mut addresses: BTreeMap<String, BTreeMap<String, AllocatedIp>> = BTreeMap::new(); // network → key → ip
    let mut blocks: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
    for net in &spec.networks {
        let ranges = match Ranges::new(
            &net.subnet,
            net.static_allocation_start
                .as_deref()
                .zip(net.static_allocation_stop.as_deref()),
            net.dhcp_allocation_start
                .as_deref()
                .zip(net.dhcp_allocation_stop.as_deref()),
            net.instance_subnet_bit_step,
            net.mac_prefix.as_deref(),
        ) {
            Ok(r) => r,
            Err(e) => return Ok(Err(Invalid(format!("network {}: {e}", net.name)))),
        };
        let wanted = Wanted {
            interfaces: vms
                .iter()
                .filter(|vm| {
                    spec.nodes.iter().any(|s| {
                        s.name == vm.node_set
                            && s.network_interfaces.iter().any(|i| i.network == net.name)
                    })
                })
                .map(|vm| format!("{}/{}", vm.bmh, net.name))
                .collect(),
            nodes: node_names.iter().cloned().collect(),
        };
        let pool_name = child_name(&name, &net.name);
        let existing = pools.get_opt(&pool_name).await?;
        let spec_now = existing
            .as_ref()
            .map(|p| p.spec.clone())
            .unwrap_or_default();
        let alloc = match ipam::allocate(
            &ranges,
            &spec_now.allocated_ips,
            &spec_now.allocated_ranges,
            &wanted,
        ) {
            Ok(a) => a,
            Err(e) => return Ok(Err(Invalid(format!("network {}: {e}", net.name)))),
        };
        let new_spec = IPPoolSpec {
            subnet: net.subnet.clone(),
            ranges: spec_now.ranges.clone(),
            allocated_ips: alloc.ips.clone(),
            allocated_ranges: alloc.ranges.clone(),
            mac_prefix: net.mac_prefix.clone(),
            next_mac: None,
        };
        match existing {
            None => {
                let mut pool = IPPool::new(&pool_name, new_spec);
                pool.metadata =
                    serde_json::from_value(owned_meta(vino, OWNER_LABEL, ns, &pool_name))
                        .expect("metadata is well-formed");
                pools.create(&PostParams::default(), &pool).await?;
            }
            Some(mut pool) if pool.spec != new_spec => {
                // `replace` sends the resourceVersion read above: a concurrent writer makes this a 409.
                pool.spec = new_spec;
                pools
                    .replace(&pool_name, &PostParams::default(), &pool)
                    .await?;
            }
            Some(_) => {}
        }
        addresses.insert(
            net.name.clone(),
            alloc
                .ips
                .into_iter()
                .map(|a| (a.allocated_to.clone(), a))
                .collect(),
        );
        blocks.insert(
            net.name.clone(),
            alloc
                .ranges
                .into_iter()
                .map(|r| (r.allocated_to, (r.start, r.stop)))
                .collect(),
        );
    }
    // Pools of networks removed from the spec.
    for pool in pools
        .list(&ListParams::default().labels(&format!("{OWNER_LABEL}={name}")))
        .await?
        .items
    {
        if !spec
            .networks
            .iter()
            .any(|n| child_name(&name, &n.name) == pool.name_any())
        {
            delete_ignoring_missing(&pools, &pool.name_any()).await?;
        }
    }

    // Per VM: Secrets and the BareMetalHost; per node: the plan ConfigMap.
    let bmhs: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut node_status: BTreeMap<String, Vec<VmStatus>> = BTreeMap::new();
    let mut node_plans: BTreeMap<String, Vec<VmPlan>> = BTreeMap::new();
    let mut templates: BTreeMap<String, Option<String>> = BTreeMap::new();
    for set in &spec.nodes {
        let t = match &set.network_data_template {
            None => None,
            Some(r) => {
                let sns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
                match secrets::read(client, &sns, &r.name, "template").await? {
                    Ok(t) => Some(t),
                    Err(why) => return Ok(Err(Invalid(format!("node set {}: {why}", set.name)))),
                }
            }
        };
        templates.insert(set.name.clone(), t);
    }
    for vm in &vms {
        let node = nodes
            .iter()
            .find(|n| n.name_any() == vm.node)
            .expect("planned from nodes");
        let Some(ip) = node_ip(node) else {
            return Ok(Err(Invalid(format!(
                "node {} has no InternalIP address",
                vm.node
            ))));
        };
        let set = spec
            .nodes
            .iter()
            .find(|s| s.name == vm.node_set)
            .expect("planned from sets");
        let mut interfaces = Vec::new();
        for iface in &set.network_interfaces {
            let Some(net) = spec.networks.iter().find(|n| n.name == iface.network) else {
                return Ok(Err(Invalid(format!(
                    "node set {}: interface {} names unknown network {}",
                    set.name, iface.name, iface.network
                ))));
            };
            let a = &addresses[&net.name][&format!("{}/{}", vm.bmh, net.name)];
            interfaces.push(InterfacePlan {
                name: iface.name.clone(),
                network: net.name.clone(),
                mac: a.mac.clone().unwrap_or_default(),
                ip: Some(a.ip.clone()),
                prefix_length: prefix_len(&net.subnet),
                kind: iface.kind.clone(),
                mtu: iface.mtu.and_then(|m| u32::try_from(m).ok()),
                dns_servers: net.dns_servers.clone(),
                routes: net.routes.clone(),
                bridge: Some(bridge_name(net)),
            });
        }
        let boot_mac = set
            .boot_interface_name
            .as_ref()
            .and_then(|b| interfaces.iter().find(|i| i.name == *b))
            .or(interfaces.first())
            .map(|i| i.mac.clone());
        let vars =
            json!({"name": vm.bmh, "node": vm.node, "vm": vm.name, "interfaces": interfaces});
        let network_data = match render_network_data(templates[&set.name].as_deref(), &vars) {
            Ok(d) => d,
            Err(e) => return Ok(Err(Invalid(format!("node set {}: {e}", set.name)))),
        };
        let creds_name = format!("{}-credentials", vm.bmh);
        let nd_name = format!("{}-network-data", vm.bmh);
        let mut meta = owned_meta(vino, OWNER_LABEL, ns, &creds_name);
        meta["labels"][NODE_LABEL] = json!(vm.node);
        server_side_apply(
            &secret_api,
            &creds_name,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta,
            "type": "Opaque", "stringData": {"username": cred.0, "password": cred.1}}),
        )
        .await?;
        let mut meta = owned_meta(vino, OWNER_LABEL, ns, &nd_name);
        meta["labels"][NODE_LABEL] = json!(vm.node);
        server_side_apply(
            &secret_api,
            &nd_name,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta,
            "type": "Opaque", "stringData": {"networkData": network_data}}),
        )
        .await?;
        let mut labels: BTreeMap<String, String> = spec
            .node_label_keys_to_copy
            .iter()
            .filter_map(|k| node.labels().get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        labels.extend(set.bmh_labels.clone());
        let mut meta = owned_meta(vino, OWNER_LABEL, ns, &vm.bmh);
        for (k, v) in labels {
            meta["labels"][k] = json!(v);
        }
        meta["labels"][NODE_LABEL] = json!(vm.node);
        server_side_apply(&bmhs, &vm.bmh, json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": meta,
            "spec": {
                "online": true,
                "bootMACAddress": boot_mac,
                "bmc": {"address": bmc_address(&ip, &vm.name), "credentialsName": creds_name},
                "networkData": {"name": nd_name, "namespace": ns},
                "rootDeviceHints": {"deviceName": set.root_device_name.clone().unwrap_or_else(|| "/dev/vda".into())},
            },
        })).await?;
        let (vcpus, memory, disk) = sizes[&set.name];
        node_plans.entry(vm.node.clone()).or_default().push(VmPlan {
            name: vm.name.clone(),
            bare_metal_host: vm.bmh.clone(),
            vcpus: u32::try_from(vcpus).unwrap_or_default(),
            memory_mib: u64::try_from(memory).unwrap_or_default(),
            root_disk_gb: u64::try_from(disk).unwrap_or_default(),
            interfaces: interfaces.clone(),
            disk_drives: set.disk_drives.iter().map(disk_plan).collect(),
            libvirt_template: set.libvirt_template.clone(),
            enable_vnc: set.enable_vnc,
        });
        node_status
            .entry(vm.node.clone())
            .or_default()
            .push(VmStatus {
                name: vm.name.clone(),
                bare_metal_host: vm.bmh.clone(),
                interfaces: interfaces
                    .iter()
                    .map(|i| VmInterface {
                        network: i.network.clone(),
                        ip: i.ip.clone().unwrap_or_default(),
                        mac: i.mac.clone(),
                    })
                    .collect(),
            });
    }
    // VNC passwords: one per VNC-enabled VM, generated once and kept (never the BMC password).
    let vnc_name = child_name(&name, "vnc");
    let vnc_vms: Vec<&Vm> = vms
        .iter()
        .filter(|vm| {
            spec.nodes
                .iter()
                .any(|s| s.name == vm.node_set && s.enable_vnc)
        })
        .collect();
    let vnc_secret = if vnc_vms.is_empty() {
        None
    } else {
        let have = secret_api
            .get_opt(&vnc_name)
            .await?
            .and_then(|s| s.data)
            .unwrap_or_default();
        // `data`, not `stringData`: server-side apply then owns each key, and a key left out is removed.
        let passwords: BTreeMap<String, k8s_openapi::ByteString> = vnc_vms
            .iter()
            .map(|vm| {
                let pw = have
                    .get(&vm.name)
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(vnc_password);
                (vm.name.clone(), k8s_openapi::ByteString(pw.into_bytes()))
            })
            .collect();
        server_side_apply(
            &secret_api,
            &vnc_name,
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": owned_meta(vino, OWNER_LABEL, ns, &vnc_name), "type": "Opaque",
            "data": passwords}),
        )
        .await?;
        Some(vnc_name.clone())
    };
    for node in &node_names {
        let networks: Vec<NetworkPlan> = spec
            .networks
            .iter()
            .map(|net| {
                let dhcp = blocks[&net.name].get(node).cloned();
                NetworkPlan {
                    network: net.name.clone(),
                    bridge: bridge_name(net),
                    ip: addresses[&net.name]
                        .get(&ipam::bridge_key(node))
                        .map(|a| a.ip.clone()),
                    prefix_length: prefix_len(&net.subnet),
                    dhcp_start: dhcp.as_ref().map(|d| d.0.clone()),
                    dhcp_stop: dhcp.map(|d| d.1),
                    physical_interface: net.physical_interface.clone(),
                    libvirt_template: net.libvirt_template.clone(),
                }
            })
            .collect();
        let plan = Plan {
            node: node.clone(),
            cpu_exclude: spec
                .configuration
                .as_ref()
                .and_then(|c| c.cpu_exclude.clone()),
            vnc_password_secret: vnc_secret.clone(),
            networks,
            vms: node_plans.get(node).cloned().unwrap_or_default(),
        };
        let cm = child_name(&name, &format!("node-{node}"));
        let mut meta = owned_meta(vino, OWNER_LABEL, ns, &cm);
        meta["labels"][NODE_LABEL] = json!(node);
        server_side_apply(&maps, &cm, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"plan.json": serde_json::to_string_pretty(&plan).expect("JSON values serialize")}})).await?;
    }
    // Everything no longer planned goes: BareMetalHosts, their Secrets, node plans.
    let planned_bmh: BTreeSet<&str> = vms.iter().map(|v| v.bmh.as_str()).collect();
    let owner_sel = ListParams::default().labels(&format!("{OWNER_LABEL}={name}"));
    for h in bmhs.list(&owner_sel).await?.items {
        if !planned_bmh.contains(h.name_any().as_str()) {
            delete_ignoring_missing(&bmhs, &h.name_any()).await?;
        }
    }
    for s in secret_api.list(&owner_sel).await?.items {
        let n = s.name_any();
        let vm_secret = n
            .strip_suffix("-credentials")
            .or_else(|| n.strip_suffix("-network-data"));
        let keep = match vm_secret {
            Some(bmh) if s.labels().contains_key(NODE_LABEL) => planned_bmh.contains(bmh),
            _ => (inline && n == credentials) || (vnc_secret.is_some() && n == vnc_name),
        };
        if !keep {
            delete_ignoring_missing(&secret_api, &n).await?;
        }
    }
    for m in maps.list(&owner_sel).await?.items {
        let keep = m
            .labels()
            .get(NODE_LABEL)
            .is_some_and(|n| node_names.contains(n));
        if !keep {
            delete_ignoring_missing(&maps, &m.name_any()).await?;
        }
    }
    status.nodes = node_status
        .into_iter()
        .map(|(name, vms)| NodeVms { name, vms })
        .collect();

    // The DaemonSet.
    let ds_name = spec
        .daemon_set_options
        .as_ref()
        .and_then(|o| o.namespaced_name.as_ref())
        .map(|n| n.name.clone())
        .unwrap_or_else(|| child_name(&name, "vino"));
    let opts = spec.daemon_set_options.clone().unwrap_or_default();
    let image = |i: &Option<String>, default: &str| i.clone().unwrap_or_else(|| default.to_owned());
    let creds_env = json!([
        {"name": "BMC_USERNAME", "valueFrom": {"secretKeyRef": {"name": credentials, "key": "username"}}},
        {"name": "BMC_PASSWORD", "valueFrom": {"secretKeyRef": {"name": credentials, "key": "password"}}},
    ]);
    let node_env =
        json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}});
    // The builder's account: it reads its node's plan and reports on it, and reads the VNC passwords.
    let account = child_name(&ds_name, "builder");
    apply_account(
        client,
        vino,
        OWNER_LABEL,
        ns,
        &account,
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [vnc_name], "verbs": ["get"]},
        ]),
    )
    .await?;
    let libvirt_mounts = json!([
        {"name": "libvirt-run", "mountPath": "/var/run/libvirt"},
        {"name": "libvirt-lib", "mountPath": "/var/lib/libvirt"},
    ]);
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    server_side_apply(&daemonsets, &ds_name, json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": owned_meta(vino, OWNER_LABEL, ns, &ds_name),
        "spec": {
            "selector": {"matchLabels": {OWNER_LABEL: name, "app": "vino"}},
            "template": {
                "metadata": {"labels": {OWNER_LABEL: name, "app": "vino"}},
                "spec": {
                    "nodeSelector": spec.node_selector.as_ref().map(|s| s.match_labels.clone()).unwrap_or_default(),
                    "hostNetwork": true,
                    "serviceAccountName": account,
                    "volumes": [
                        {"name": "libvirt-run", "hostPath": {"path": "/var/run/libvirt", "type": "DirectoryOrCreate"}},
                        {"name": "libvirt-lib", "hostPath": {"path": "/var/lib/libvirt", "type": "DirectoryOrCreate"}},
                        {"name": "builder-work", "hostPath": {"path": "/var/lib/vino-builder", "type": "DirectoryOrCreate"}},
                    ],
                    "containers": [
                        {"name": "libvirt", "image": image(&opts.libvirt_image, "quay.io/airshipit/libvirt:latest"),
                         "securityContext": {"privileged": true}, "volumeMounts": libvirt_mounts},
                        {"name": "sushy", "image": image(&opts.sushy_image, "quay.io/metal3-io/sushy-tools:latest"),
                         "env": creds_env, "volumeMounts": libvirt_mounts,
                         "ports": [{"containerPort": REDFISH_PORT, "hostPort": REDFISH_PORT, "protocol": "TCP"}]},
                        {"name": "vino-builder", "image": image(&opts.vino_builder_image, &ctx.base.settings.vino_builder_image),
                         "command": ["foothold-agent", "vino-builder"],
                         "env": [node_env, {"name": "VINO_NAMESPACE", "value": ns}, {"name": "VINO_NAME", "value": name}],
                         "securityContext": {"privileged": true},
                         "volumeMounts": [libvirt_mounts[0], libvirt_mounts[1],
                                          {"name": "builder-work", "mountPath": "/var/lib/vino-builder"}]},
                    ],
                },
            },
        },
    })).await?;
    let ds = daemonsets.get_opt(&ds_name).await?;
    let ready = ds
        .as_ref()
        .and_then(|d| d.status.as_ref())
        .is_some_and(|s| {
            s.desired_number_scheduled > 0
                && s.number_ready >= s.desired_number_scheduled
                && s.observed_generation.unwrap_or(0)
                    >= ds.as_ref().and_then(|d| d.metadata.generation).unwrap_or(0)
        });
    let msg = ds
        .and_then(|d| d.status)
        .map(|s| {
            format!(
                "{} of {} pods ready",
                s.number_ready, s.desired_number_scheduled
            )
        })
        .unwrap_or_else(|| "no status yet".into());
    set_conditions(
        &mut status.conditions,
        generation,
        &[(
            "DaemonSetReady",
            ready,
            if ready { "PodsReady" } else { "PodsNotReady" },
            &msg,
        )],
    );
    // Other DaemonSets of this Vino (a renamed one) go.
    delete_owned(&daemonsets, OWNER_LABEL, &name, Some(&ds_name)).await?;
    Ok(Ok(ready))
}

#[cfg(test)]
mod reconcile_tests;
