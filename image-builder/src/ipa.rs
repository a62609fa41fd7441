//! Ironic's deploy ramdisk (`components.ipa`): ironic-python-agent, started at boot, with the tools it runs to
//! inspect a machine, clean its disks and write an image to them. Ironic boots it by PXE (the kernel and the
//! initramfs, which holds the whole root) or builds a virtual-media ISO from the same two files, and names
//! itself on the kernel command line (`ipa-api-url`), so the image carries no address of the site. Pure but
//! [`unpack`]: the configuration rendered as (path, text, mode).

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::cmd::CommandExt as _;

/// Debian packages the agent runs or imports beyond the boot essentials: its Python libraries (the Depends of
/// Debian's package that it imports: tooz through its burn-in module, which its hardware manager imports) and
/// the commands its inspection, cleaning and deploy call (lshw, dmidecode, lsblk, sgdisk, parted, wipefs,
/// hdparm, nvme, smartctl, mdadm, efibootmgr, qemu-img, mkfs.vfat for the config drive; hwclock, which it runs
/// before it powers the host off at the end of a deploy: without it that power-off fails and Ironic waits 30 s
/// before forcing one; hexdump, for the disk identifier it reports after writing the image).
pub const PACKAGES: &[&str] = &[
    "python3-cryptography",
    "python3-eventlet",
    "python3-oslo.concurrency",
    "python3-oslo.config",
    "python3-oslo.log",
    "python3-oslo.service",
    "python3-oslo.utils",
    "python3-pbr",
    "python3-pint",
    "python3-psutil",
    "python3-pyudev",
    "python3-requests",
    "python3-stevedore",
    "python3-tenacity",
    "python3-tooz",
    "python3-werkzeug",
    "python3-yaml",
    "python3-zeroconf",
    "dmidecode",
    "dosfstools",
    "efibootmgr",
    "ethtool",
    "gdisk",
    "hdparm",
    "lshw",
    "mdadm",
    "nvme-cli",
    "parted",
    "pciutils",
    "psmisc",
    "qemu-utils",
    "smartmontools",
    "util-linux",
    // hwclock (trixie moved it out of util-linux).
    "util-linux-extra",
    // hexdump.
    "bsdextrautils",
];

/// The agent's unit (Foothold's: Debian's runs it through an init script of OpenStack's packaging tools).
pub const UNIT: &str = "ironic-python-agent.service";

/// The units a ramdisk enables: the network (DHCP on every NIC) and the agent.
pub const UNITS: &[&str] = &["systemd-networkd.service", UNIT];

/// Every file, as (absolute path, text, mode).
pub fn render() -> Vec<(String, String, u32)> {
    vec![
        (
            format!("/etc/systemd/system/{UNIT}"),
            "# Written by foothold-build. Ironic's agent: it finds Ironic on the kernel command line (ipa-api-url,\n\
             # put there by Ironic), looks its node up by the MACs of this machine, and does what Ironic asks.\n\
             # Its log goes to the console too: the serial log of a node that failed tells why.\n\
             [Unit]\n\
             Description=Ironic Python Agent\n\
             Wants=network-online.target\n\
             After=network-online.target\n\n\
             [Service]\n\
             ExecStart=/usr/bin/ironic-python-agent --config-file /etc/ironic-python-agent/ironic-python-agent.conf --config-dir /etc/ironic-python-agent.d\n\
             LogsDirectory=ironic-python-agent\n\
             Restart=always\n\
             RestartSec=5\n\
             StandardOutput=journal+console\n\
             StandardError=journal+console\n\n\
             [Install]\n\
             WantedBy=multi-user.target\n"
                .into(),
            0o644,
        ),
        (
            "/etc/ironic-python-agent.d/foothold.conf".into(),
            "# Written by foothold-build. Ironic's address and the inspection callback come on the kernel command\n\
             # line; the log goes to standard error (the journal and the console).\n\
             [DEFAULT]\nuse_stderr = true\n\
             # An image that fails its checksum is fetched again this many times (the default, 9, is for flaky\n\
             # links: on a site's provisioning network a wrong checksum took 10 minutes to be reported).\n\
             image_download_connection_retries = 2\n"
                .into(),
            0o644,
        ),
        // networkd's wait-online waits for every NIC it manages: a machine with one cabled NIC of several
        // would wait it out (2 minutes) before the agent started.
        (
            "/etc/systemd/system/systemd-networkd-wait-online.service.d/foothold.conf".into(),
            "[Service]\nExecStart=\nExecStart=/usr/lib/systemd/systemd-networkd-wait-online --any --timeout=120\n"
                .into(),
            0o644,
        ),
    ]
}

/// Unpacks Debian's agent package into `root` without installing it (so without its Depends; see
/// [`PACKAGES`]), as its maintainer scripts would leave it, but for the service, which is ours.
pub fn unpack(deb: &Path, root: &Path) -> Result<()> {
    Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(root)
        .run()
        .with_context(|| format!("components.ipa.package: unpacking {}", deb.display()))?;
    // Its init script would be run by systemd's SysV generator beside the unit.
    for f in [
        "etc/init.d/ironic-python-agent",
        "usr/lib/systemd/system/ironic-python-agent.service",
    ] {
        let _ = std::fs::remove_file(root.join(f));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_starts_after_the_network_and_logs_to_the_console() {
        let files = render();
        let unit = &files
            .iter()
            .find(|(p, ..)| p.ends_with(UNIT))
            .expect("the unit")
            .1;
        assert!(unit.contains("\nAfter=network-online.target\n"), "{unit}");
        assert!(unit.contains("StandardOutput=journal+console"), "{unit}");
        let exec = unit
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap();
        assert!(exec.starts_with("/usr/bin/ironic-python-agent "), "{exec}");
        assert!(UNITS.contains(&UNIT));
        // The Python libraries the agent imports at start are installed, not only its commands.
        for p in ["python3-oslo.service", "python3-tooz", "python3-zeroconf"] {
            assert!(PACKAGES.contains(&p), "{p}");
        }
        // And the commands it runs at a deploy's end: hwclock before its soft power-off (without it the power-off
        // failed, `No such file or directory: 'hwclock'`, and Ironic forced one after 30 s), hexdump after the
        // image is written.
        for p in ["util-linux-extra", "bsdextrautils"] {
            assert!(PACKAGES.contains(&p), "{p}");
        }
    }
}
