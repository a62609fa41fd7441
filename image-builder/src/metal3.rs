//! Metal3 in an image with `components.metal3`: Ironic from the base suite's Debian packages and
//! baremetal-operator built from source, both as systemd units beside the control plane (which is made of units
//! too): they come up with the node whatever the pod network does, and they share Ironic's credentials through
//! files on the appliance. The configuration is rendered here from the spec, pure; the units and scripts are in
//! the overlay (`rootfs/`).
//!
//! Ironic is one process (API and conductor, `rpc_transport = none`, SQLite), with no Keystone: HTTP basic
//! auth against a password made at first boot (`foothold-metal3-auth`), which BMO reads from its auth files. It
//! drives BMCs over Redfish with virtual media and deploys live ISOs with the ramdisk interface; the BMC fetches
//! the ISO from the URL the BareMetalHost names (the agent's `/files/...`), so Ironic stores no image.

use crate::spec::{Spec, BMO_PLUGIN_DIR};

/// Ironic's API, on the appliance only: BMO is its one client, and no IPA ramdisk calls back (live ISOs).
pub const IRONIC_API: &str = "127.0.0.1:6385";
/// BMO's health endpoint (`/healthz`, `/readyz`).
pub const BMO_HEALTH: &str = "127.0.0.1:9440";
/// Where BMO finds `ironic/{username,password}` (`METAL3_AUTH_ROOT_DIR`).
pub const AUTH_DIR: &str = "/etc/metal3/auth";

/// Seconds between Ironic's syncs of every node's power state (Ironic's default: 60).
const SYNC_POWER_STATE_SECONDS: u32 = 300;
/// BareMetalHosts BMO reconciles at once (its default: the cores, at least 2, at most 8).
const BMO_CONCURRENCY: u32 = 8;

/// The systemd units, enabled in images with Metal3.
pub const UNITS: &[&str] = &[
    "foothold-metal3-auth.service",
    "ironic.service",
    "baremetal-operator.service",
];

/// Debian packages: Ironic (the library; the one-process launcher is Foothold's, so none of the packaged
/// daemons, their database prompts or their PXE/TFTP servers come with it).
pub const PACKAGES: &[&str] = &["python3-ironic"];

/// The interfaces Ironic enables: what BMO sets on a node with a `redfish-virtualmedia` BMC (boot
/// `redfish-virtual-media`, firmware and RAID `redfish`, inspect `agent` even with inspection disabled), the
/// ramdisk deploy of live ISOs, and the no-op rest.
const INTERFACES: &[(&str, &str)] = &[
    ("enabled_hardware_types", "redfish"),
    ("enabled_bios_interfaces", "redfish,no-bios"),
    ("enabled_boot_interfaces", "redfish-virtual-media"),
    ("enabled_console_interfaces", "no-console"),
    ("enabled_deploy_interfaces", "ramdisk,direct"),
    // What a node gets when BMO names none (any image but a live ISO): it needs an IPA ramdisk, and says so.
    ("default_deploy_interface", "direct"),
    ("enabled_firmware_interfaces", "redfish,no-firmware"),
    ("enabled_inspect_interfaces", "agent,no-inspect"),
    ("enabled_management_interfaces", "redfish"),
    ("enabled_network_interfaces", "noop"),
    ("enabled_power_interfaces", "redfish"),
    ("enabled_raid_interfaces", "redfish,no-raid"),
    ("enabled_rescue_interfaces", "no-rescue"),
    ("enabled_storage_interfaces", "noop"),
    ("enabled_vendor_interfaces", "redfish,no-vendor"),
];

/// The agent's arguments that make its `/readyz` report Ironic and BMO.
pub fn ready_checks() -> [String; 4] {
    [
        "--ready-check".into(),
        format!("ironic=http://{IRONIC_API}/"),
        "--ready-check".into(),
        format!("baremetal-operator=http://{BMO_HEALTH}/readyz"),
    ]
}

/// Every file, as (absolute path, text, mode).
pub fn render(spec: &Spec) -> Vec<(String, String, u32)> {
    let mut defaults = format!(
        "[DEFAULT]\nhost = {host}\nauth_strategy = http_basic\n\
         # LoadCredential= in ironic.service: the file foothold-metal3-auth makes, readable by the service.\n\
         http_basic_auth_user_file = /run/credentials/ironic.service/htpasswd\n\
         rpc_transport = none\nuse_stderr = true\nlog_file =\n",
        host = spec.hostname
    );
    for (k, v) in INTERFACES {
        defaults.push_str(&format!("{k} = {v}\n"));
    }
    let (host, port) = IRONIC_API.split_once(':').expect("host:port");
    let conf = format!(
        "# Written by foothold-build. Ironic as Metal3 needs it on an offline appliance: one process, SQLite, no\n\
         # message bus, no Keystone, Redfish BMCs with virtual media, live ISOs by the ramdisk deploy.\n\
         {defaults}\n\
         [api]\nhost_ip = {host}\nport = {port}\n\n\
         [conductor]\n# No IPA ramdisk to clean with: BareMetalHosts say automatedCleaningMode: disabled too.\n\
         automated_clean = false\n\
         # One conductor syncs every node's power state (three Redfish calls a node) each interval: at 60 s\n\
         # and 1,000 hosts, 50 calls a second, the most of any caller (seen with the scale benchmark). A host\n\
         # powered from outside is seen (and, by force_power_state_during_sync, put back) within the interval.\n\
         sync_power_state_interval = {SYNC_POWER_STATE_SECONDS}\n\n\
         [database]\nconnection = sqlite:////var/lib/ironic/ironic.sqlite\n\n\
         [deploy]\n# The BMC fetches a live ISO from the URL the BareMetalHost gives (the agent's /files/...).\n\
         ramdisk_image_download_source = http\ndefault_boot_mode = uefi\nfast_track = false\n\n\
         [dhcp]\ndhcp_provider = none\n\n\
         [nova]\n# No Nova to tell of power changes (each try failed with a warning).\n\
         send_power_notifications = false\n\n\
         [oslo_concurrency]\nlock_path = /run/ironic\n\n\
         [redfish]\nuse_swift = false\n\n\
         [json_rpc]\nauth_strategy = noauth\n"
    );
    let bmo = format!(
        "# Read by baremetal-operator.service; written by foothold-build.\n\
         IRONIC_ENDPOINT=http://{IRONIC_API}/v1/\nPROVISIONER_PLUGIN_DIR={BMO_PLUGIN_DIR}\n\
         METAL3_AUTH_ROOT_DIR={AUTH_DIR}\nBMO_HEALTH_ADDR={BMO_HEALTH}\n\
         # Reconciles wait on Ironic and the API server, not on this CPU: more than BMO's default (the cores).\n\
         # With 1,000 hosts 8 was faster than 2 and than 16 (scripts/bench-metal3-scale.sh).\n\
         BMO_CONCURRENCY={BMO_CONCURRENCY}\n"
    );
    vec![
        ("/etc/ironic/ironic.conf".into(), conf, 0o644),
        ("/etc/foothold/metal3.env".into(), bmo, 0o644),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ironic_enables_what_bmo_sets_on_a_redfish_virtual_media_node() {
        let spec = crate::spec::tests::metal3_spec(|t| t).unwrap();
        let files = render(&spec);
        let conf = &files
            .iter()
            .find(|f| f.0 == "/etc/ironic/ironic.conf")
            .unwrap()
            .1;
        let value = |key: &str| {
            conf.lines()
                .find_map(|l| l.strip_prefix(&format!("{key} = ")))
                .unwrap_or_else(|| panic!("{key} not set in\n{conf}"))
                .split(',')
                .collect::<Vec<_>>()
        };
        // register.go: boot, firmware, raid and inspect interfaces BMO sets; ironic.go: ramdisk for live-iso.
        assert!(value("enabled_boot_interfaces").contains(&"redfish-virtual-media"));
        assert!(value("enabled_firmware_interfaces").contains(&"redfish"));
        assert!(value("enabled_raid_interfaces").contains(&"redfish"));
        assert!(value("enabled_inspect_interfaces").contains(&"agent"));
        assert!(value("enabled_deploy_interfaces").contains(&"ramdisk"));
        assert_eq!(value("rpc_transport"), ["none"]);
        assert_eq!(value("auth_strategy")[0], "http_basic");
        assert_eq!(value("ramdisk_image_download_source"), ["http"]);
        assert_eq!(
            value("connection")[0],
            "sqlite:////var/lib/ironic/ironic.sqlite"
        );
        let env = &files
            .iter()
            .find(|f| f.0 == "/etc/foothold/metal3.env")
            .unwrap()
            .1;
        assert!(
            env.contains("IRONIC_ENDPOINT=http://127.0.0.1:6385/v1/\n"),
            "{env}"
        );
        assert!(
            env.contains("PROVISIONER_PLUGIN_DIR=/usr/local/lib/metal3/plugins\n"),
            "{env}"
        );
    }

    /// The value of `key` in `[section]` of an INI text: Ironic ignores an option in the wrong section.
    fn ini_value<'a>(text: &'a str, section: &str, key: &str) -> Option<&'a str> {
        let mut current = "";
        text.lines().find_map(|line| {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = name;
                return None;
            }
            let (k, v) = line.split_once(" = ")?;
            (current == section && k == key).then_some(v)
        })
    }

    #[test]
    fn scale_settings_are_where_ironic_and_bmo_read_them() {
        let spec = crate::spec::tests::metal3_spec(|t| t).unwrap();
        let files = render(&spec);
        let file = |path: &str| &files.iter().find(|f| f.0 == path).unwrap().1;
        let conf = file("/etc/ironic/ironic.conf");
        let interval = SYNC_POWER_STATE_SECONDS.to_string();
        assert_eq!(
            ini_value(conf, "conductor", "sync_power_state_interval"),
            Some(interval.as_str()),
            "{conf}"
        );
        assert_eq!(
            ini_value(conf, "DEFAULT", "sync_power_state_interval"),
            None
        );
        assert_eq!(
            ini_value(conf, "nova", "send_power_notifications"),
            Some("false")
        );
        // systemd's EnvironmentFile: KEY=VALUE on a line of its own.
        let env = file("/etc/foothold/metal3.env");
        let concurrency = format!("BMO_CONCURRENCY={BMO_CONCURRENCY}");
        assert!(env.lines().any(|l| l == concurrency), "{env}");
        // Every variable BMO's unit reads is in that file (systemd expands an unset one to nothing, and BMO
        // then refuses the empty flag or takes its default without a word).
        let unit = include_str!("../../rootfs/etc/systemd/system/baremetal-operator.service");
        let used: Vec<&str> = unit
            .split("${")
            .skip(1)
            .map(|rest| &rest[..rest.find('}').expect("a closing brace")])
            .collect();
        assert!(used.contains(&"BMO_HEALTH_ADDR"), "{unit}");
        for var in used {
            assert!(
                env.lines().any(|l| l.starts_with(&format!("{var}="))),
                "{var} is not in {env}"
            );
        }
    }
}
