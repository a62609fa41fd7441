//! What Airship's ViNO gives a networkData template written in Go's template language: its Go structs' field
//! names, every field present with Go's zero value when unset (a nil map prints `map[]`, a nil slice `[]`).
//! Pure.

use serde_json::{json, Value};

use crate::crd::vino::{Network, VmNodeSet};
use crate::vino_plan::InterfacePlan;

fn interface(i: &crate::crd::vino::NetworkInterface) -> Value {
    json!({
        "Name": i.name, "Type": i.kind.clone().unwrap_or_default(), "NetworkName": i.network,
        "MTU": i.mtu.unwrap_or(0), "Options": i.options,
    })
}

fn network(n: &Network) -> Value {
    let routes: Vec<Value> = n
        .routes
        .iter()
        .map(|r| json!({"Network": r.network, "Netmask": r.netmask, "Gateway": r.gateway}))
        .collect();
    json!({
        "Name": n.name, "SubNet": n.subnet, "Type": n.kind.clone().unwrap_or_default(),
        "InstanceSubnetBitStep": n.instance_subnet_bit_step.unwrap_or(0),
        "StaticAllocationStart": n.static_allocation_start.clone().unwrap_or_default(),
        "StaticAllocationStop": n.static_allocation_stop.clone().unwrap_or_default(),
        "DHCPAllocationStart": n.dhcp_allocation_start.clone().unwrap_or_default(),
        "DHCPAllocationStop": n.dhcp_allocation_stop.clone().unwrap_or_default(),
        "DNSServers": n.dns_servers, "Routes": routes,
        "MACPrefix": n.mac_prefix.clone().unwrap_or_default(),
        "PhysicalInterface": n.physical_interface.clone().unwrap_or_default(),
        "BridgeName": n.bridge_name.clone().unwrap_or_default(),
    })
}

/// `.BMHName`, `.Node` (the node set), `.Networks`, `.Generated` (`IPAddresses` by network, `MACAddresses` by
/// interface) and `.BuilderDomain` (the VM: `Name`, `Role`, `BootMACAddress`, `Interfaces` with their
/// `IPAddress` and `MACAddress`).
pub fn template_values(
    bmh: &str,
    vm: &str,
    set: &VmNodeSet,
    networks: &[Network],
    interfaces: &[InterfacePlan],
    boot_mac: Option<&str>,
) -> Value {
    let mut ips = serde_json::Map::new();
    let mut macs = serde_json::Map::new();
    let mut domain_interfaces = Vec::new();
    for (spec, plan) in set.network_interfaces.iter().zip(interfaces) {
        let ip = plan.ip.clone().unwrap_or_default();
        ips.insert(plan.network.clone(), ip.clone().into());
        macs.insert(plan.name.clone(), plan.mac.clone().into());
        let mut i = interface(spec);
        i["IPAddress"] = ip.into();
        i["MACAddress"] = plan.mac.clone().into();
        domain_interfaces.push(i);
    }
    json!({
        "BMHName": bmh,
        "Node": {
            "Name": set.name, "Count": set.count, "BMHLabels": set.bmh_labels,
            "NetworkInterfaces": set.network_interfaces.iter().map(interface).collect::<Vec<_>>(),
            "BootInterfaceName": set.boot_interface_name.clone().unwrap_or_default(),
            "RootDeviceName": set.root_device_name.clone().unwrap_or_default(),
            "EnableVNC": set.enable_vnc,
        },
        "Networks": networks.iter().map(network).collect::<Vec<_>>(),
        "Generated": {"IPAddresses": ips, "MACAddresses": macs},
        "BuilderDomain": {
            "Name": vm, "Role": set.name, "BootMACAddress": boot_mac.unwrap_or_default(),
            "Interfaces": domain_interfaces,
        },
    })
}
