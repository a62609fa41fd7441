//! The objects a Vino wants, pure and typed: from the Vino and what [`super::observe`] read to the address
//! pools (allocated by [`super::ipam`]), the VMs' BareMetalHosts with their credentials and networkData
//! Secrets, the per-node plan ConfigMaps `vino-builder` follows, the VNC passwords, the builder's account and
//! the DaemonSet; and the VMs for the status. The reconcile applies them with
//! [`crate::controllers::common::Owned`], which adds the owner's labels and reference. An `Err` is a spec
//! that cannot be realised.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, EnvVarSource, HostPathVolumeSource,
    ObjectFieldSelector, PodSpec, PodTemplateSpec, Secret, SecretKeySelector, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::ByteString;
use kube::ResourceExt;
use serde_json::json;

use super::airship;
use super::ipam::{self, Ranges, Wanted};
use super::observe::Observed;
use super::plan::{
    bmc_address, bridge_name, disk_plan, node_ip, plan_vms, prefix_len, render_network_data,
    resolve_flavor, NODE_LABEL, OWNER_LABEL, REDFISH_PORT,
};

use crate::controllers::common::{child_name, core_rule};
use crate::crd::metal3::{
    BareMetalHost, BareMetalHostSpec, BmcDetails, RootDeviceHints, SecretReference,
};
use crate::crd::vino::{AllocatedIp, IPPool, IPPoolSpec, NodeVms, Vino, VmInterface, VmStatus};
use crate::vino_plan::{InterfacePlan, NetworkPlan, Plan, VmPlan};

/// An address pool to write: created when new, replaced (under the resourceVersion read) when changed.
pub struct PoolWrite {
    pub pool: IPPool,
    pub change: PoolChange,
}

#[derive(Debug, PartialEq, Eq)]
pub enum PoolChange {
    Create,
    Replace,
    Unchanged,
}

/// Everything one reconcile of a Vino applies, in the order it applies it.
pub struct Desired {
    pub pools: Vec<PoolWrite>,
    pub secrets: Vec<Secret>,
    pub hosts: Vec<BareMetalHost>,
    pub plans: Vec<ConfigMap>,
    /// The builder's ServiceAccount (and Role) name with its rules.
    pub account: (String, Vec<PolicyRule>),
    pub daemon_set: DaemonSet,
    /// The VMs per node, for the status.
    pub nodes: Vec<NodeVms>,
    /// BareMetalHosts of VMs a node set's count left out, kept until their node is drained.
    pub leaving: Vec<String>,
}

fn named(name: &str, node: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: node.map(|n| [(NODE_LABEL.to_owned(), n.to_owned())].into()),
        ..ObjectMeta::default()
    }
}

fn opaque(name: &str, node: Option<&str>, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: named(name, node),
        type_: Some("Opaque".into()),
        string_data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// What `vino` wants, given what was observed. `new_password` makes a VNC password for a VM without one.
pub fn desired(
    vino: &Vino,
    ns: &str,
    obs: &Observed,
    builder_image: &str,
    new_password: &mut dyn FnMut() -> String,
) -> Result<Desired, String> {
    let name = vino.name_any();
    let spec = &vino.spec;
    airship::check_templates(spec)?;
    let node_names: Vec<String> = obs.nodes.iter().map(|n| n.name_any()).collect();
    let vms = plan_vms(ns, &name, &node_names, &spec.nodes, &obs.held);
    let mut sizes = BTreeMap::new();
    for set in &spec.nodes {
        sizes.insert(
            set.name.clone(),
            resolve_flavor(
                &set.name,
                set.flavor.as_ref(),
                &obs.flavors,
                obs.airship_flavors.as_ref(),
            )?,
        );
    }

    // IPAM, one pool per network.
    let mut pools = Vec::new();
    let mut addresses: BTreeMap<String, BTreeMap<String, AllocatedIp>> = BTreeMap::new(); // network → key → ip
    let mut blocks: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
    for net in &spec.networks {
        let invalid = |e: String| format!("network {}: {e}", net.name);
        let (static_range, dhcp_range) = (airship::static_range(net)?, airship::dhcp_range(net)?);
        let ranges = Ranges::new(
            &net.subnet,
            static_range.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
            dhcp_range.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
            net.instance_subnet_bit_step,
            net.mac_prefix.as_deref(),
        )
        .map_err(invalid)?;
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
        let existing = obs.pools.get(&pool_name);
        let now = existing.map(|p| p.spec.clone()).unwrap_or_default();
        let alloc = ipam::allocate(&ranges, &now.allocated_ips, &now.allocated_ranges, &wanted)
            .map_err(invalid)?;
        let new_spec = IPPoolSpec {
            subnet: net.subnet.clone(),
            ranges: now.ranges.clone(),
            allocated_ips: alloc.ips.clone(),
            allocated_ranges: alloc.ranges.clone(),
            mac_prefix: net.mac_prefix.clone(),
            next_mac: None,
        };
        pools.push(match existing {
            None => PoolWrite {
                pool: IPPool::new(&pool_name, new_spec),
                change: PoolChange::Create,
            },
            Some(p) => {
                let change = if p.spec == new_spec {
                    PoolChange::Unchanged
                } else {
                    PoolChange::Replace
                };
                let mut pool = p.clone();
                pool.spec = new_spec;
                PoolWrite { pool, change }
            }
        });
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

    // VNC passwords: one per VNC-enabled VM, generated once and kept (never the BMC password). `data`, not
    // `stringData`: server-side apply then owns each key, and a key left out is removed.
    let vnc_name = child_name(&name, "vnc");
    let passwords: BTreeMap<String, ByteString> = vms
        .iter()
        .filter(|vm| {
            spec.nodes
                .iter()
                .any(|s| s.name == vm.node_set && s.enable_vnc)
        })
        .map(|vm| {
            let pw = obs
                .vnc_passwords
                .get(&vm.name)
                .cloned()
                .unwrap_or_else(&mut *new_password);
            (vm.name.clone(), ByteString(pw.into_bytes()))
        })
        .collect();
    let vnc_secret = (!passwords.is_empty()).then(|| vnc_name.clone());

    // Per VM: Secrets and the BareMetalHost.
    let (username, password) = &obs.credentials.value;
    let mut secrets = Vec::new();
    if obs.credentials.inline {
        secrets.push(opaque(
            &obs.credentials.secret,
            None,
            &[("username", username), ("password", password)],
        ));
    }
    let mut hosts = Vec::new();
    let mut node_status: BTreeMap<String, Vec<VmStatus>> = BTreeMap::new();
    let mut node_plans: BTreeMap<String, Vec<VmPlan>> = BTreeMap::new();
    for vm in &vms {
        let node = obs
            .nodes
            .iter()
            .find(|n| n.name_any() == vm.node)
            .expect("planned from nodes");
        let ip =
            node_ip(node).ok_or_else(|| format!("node {} has no InternalIP address", vm.node))?;
        let set = spec
            .nodes
            .iter()
            .find(|s| s.name == vm.node_set)
            .expect("planned from sets");
        let bridge_ips: BTreeMap<String, String> = addresses
            .iter()
            .filter_map(|(net, a)| {
                Some((net.clone(), a.get(&ipam::bridge_key(&vm.node))?.ip.clone()))
            })
            .collect();
        let mut interfaces = Vec::new();
        for iface in &set.network_interfaces {
            let net = spec
                .networks
                .iter()
                .find(|n| n.name == iface.network)
                .ok_or_else(|| {
                    format!(
                        "node set {}: interface {} names unknown network {}",
                        set.name, iface.name, iface.network
                    )
                })?;
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
                routes: airship::routes(net, bridge_ips.get(&net.name).map(String::as_str)),
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
        let vnc_password = passwords
            .get(&vm.name)
            .and_then(|p| std::str::from_utf8(&p.0).ok());
        let go_vars = airship::template_values(&airship::VmValues {
            bmh: &vm.bmh,
            vm: &vm.name,
            set,
            networks: &spec.networks,
            interfaces: &interfaces,
            boot_mac: boot_mac.as_deref(),
            bridge_ips: &bridge_ips,
            vnc_password,
        });
        let template = obs.templates.get(&set.name).map(String::as_str);
        let network_data = render_network_data(template, &vars, &go_vars)
            .map_err(|e| format!("node set {}: {e}", set.name))?;
        let creds_name = format!("{}-credentials", vm.bmh);
        let nd_name = format!("{}-network-data", vm.bmh);
        let on_node = Some(vm.node.as_str());
        secrets.push(opaque(
            &creds_name,
            on_node,
            &[("username", username), ("password", password)],
        ));
        secrets.push(opaque(&nd_name, on_node, &[("networkData", &network_data)]));
        let mut labels: BTreeMap<String, String> = spec
            .node_label_keys_to_copy
            .iter()
            .filter_map(|k| node.labels().get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        labels.extend(set.bmh_labels.clone());
        labels.insert(NODE_LABEL.into(), vm.node.clone());
        let mut bmh = BareMetalHost::new(
            &vm.bmh,
            BareMetalHostSpec {
                online: true,
                boot_mac_address: boot_mac,
                bmc: Some(BmcDetails {
                    address: bmc_address(&ip, &vm.name),
                    credentials_name: creds_name,
                    ..BmcDetails::default()
                }),
                network_data: Some(SecretReference {
                    name: Some(nd_name),
                    namespace: Some(ns.to_owned()),
                }),
                root_device_hints: Some(RootDeviceHints {
                    device_name: Some(
                        set.root_device_name
                            .clone()
                            .unwrap_or_else(|| "/dev/vda".into()),
                    ),
                    ..RootDeviceHints::default()
                }),
                ..BareMetalHostSpec::default()
            },
        );
        bmh.metadata.labels = Some(labels);
        hosts.push(bmh);
        let size = sizes[&set.name];
        node_plans.entry(vm.node.clone()).or_default().push(VmPlan {
            name: vm.name.clone(),
            bare_metal_host: vm.bmh.clone(),
            vcpus: u32::try_from(size.vcpus).unwrap_or_default(),
            memory_mib: u64::try_from(size.memory_mib).unwrap_or_default(),
            root_disk_gb: u64::try_from(size.root_disk_gb).unwrap_or_default(),
            hugepages: size.hugepages,
            interfaces: interfaces.clone(),
            disk_drives: set.disk_drives.iter().map(disk_plan).collect(),
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

    if !passwords.is_empty() {
        secrets.push(Secret {
            metadata: named(&vnc_name, None),
            type_: Some("Opaque".into()),
            data: Some(passwords),
            ..Secret::default()
        });
    }

    // Per node: the plan vino-builder follows.
    let bootp = airship::bootp_file(spec);
    let mut plans = Vec::new();
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
                    routed: net.libvirt_template.as_deref() == Some(airship::MANAGEMENT_TEMPLATE),
                    bootp_file: bootp.clone(),
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
        plans.push(ConfigMap {
            metadata: named(&child_name(&name, &format!("node-{node}")), Some(node)),
            data: Some(
                [(
                    "plan.json".to_owned(),
                    serde_json::to_string_pretty(&plan).expect("JSON values serialize"),
                )]
                .into(),
            ),
            ..ConfigMap::default()
        });
    }

    // The DaemonSet, and the builder's account: it reads its node's plan and reports on it, and reads the VNC
    // passwords.
    let ds_name = spec
        .daemon_set_options
        .as_ref()
        .and_then(|o| o.namespaced_name.as_ref())
        .map(|n| n.name.clone())
        .unwrap_or_else(|| child_name(&name, "vino"));
    let account = child_name(&ds_name, "builder");
    let rules = vec![
        core_rule(&["configmaps"], &[], &["get", "list", "watch", "patch"]),
        core_rule(&["secrets"], &[&vnc_name], &["get"]),
    ];
    let daemon_set = daemon_set(
        vino,
        ns,
        &ds_name,
        &account,
        &obs.credentials.secret,
        builder_image,
    );
    Ok(Desired {
        pools,
        secrets,
        hosts,
        plans,
        account: (account, rules),
        daemon_set,
        nodes: node_status
            .into_iter()
            .map(|(name, vms)| NodeVms { name, vms })
            .collect(),
        leaving: vms
            .iter()
            .filter(|vm| vm.leaving)
            .map(|vm| vm.bmh.clone())
            .collect(),
    })
}

fn host_path(name: &str, path: &str) -> Volume {
    Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource {
            path: path.into(),
            type_: Some("DirectoryOrCreate".into()),
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..VolumeMount::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn env_from(name: &str, from: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(from),
        ..EnvVar::default()
    }
}

fn secret_key(secret: &str, key: &str) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: secret.into(),
            key: key.into(),
            ..SecretKeySelector::default()
        }),
        ..EnvVarSource::default()
    }
}

fn privileged() -> Option<SecurityContext> {
    Some(SecurityContext {
        privileged: Some(true),
        ..SecurityContext::default()
    })
}

/// libvirt, sushy-tools (the VMs' Redfish BMC, with the credentials Secret) and vino-builder on every selected
/// node, on the host's network.
fn daemon_set(
    vino: &Vino,
    ns: &str,
    name: &str,
    account: &str,
    credentials: &str,
    builder_image: &str,
) -> DaemonSet {
    let spec = &vino.spec;
    let opts = spec.daemon_set_options.clone().unwrap_or_default();
    let image = |i: &Option<String>, default: &str| i.clone().unwrap_or_else(|| default.to_owned());
    let pod_labels: BTreeMap<String, String> = [
        (OWNER_LABEL.to_owned(), vino.name_any()),
        ("app".to_owned(), "vino".to_owned()),
    ]
    .into();
    let libvirt_mounts = vec![
        mount("libvirt-run", "/var/run/libvirt"),
        mount("libvirt-lib", "/var/lib/libvirt"),
    ];
    let mut builder_mounts = libvirt_mounts.clone();
    builder_mounts.push(mount("builder-work", "/var/lib/vino-builder"));
    DaemonSet {
        metadata: named(name, None),
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(pod_labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    node_selector: spec
                        .node_selector
                        .as_ref()
                        .map(|s| s.match_labels.clone())
                        .filter(|l| !l.is_empty()),
                    host_network: Some(true),
                    service_account_name: Some(account.into()),
                    volumes: Some(vec![
                        host_path("libvirt-run", "/var/run/libvirt"),
                        host_path("libvirt-lib", "/var/lib/libvirt"),
                        host_path("builder-work", "/var/lib/vino-builder"),
                    ]),
                    containers: vec![
                        Container {
                            name: "libvirt".into(),
                            image: Some(image(
                                &opts.libvirt_image,
                                "quay.io/airshipit/libvirt:latest",
                            )),
                            security_context: privileged(),
                            volume_mounts: Some(libvirt_mounts.clone()),
                            ..Container::default()
                        },
                        Container {
                            name: "sushy".into(),
                            image: Some(image(
                                &opts.sushy_image,
                                "quay.io/metal3-io/sushy-tools:latest",
                            )),
                            env: Some(vec![
                                env_from("BMC_USERNAME", secret_key(credentials, "username")),
                                env_from("BMC_PASSWORD", secret_key(credentials, "password")),
                            ]),
                            volume_mounts: Some(libvirt_mounts),
                            ports: Some(vec![ContainerPort {
                                container_port: i32::from(REDFISH_PORT),
                                host_port: Some(i32::from(REDFISH_PORT)),
                                protocol: Some("TCP".into()),
                                ..ContainerPort::default()
                            }]),
                            ..Container::default()
                        },
                        Container {
                            name: "vino-builder".into(),
                            image: Some(image(&opts.vino_builder_image, builder_image)),
                            command: Some(vec!["foothold-agent".into(), "vino-builder".into()]),
                            env: Some(vec![
                                env_from(
                                    "NODE_NAME",
                                    EnvVarSource {
                                        field_ref: Some(ObjectFieldSelector {
                                            field_path: "spec.nodeName".into(),
                                            ..ObjectFieldSelector::default()
                                        }),
                                        ..EnvVarSource::default()
                                    },
                                ),
                                env("VINO_NAMESPACE", ns),
                                env("VINO_NAME", &vino.name_any()),
                            ]),
                            security_context: privileged(),
                            volume_mounts: Some(builder_mounts),
                            ..Container::default()
                        },
                    ],
                    ..PodSpec::default()
                }),
            },
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}
