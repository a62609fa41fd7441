//! The VM's second NIC, on the appliance's provisioning network: a tap device given by the caller, in the PCIe
//! slot that makes the guest name it as `packages/appliance.yaml` expects.

use std::process::Command;

use anyhow::{bail, Result};

/// The VM's NIC on the provisioning network: a tap device that exists before the boot (on a bridge, or moved
/// into a network namespace once qemu holds it), and the NIC's MAC (qemu picks one when None).
#[derive(Clone, Debug)]
pub struct ProvisioningNic {
    pub tap: String,
    pub mac: Option<String>,
}

/// The PCIe slot the provisioning NIC sits in: behind a root port whose hot-plug slot number is 4, as a server's
/// slot-numbered NIC, so the guest names it `ens4` (systemd's slot naming), the interface `packages/appliance.yaml`
/// gives the provisioning network. The root port's slot is visible to the guest only with native PCIe hot-plug,
/// so ACPI hot-plug of bridges is off for such a VM (with it, the guest names the NIC by its path, `enp1s0`).
pub const PROVISIONING_SLOT: u8 = 4;

/// The provisioning NIC's devices: a root port at [`PROVISIONING_SLOT`], the NIC behind it on the tap.
pub(super) fn args(c: &mut Command, p: &ProvisioningNic) -> Result<()> {
    let name_ok = !p.tap.is_empty()
        && p.tap.len() < 16
        && p.tap
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !name_ok {
        bail!(
            "provisioning tap {:?}: not an interface name (1-15 letters, digits, '-', '_', '.')",
            p.tap
        );
    }
    let mac = match &p.mac {
        Some(m) if crate::firewall::is_mac(m) => format!(",mac={m}"),
        Some(m) => bail!("provisioning MAC {m:?}: not a MAC address (52:54:00:12:34:56)"),
        None => String::new(),
    };
    let slot = PROVISIONING_SLOT;
    c.args([
        "-global",
        "ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off",
        "-device",
        &format!("pcie-root-port,id=prov,chassis={slot},slot={slot},bus=pcie.0,addr={slot:#x}"),
        "-netdev",
        &format!("tap,id=p0,ifname={},script=no,downscript=no", p.tap),
        "-device",
        &format!("virtio-net-pci,netdev=p0,bus=prov{mac}"),
    ]);
    Ok(())
}
