//! What Airship's ViNO manifests mean to Foothold, pure: Airship's field names for the address ranges, its
//! network template by name, the `$vinobridge` route gateway, the PXE boot host, and the values a networkData
//! template written in Go's template language gets — ViNO's Go structs' field names, every field present with
//! Go's zero value when unset (a nil map prints `map[]`, a nil slice `[]`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::crd::vino::{Network, Route, VinoSpec, VmNodeSet};
use crate::vino_plan::InterfacePlan;

/// The network template Airship's ViNO ships (`config/manager/network-templates.yaml`): a routed libvirt
/// network on the bridge `bridgeName` (default [`MANAGEMENT_BRIDGE`]) with the node's address, DHCP over the
/// node's instance addresses and a BOOTP file at the PXE boot host. The builder builds that network itself.
pub const MANAGEMENT_TEMPLATE: &str = "management";

/// The bridge Airship's `management` template names when the network gives no `bridgeName`.
pub const MANAGEMENT_BRIDGE: &str = "vm-infra-bridge";

/// The route gateway Airship's ViNO replaces with the node's address on the network's bridge.
pub const BRIDGE_GATEWAY: &str = "$vinobridge";

/// Airship's libvirt templates: a network may name Airship's stock [`MANAGEMENT_TEMPLATE`]; any other network
/// template and every node set's domain template (Ansible-rendered XML in Airship's vino-builder) is refused
/// by name rather than ignored.
pub fn check_templates(spec: &VinoSpec) -> Result<(), String> {
    for net in &spec.networks {
        match net.libvirt_template.as_deref() {
            None | Some(MANAGEMENT_TEMPLATE) => {}
            Some(t) => {
                return Err(format!(
                    "network {}: libvirtTemplate {t:?} is not supported: the builder writes the network XML \
                     itself, and of Airship's network templates builds only its stock {MANAGEMENT_TEMPLATE:?}; \
                     name that or remove the field",
                    net.name
                ))
            }
        }
    }
    for set in &spec.nodes {
        if let Some(t) = &set.libvirt_template {
            return Err(format!(
                "node set {}: libvirtTemplate {t} is not supported: Airship's domain XML templates are not \
                 rendered, the builder writes the domain XML from the flavor, disks and interfaces; remove the \
                 field",
                set.name
            ));
        }
    }
    Ok(())
}

/// The condition saying which of Airship's fields the Vino gives have no effect in Foothold.
pub const FIELDS_HONOURED: &str = "FieldsHonoured";

/// Airship's fields this Vino gives that Foothold accepts but that change nothing, each with why: they are
/// reported (the condition [`FIELDS_HONOURED`]), not silently dropped.
pub fn without_effect(spec: &VinoSpec) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(b) = &spec.vm_bridge {
        out.push(format!(
            "vmBridge {b:?}: Airship's libvirt container's VM_BRIDGE_INTERFACE; Foothold's builder routes each \
             network out through its physicalInterface"
        ));
    }
    let opts = spec.daemon_set_options.as_ref();
    if let Some(i) = opts.and_then(|o| o.node_annotator_image.as_ref()) {
        out.push(format!(
            "daemonSetOptions.nodeAnnotatorImage {i:?}: Foothold runs no node annotator, its reconciler \
             allocates the nodes' bridge addresses itself"
        ));
    }
    if let Some(n) = opts.and_then(|o| o.namespaced_name.as_ref()) {
        out.push(format!(
            "daemonSetOptions.namespacedName {}: in Airship a ConfigMap holding the DaemonSet's template; Foothold \
             builds its own DaemonSet, in the Vino's namespace, and takes only the name, as the DaemonSet's",
            n.namespace.as_deref().map_or(n.name.clone(), |ns| format!("{ns}/{}", n.name))
        ));
    }
    out
}

/// One of a network's ranges, given under Foothold's name or Airship's: both may be given only if they agree,
/// and a start needs its stop.
fn either_range(
    net: &Network,
    ours: (&Option<String>, &Option<String>, &str),
    airships: (&Option<String>, &Option<String>, &str),
) -> Result<Option<(String, String)>, String> {
    let pair = |(a, b, name): (&Option<String>, &Option<String>, &str)| match (a, b) {
        (Some(a), Some(b)) => Ok(Some((a.clone(), b.clone()))),
        (None, None) => Ok(None),
        _ => Err(format!(
            "network {}: {name}Start and {name}Stop go together",
            net.name
        )),
    };
    match (pair(ours)?, pair(airships)?) {
        (Some(o), Some(a)) if o != a => Err(format!(
            "network {}: {}Start/Stop {}..{} and Airship's {}Start/Stop {}..{} disagree: give one",
            net.name, ours.2, o.0, o.1, airships.2, a.0, a.1
        )),
        (o, a) => Ok(o.or(a)),
    }
}

/// The range VM interfaces and node bridges take addresses from: `staticAllocationStart/Stop`, or Airship's
/// `allocationStart/Stop` (its controller allocates both from there).
pub fn static_range(net: &Network) -> Result<Option<(String, String)>, String> {
    either_range(
        net,
        (
            &net.static_allocation_start,
            &net.static_allocation_stop,
            "staticAllocation",
        ),
        (&net.allocation_start, &net.allocation_stop, "allocation"),
    )
}

/// The range nodes' DHCP blocks are carved from: `dhcpAllocationStart/Stop`, or Airship's `instanceSubnet`
/// without its first four addresses (and its IPv4 broadcast address).
pub fn dhcp_range(net: &Network) -> Result<Option<(String, String)>, String> {
    let airships = match &net.instance_subnet {
        None => None,
        Some(cidr) => Some(
            super::ipam::instance_subnet_range(cidr)
                .map_err(|e| format!("network {}: {e}", net.name))?,
        ),
    };
    let (start, stop) = (
        airships.as_ref().map(|r| r.0.clone()),
        airships.as_ref().map(|r| r.1.clone()),
    );
    either_range(
        net,
        (
            &net.dhcp_allocation_start,
            &net.dhcp_allocation_stop,
            "dhcpAllocation",
        ),
        (&start, &stop, "instanceSubnet's allocation"),
    )
}

/// The network's routes for a node whose address on the bridge is `bridge_ip`: a gateway of `$vinobridge`
/// becomes that address, as in Airship.
pub fn routes(net: &Network, bridge_ip: Option<&str>) -> Vec<Route> {
    net.routes
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if r.gateway == BRIDGE_GATEWAY {
                if let Some(ip) = bridge_ip {
                    ip.clone_into(&mut r.gateway);
                }
            }
            r
        })
        .collect()
}

/// The BOOTP file the networks' DHCP hands out: Airship's `dualboot.ipxe` at `pxeBootImageHost` (port
/// `pxeBootImageHostPort`, default 80). None without a host: Foothold serves no iPXE script of its own.
pub fn bootp_file(spec: &VinoSpec) -> Option<String> {
    let host = spec.pxe_boot_image_host.as_deref()?;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    Some(format!(
        "http://{host}:{}/dualboot.ipxe",
        spec.pxe_boot_image_host_port.unwrap_or(80)
    ))
}

fn interface(i: &crate::crd::vino::NetworkInterface) -> Value {
    json!({
        "Name": i.name, "Type": i.kind.clone().unwrap_or_default(), "NetworkName": i.network,
        "MTU": i.mtu.unwrap_or(0), "Options": i.options,
    })
}

fn network(n: &Network, bridge_ip: Option<&str>) -> Value {
    let routes: Vec<Value> = routes(n, bridge_ip)
        .iter()
        .map(|r| json!({"Network": r.network, "Netmask": r.netmask, "Gateway": r.gateway}))
        .collect();
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    json!({
        // Airship's BuilderNetwork: the node's bridge, then its Network's fields.
        "BridgeIP": bridge_ip.unwrap_or_default(), "BridgeMAC": "", "Range": {"Start": "", "Stop": ""},
        "Name": n.name, "SubNet": n.subnet, "Type": s(&n.kind),
        "InstanceSubnet": s(&n.instance_subnet),
        "AllocationStart": s(&n.allocation_start), "AllocationStop": s(&n.allocation_stop),
        "DNSServers": n.dns_servers, "Routes": routes,
        "MACPrefix": s(&n.mac_prefix), "PhysicalInterface": s(&n.physical_interface),
        "LibvirtTemplate": s(&n.libvirt_template),
        // Foothold's fields, under the same convention.
        "InstanceSubnetBitStep": n.instance_subnet_bit_step.unwrap_or(0),
        "StaticAllocationStart": s(&n.static_allocation_start),
        "StaticAllocationStop": s(&n.static_allocation_stop),
        "DHCPAllocationStart": s(&n.dhcp_allocation_start),
        "DHCPAllocationStop": s(&n.dhcp_allocation_stop),
        "BridgeName": s(&n.bridge_name),
    })
}

/// A subnet's netmask as later ViNO versions give an interface's `NetMask`: dotted on IPv4
/// (`255.255.240.0`), the prefix length on IPv6.
fn netmask(subnet: &str) -> String {
    let Some((addr, len)) = subnet.split_once('/') else {
        return String::new();
    };
    match (addr.parse::<std::net::IpAddr>(), len.parse::<u32>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(len)) if len <= 32 => {
            std::net::Ipv4Addr::from(u32::MAX.checked_shl(32 - len).unwrap_or(0)).to_string()
        }
        (Ok(std::net::IpAddr::V6(_)), Ok(len)) if len <= 128 => len.to_string(),
        _ => String::new(),
    }
}

/// One VM, as a networkData template sees it.
pub struct VmValues<'a> {
    pub bmh: &'a str,
    pub vm: &'a str,
    pub set: &'a VmNodeSet,
    pub networks: &'a [Network],
    pub interfaces: &'a [InterfacePlan],
    pub boot_mac: Option<&'a str>,
    /// The node's address on each network's bridge, by network name.
    pub bridge_ips: &'a BTreeMap<String, String>,
    /// The VM's VNC password, if its node set enables VNC.
    pub vnc_password: Option<&'a str>,
}

/// `.BMHName`, `.Node` (the node set), `.Networks` (each with the node's `BridgeIP`), `.Generated`
/// (`IPAddresses` by network, `MACAddresses` by interface) and `.BuilderDomain` (the VM: `Name`, `Role`,
/// `BootMACAddress`, `EnableVNC`, `VNCPassword`, `Interfaces` with their `IPAddress`, `MACAddress` and
/// `NetMask`), whose
/// fields are also at the top, as Go promotes an embedded struct's.
pub fn template_values(v: &VmValues) -> Value {
    let mut ips = serde_json::Map::new();
    let mut macs = serde_json::Map::new();
    let mut domain_interfaces = Vec::new();
    for (spec, plan) in v.set.network_interfaces.iter().zip(v.interfaces) {
        let ip = plan.ip.clone().unwrap_or_default();
        ips.insert(plan.network.clone(), ip.clone().into());
        macs.insert(plan.name.clone(), plan.mac.clone().into());
        let mut i = interface(spec);
        i["IPAddress"] = ip.into();
        i["MACAddress"] = plan.mac.clone().into();
        i["NetMask"] = v
            .networks
            .iter()
            .find(|n| n.name == plan.network)
            .map(|n| netmask(&n.subnet))
            .unwrap_or_default()
            .into();
        domain_interfaces.push(i);
    }
    let set = v.set;
    let domain = json!({
        "Name": v.vm, "Role": set.name, "BootMACAddress": v.boot_mac.unwrap_or_default(),
        "EnableVNC": set.enable_vnc, "VNCPassword": v.vnc_password.unwrap_or_default(),
        "Interfaces": domain_interfaces,
    });
    let mut values = json!({
        "BMHName": v.bmh,
        "Node": {
            "Name": set.name, "Count": set.count, "BMHLabels": set.bmh_labels,
            "NetworkInterfaces": set.network_interfaces.iter().map(interface).collect::<Vec<_>>(),
            "BootInterfaceName": set.boot_interface_name.clone().unwrap_or_default(),
            "RootDeviceName": set.root_device_name.clone().unwrap_or_default(),
            "EnableVNC": set.enable_vnc,
        },
        "Networks": v.networks.iter()
            .map(|n| network(n, v.bridge_ips.get(&n.name).map(String::as_str)))
            .collect::<Vec<_>>(),
        "Generated": {"IPAddresses": ips, "MACAddresses": macs},
    });
    if let (Value::Object(top), Value::Object(fields)) = (&mut values, &domain) {
        top.extend(fields.clone());
    }
    values["BuilderDomain"] = domain;
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(v: Value) -> Network {
        serde_json::from_value(
            json!({"name": "management", "subnet": "192.168.0.0/20"})
                .as_object()
                .unwrap()
                .clone()
                .into_iter()
                .chain(v.as_object().unwrap().clone())
                .collect::<serde_json::Map<_, _>>()
                .into(),
        )
        .unwrap()
    }

    #[test]
    fn airships_range_names_stand_for_footholds_and_must_agree_with_them() {
        let a = net(
            json!({"allocationStart": "192.168.2.10", "allocationStop": "192.168.2.24",
                           "instanceSubnet": "192.168.4.0/22"}),
        );
        assert_eq!(
            static_range(&a).unwrap(),
            Some(("192.168.2.10".into(), "192.168.2.24".into()))
        );
        assert_eq!(
            dhcp_range(&a).unwrap(),
            Some(("192.168.4.4".into(), "192.168.7.254".into()))
        );
        let both = net(
            json!({"allocationStart": "192.168.2.10", "allocationStop": "192.168.2.24",
                              "staticAllocationStart": "192.168.2.10", "staticAllocationStop": "192.168.2.24"}),
        );
        assert!(static_range(&both).unwrap().is_some());
        let e = static_range(&net(
            json!({"allocationStart": "192.168.2.10", "allocationStop": "192.168.2.24",
                                         "staticAllocationStart": "192.168.2.11",
                                         "staticAllocationStop": "192.168.2.24"}),
        ))
        .unwrap_err();
        assert!(e.contains("disagree: give one"), "{e}");
        let e = static_range(&net(json!({"allocationStart": "192.168.2.10"}))).unwrap_err();
        assert_eq!(
            e,
            "network management: allocationStart and allocationStop go together"
        );
        let e = dhcp_range(&net(json!({"instanceSubnet": "192.168.4.0/22",
                                       "dhcpAllocationStart": "192.168.4.8", "dhcpAllocationStop": "192.168.4.9"})))
        .unwrap_err();
        assert!(e.contains("disagree"), "{e}");
        assert_eq!(dhcp_range(&net(json!({}))).unwrap(), None);
    }

    #[test]
    fn only_airships_stock_network_template_is_taken() {
        let spec = |v: Value| -> VinoSpec { serde_json::from_value(v).unwrap() };
        let ok = spec(
            json!({"networks": [{"name": "m", "subnet": "10.0.0.0/24", "libvirtTemplate": "management"}]}),
        );
        check_templates(&ok).unwrap();
        let e = check_templates(&spec(json!({"networks": [
            {"name": "m", "subnet": "10.0.0.0/24", "libvirtTemplate": "pxe"}]})))
        .unwrap_err();
        assert!(
            e.starts_with("network m: libvirtTemplate \"pxe\" is not supported"),
            "{e}"
        );
        let e = check_templates(&spec(json!({"nodes": [
            {"name": "worker", "libvirtTemplate": {"name": "t", "namespace": "vino-system"}}]})))
        .unwrap_err();
        assert!(
            e.contains("node set worker: libvirtTemplate {\"name\":\"t\""),
            "{e}"
        );
    }

    #[test]
    fn airships_fields_without_effect_are_named() {
        let spec: VinoSpec = serde_json::from_value(json!({})).unwrap();
        assert!(without_effect(&spec).is_empty());
        let spec: VinoSpec = serde_json::from_value(json!({"vmBridge": "lo", "daemonSetOptions": {
            "nodeAnnotatorImage": "quay.io/airshipit/nodelabeler", "libvirtImage": "libvirt:1",
            "namespacedName": {"name": "daemonset-template", "namespace": "vino-system"}}}))
        .unwrap();
        let w = without_effect(&spec);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("vmBridge \"lo\": "), "{w:?}");
        assert!(
            w[1].starts_with("daemonSetOptions.nodeAnnotatorImage "),
            "{w:?}"
        );
        assert!(
            w[2].starts_with("daemonSetOptions.namespacedName vino-system/daemonset-template: "),
            "{w:?}"
        );
    }

    #[test]
    fn netmasks_are_dotted_on_ipv4() {
        assert_eq!(netmask("192.168.2.0/20"), "255.255.240.0");
        assert_eq!(netmask("10.0.0.0/32"), "255.255.255.255");
        assert_eq!(netmask("10.0.0.0/0"), "0.0.0.0");
        assert_eq!(netmask("fd00::/64"), "64");
        assert_eq!(netmask("10.0.0.0/33"), "");
    }

    #[test]
    fn the_bridge_gateway_and_the_pxe_host_are_filled_in() {
        let n = net(
            json!({"routes": [{"network": "10.0.0.0", "netmask": "255.255.255.0", "gateway": "$vinobridge"},
                                      {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.168.0.1"}]}),
        );
        let r = routes(&n, Some("192.168.2.10"));
        assert_eq!(
            (r[0].gateway.as_str(), r[1].gateway.as_str()),
            ("192.168.2.10", "192.168.0.1")
        );
        let spec = |v: Value| -> VinoSpec { serde_json::from_value(v).unwrap() };
        assert_eq!(bootp_file(&spec(json!({}))), None);
        assert_eq!(
            bootp_file(&spec(json!({"pxeBootImageHost": "10.0.0.5"}))).as_deref(),
            Some("http://10.0.0.5:80/dualboot.ipxe")
        );
        assert_eq!(
            bootp_file(&spec(
                json!({"pxeBootImageHost": "fd00::5", "pxeBootImageHostPort": 8080})
            ))
            .as_deref(),
            Some("http://[fd00::5]:8080/dualboot.ipxe")
        );
    }
}
