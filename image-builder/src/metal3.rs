//! Metal3 in an image with `components.metal3`: Ironic from the base suite's Debian packages and
//! baremetal-operator built from source, both as systemd units beside the control plane (which is made of units
//! too): they come up with the node whatever the pod network does, and they share Ironic's credentials through
//! files on the appliance. The configuration is rendered here from the spec, pure; the units and scripts are in
//! the overlay (`rootfs/`).
//!
//! Ironic is one process (API and conductor, `rpc_transport = none`, SQLite), with no Keystone: HTTP basic
//! auth against a password made at first boot (`foothold-metal3-auth`), which BMO reads from its auth files.
//! It drives BMCs over Redfish (with virtual media) or IPMI. Live ISOs are deployed with the ramdisk interface:
//! the BMC fetches the ISO from the URL the BareMetalHost names (the agent's `/files/...`). With a deploy
//! ramdisk (`components.metal3.deployRamdisk`) and the provisioning network served (`network.provisioning.dhcp`),
//! Ironic also inspects hosts, cleans their disks' metadata and writes images to them (`direct`), booting its
//! agent by iPXE from its HTTP root or by virtual media; the agent reaches its API on the provisioning address.
//! On an appliance that serves TLS (`components.agentTls`) that API is HTTPS, with a key and self-signed
//! certificate made at first boot (`foothold-metal3-auth`), which BMO, the agent's `/readyz` and the deploy
//! ramdisk verify it against: Ironic puts the certificate into the virtual-media ISOs it makes, and iPXE loads it
//! as a second initrd (a template of Ironic's own, [`stage`]).

use crate::spec::{Spec, BMO_PLUGIN_DIR, DEPLOY_RAMDISK_DIR};

/// Ironic's API port.
pub const IRONIC_PORT: u16 = 6385;
/// Ironic's working directory (`[DEFAULT] tempdir`), which `ironic.service` empties and makes at each start.
pub const TEMPDIR: &str = "/var/lib/ironic/tmp";
/// Ironic's API on an appliance that serves no provisioning network: BMO is its one client.
pub const IRONIC_API: &str = "127.0.0.1:6385";
/// BMO's health endpoint (`/healthz`, `/readyz`).
pub const BMO_HEALTH: &str = "127.0.0.1:9440";
/// Where BMO finds `ironic/{username,password}` (`METAL3_AUTH_ROOT_DIR`).
pub const AUTH_DIR: &str = "/etc/metal3/auth";
/// The system user baremetal-operator runs as (`baremetal-operator.service`): it reads Ironic's credentials
/// and its own kubeconfig through this user's group and ownership, nothing else of root's.
pub const BMO_USER: &str = "baremetal-operator";
/// Ironic's HTTP root: iPXE's scripts, the deploy kernel and ramdisk it boots nodes with, the ISOs it builds
/// for virtual media. Served on the provisioning address by `ironic-httpboot.service`.
pub const HTTP_ROOT: &str = "/var/lib/ironic/httpboot";
/// The unit serving [`HTTP_ROOT`].
pub const HTTPBOOT_UNIT: &str = "ironic-httpboot.service";
/// Ironic's TLS certificate (then the site CA), issued by the site CA for the names in [`TLS_NAMES`] at every
/// boot and daily when due (`foothold-pki.service`); the key beside it is root's, handed to Ironic as a
/// credential.
pub const TLS_CERT: &str = "/etc/ironic/tls/cert.pem";
/// The site CA, which Ironic's clients (BMO, the agent's /readyz, the deploy ramdisk) verify it with.
pub const SITE_CA: &str = "/etc/foothold/tls/ca.pem";
/// The names, beyond loopback's, Ironic's certificate is for (`IP:` the provisioning address).
const TLS_NAMES: &str = "/etc/ironic/tls-names";
/// The iPXE template Ironic renders each node's deploy boot script from (Ironic's own, plus the certificate's
/// initrd).
const IPXE_TEMPLATE: &str = "/etc/ironic/ipxe_config.template";
/// Ironic's packaged iPXE template, in the staged root.
const PACKAGED_IPXE_TEMPLATE: &str =
    "usr/lib/python3/dist-packages/ironic/drivers/modules/ipxe_config.template";
/// The initrd holding the site CA and IPA's configuration naming it, in [`HTTP_ROOT`] (made at each start of
/// Ironic from [`SITE_CA`] by `ironic-ca-initrd`); its name is iPXE's and the EFI stub's for it.
const CA_INITRD: &str = "foothold-ironic-ca";

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
/// daemons, their database prompts or their PXE/TFTP servers come with it), ipmitool, which Ironic's `ipmi`
/// hardware type runs, and genisoimage, whose mkisofs makes the virtual-media ISOs of the deploy ramdisk.
pub const PACKAGES: &[&str] = &["python3-ironic", "ipmitool", "genisoimage"];

/// The interfaces Ironic enables: what BMO sets on a node by the scheme of its BMC address
/// (`redfish-virtualmedia://` boots by `redfish-virtual-media`, `redfish://` and `ipmi://` by `ipxe`;
/// firmware and RAID `redfish`, inspect `agent` even with inspection disabled), the ramdisk deploy of live
/// ISOs and the `direct` deploy of disk images, and the no-op rest.
const INTERFACES: &[(&str, &str)] = &[
    ("enabled_hardware_types", "redfish,ipmi"),
    ("enabled_bios_interfaces", "redfish,no-bios"),
    ("enabled_boot_interfaces", "redfish-virtual-media,ipxe"),
    ("enabled_console_interfaces", "no-console"),
    ("enabled_deploy_interfaces", "ramdisk,direct"),
    // What a node gets when BMO names none (any image but a live ISO): it needs an IPA ramdisk, and says so.
    ("default_deploy_interface", "direct"),
    ("enabled_firmware_interfaces", "redfish,no-firmware"),
    ("enabled_inspect_interfaces", "agent,no-inspect"),
    ("enabled_management_interfaces", "redfish,ipmitool"),
    ("enabled_network_interfaces", "noop"),
    ("enabled_power_interfaces", "redfish,ipmitool"),
    ("enabled_raid_interfaces", "redfish,agent,no-raid"),
    ("enabled_rescue_interfaces", "no-rescue"),
    ("enabled_storage_interfaces", "noop"),
    ("enabled_vendor_interfaces", "redfish,ipmitool,no-vendor"),
];

/// Where Ironic is reached and what it boots nodes with, from the spec.
struct Plan {
    /// `host:port` of Ironic's API: the provisioning address when the appliance serves that network (the
    /// deploy ramdisk on the nodes calls it), else [`IRONIC_API`].
    api: String,
    /// The provisioning address, when the appliance serves that network: where iPXE and the BMCs fetch from
    /// Ironic's HTTP root.
    provisioning: Option<String>,
    /// Ironic has a deploy ramdisk to boot.
    ramdisk: bool,
    /// ... and the EFI system partition of the virtual-media ISOs it makes of it.
    esp: bool,
    /// Ironic's API is HTTPS: it is on the provisioning network of an appliance that serves TLS.
    tls: bool,
}

impl Plan {
    /// Ironic's API as its clients name it.
    fn api_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.api)
    }
}

fn plan(spec: &Spec) -> Plan {
    let deploy_ramdisk = spec
        .components
        .metal3
        .as_ref()
        .and_then(|m| m.deploy_ramdisk.as_ref());
    // A spec with a deploy ramdisk serves the provisioning network (validated); without one, Ironic boots
    // nothing from it and stays on loopback.
    let provisioning = crate::build::configure::provisioning_dhcp(spec)
        .filter(|_| deploy_ramdisk.is_some())
        .map(|(p, _)| p.address.split('/').next().unwrap_or_default().to_owned());
    Plan {
        api: provisioning
            .as_ref()
            .map_or_else(|| IRONIC_API.to_owned(), |a| format!("{a}:{IRONIC_PORT}")),
        tls: provisioning.is_some() && spec.components.agent_tls,
        provisioning,
        ramdisk: deploy_ramdisk.is_some(),
        esp: deploy_ramdisk.is_some_and(|d| d.esp.is_some()),
    }
}

/// The agent's arguments that make its `/readyz` report Ironic and BMO.
pub fn ready_checks(spec: &Spec) -> Vec<String> {
    let p = plan(spec);
    let mut args = vec![
        "--ready-check".into(),
        format!("ironic={}/", p.api_url()),
        "--ready-check".into(),
        format!("baremetal-operator=http://{BMO_HEALTH}/readyz"),
    ];
    if p.tls {
        args.extend([
            "--ready-check-ca".into(),
            SITE_CA.into(),
            "--certificate".into(),
            format!("ironic={TLS_CERT}"),
        ]);
    }
    args
}

/// The units this spec's Metal3 enables beyond [`UNITS`].
pub fn extra_units(spec: &Spec) -> Vec<&'static str> {
    let p = plan(spec);
    if p.provisioning.is_some() {
        vec![HTTPBOOT_UNIT]
    } else {
        vec![]
    }
}

/// Every file, as (absolute path, text, mode).
pub fn render(spec: &Spec) -> Vec<(String, String, u32)> {
    let p = plan(spec);
    let mut defaults = format!(
        "[DEFAULT]\nhost = {host}\nauth_strategy = http_basic\n\
         # LoadCredential= in ironic.service: the file foothold-metal3-auth makes, readable by the service.\n\
         http_basic_auth_user_file = /run/credentials/ironic.service/htpasswd\n\
         rpc_transport = none\nuse_stderr = true\nlog_file =\n\
         # Its working files (the virtual-media ISO it makes of the deploy ramdisk: the ramdisk copied, then the\n\
         # ISO, about 400 MiB at once) on its state directory's disk, made empty at each start (ironic.service): the\n\
         # private /tmp systemd gives a DynamicUser service was a tmpfs of 392 MiB on a 4 GiB appliance, and the\n\
         # ISO did not fit.\n\
         tempdir = {TEMPDIR}\n",
        host = spec.hostname
    );
    for (k, v) in INTERFACES {
        defaults.push_str(&format!("{k} = {v}\n"));
    }
    if p.esp {
        defaults.push_str(&format!(
            "# The EFI system partition of the virtual-media ISOs Ironic makes of the deploy ramdisk (mkisofs).\n\
             esp_image = {DEPLOY_RAMDISK_DIR}/esp\n"
        ));
    }
    let (host, port) = p.api.split_once(':').expect("host:port");
    let (clean, cleaning) = if p.ramdisk {
        (
            "true",
            "# Cleaning in Metal3's metadata mode: the partition tables and file system signatures of every disk\n\
             # are erased (minutes); the whole-disk shred Ironic would otherwise run first takes hours.\n\
             erase_devices_priority = 0\nerase_devices_metadata_priority = 10\n",
        )
    } else {
        ("false", "")
    };
    let mut deploy = format!(
        "[deploy]\n# The BMC fetches a live ISO from the URL the BareMetalHost gives (the agent's /files/...).\n\
         ramdisk_image_download_source = http\ndefault_boot_mode = uefi\n{cleaning}\
         # The ipxe boot interface writes its boot script here as it loads, on every appliance: without it\n\
         # Ironic's default (/httpboot, which nothing makes) stops Ironic at start.\n\
         http_root = {HTTP_ROOT}\n"
    );
    let mut sections = String::new();
    match &p.provisioning {
        Some(addr) => {
            deploy.push_str(&format!(
                "# One boot of the deploy ramdisk serves inspection, cleaning and deploy: it stays up between them.\n\
                 fast_track = true\n\
                 http_url = http://{addr}:{port}\n",
                port = crate::dhcp::BOOT_SCRIPT_PORT
            ));
            sections.push_str(&format!(
                "[service_catalog]\n# The address the deploy ramdisk calls back (ipa-api-url on its command line).\n\
                 endpoint_override = {api}\n\n\
                 [pxe]\n# The deploy ramdisk's log on the serial console too.\n\
                 kernel_append_params = nofb nomodeset vga=normal console=tty0 console=ttyS0,115200n8\n\
                 tftp_root = /var/lib/ironic/tftpboot\ntftp_master_path = /var/lib/ironic/tftpboot/master_images\n\
                 images_path = /var/lib/ironic/images\ninstance_master_path = /var/lib/ironic/master_images\n\n\
                 {ipxe_template}\
                 [agent]\n# The deploy ramdisk's logs, kept when a deploy or cleaning fails.\n\
                 deploy_logs_local_path = /var/lib/ironic/deploy-logs\n{api_ca}\n",
                api = p.api_url(),
                ipxe_template = if p.tls {
                    format!("# Ironic's own, plus the initrd with its certificate (foothold-build).\nipxe_config_template = {IPXE_TEMPLATE}\n")
                } else {
                    String::new()
                },
                api_ca = if p.tls {
                    format!("# Put into the virtual-media ISOs, for the deploy ramdisk to verify the API with.\napi_ca_file = {SITE_CA}\n")
                } else {
                    String::new()
                },
            ));
            if p.tls {
                sections.push_str(&format!(
                    "[ssl]\n# The site CA's (foothold-pki.service); the key is a credential of ironic.service.\n\
                     cert_file = {TLS_CERT}\nkey_file = /run/credentials/ironic.service/tls-key\n\n"
                ));
            }
        }
        None => deploy.push_str("fast_track = false\n"),
    }
    let ssl_api = if p.tls { "enable_ssl_api = true\n" } else { "" };
    let allowed = if p.ramdisk {
        format!("# file:// URLs Ironic reads: its state and the deploy ramdisk placed in the image.\nfile_url_allowed_paths = /var/lib/ironic,{DEPLOY_RAMDISK_DIR}\n")
    } else {
        String::new()
    };
    let conf = format!(
        "# Written by foothold-build. Ironic as Metal3 needs it on an offline appliance: one process, SQLite, no\n\
         # message bus, no Keystone, Redfish and IPMI BMCs, live ISOs by the ramdisk deploy, disk images by the\n\
         # direct deploy when there is a deploy ramdisk.\n\
         {defaults}\n\
         [api]\nhost_ip = {host}\nport = {port}\n{ssl_api}\n\
         [conductor]\n# Cleaning needs the deploy ramdisk; without one BareMetalHosts say automatedCleaningMode: disabled.\n\
         automated_clean = {clean}\n{allowed}\
         # The deploy ramdisk is zstd-compressed on purpose (the kernel unpacks it; PXE fetches a third of it):\n\
         # Ironic would decompress any zstd file it fetches.\n\
         disable_zstandard_decompression = true\n\
         # One conductor syncs every node's power state (three Redfish calls a node) each interval: at 60 s\n\
         # and 1,000 hosts, 50 calls a second, the most of any caller (seen with the scale benchmark). A host\n\
         # powered from outside is seen (and, by force_power_state_during_sync, put back) within the interval.\n\
         sync_power_state_interval = {SYNC_POWER_STATE_SECONDS}\n\n\
         [database]\nconnection = sqlite:////var/lib/ironic/ironic.sqlite\n\n\
         {deploy}\n\
         [dhcp]\n# The provisioning network's DHCP is the appliance's dnsmasq, configured from the spec.\n\
         dhcp_provider = none\n\n\
         [nova]\n# No Nova to tell of power changes (each try failed with a warning).\n\
         send_power_notifications = false\n\n\
         [oslo_concurrency]\nlock_path = /run/ironic\n\n\
         [redfish]\nuse_swift = false\n\n\
         {sections}\
         [json_rpc]\nauth_strategy = noauth\n"
    );
    let ramdisk_env = if p.ramdisk {
        format!(
            "# The deploy ramdisk BMO names on every node (Ironic reads file:// URLs on the appliance).\n\
             DEPLOY_KERNEL_URL=file://{DEPLOY_RAMDISK_DIR}/kernel\n\
             DEPLOY_RAMDISK_URL=file://{DEPLOY_RAMDISK_DIR}/initramfs\n"
        )
    } else {
        String::new()
    };
    let bmo = format!(
        "# Read by baremetal-operator.service; written by foothold-build.\n\
         IRONIC_ENDPOINT={api}/v1/\nPROVISIONER_PLUGIN_DIR={BMO_PLUGIN_DIR}\n\
         METAL3_AUTH_ROOT_DIR={AUTH_DIR}\nBMO_HEALTH_ADDR={BMO_HEALTH}\n{ca}\
         # Reconciles wait on Ironic and the API server, not on this CPU: more than BMO's default (the cores).\n\
         # With 1,000 hosts 8 was faster than 2 and than 16 (scripts/bench-metal3-scale.sh).\n\
         BMO_CONCURRENCY={BMO_CONCURRENCY}\n{ramdisk_env}",
        api = p.api_url(),
        ca = if p.tls {
            format!("IRONIC_CACERT_FILE={SITE_CA}\n")
        } else {
            String::new()
        }
    );
    let mut files = vec![
        ("/etc/ironic/ironic.conf".into(), conf, 0o644),
        ("/etc/foothold/metal3.env".into(), bmo, 0o644),
    ];
    if let Some(addr) = &p.provisioning {
        files.push((
            format!("/etc/systemd/system/{HTTPBOOT_UNIT}"),
            format!(
                "# Written by foothold-build. Ironic's HTTP root on the provisioning network: iPXE's scripts, the\n\
                 # deploy kernel and ramdisk, the ISOs Ironic builds for virtual media. Python's own server (Ironic\n\
                 # brings Python), as Ironic's user, read-only.\n\
                 [Unit]\nDescription=Ironic's HTTP root for network boot and virtual media\n\
                 Wants=ironic.service\nAfter=ironic.service\n\n\
                 [Service]\n\
                 ExecStart=/usr/bin/python3 -m http.server --bind {addr} --directory {HTTP_ROOT} {port}\n\
                 DynamicUser=yes\nUser=ironic\nStateDirectory=ironic\n\
                 ProtectSystem=strict\nProtectHome=yes\nPrivateTmp=yes\nNoNewPrivileges=yes\n\
                 # Until the provisioning address is up the bind fails; systemd starts it again.\n\
                 Restart=always\nRestartSec=3\n\n\
                 [Install]\nWantedBy=multi-user.target\n",
                port = crate::dhcp::BOOT_SCRIPT_PORT
            ),
            0o644,
        ));
        if p.tls {
            files.push((TLS_NAMES.into(), format!("IP:{addr}\n"), 0o644));
            files.push((
                "/etc/systemd/system/ironic.service.d/foothold-tls.conf".into(),
                format!(
                    "# Written by foothold-build: Ironic's API on HTTPS (the appliance serves TLS).\n[Service]\n\
                     LoadCredential=tls-key:/etc/ironic/tls/key.pem\n\
                     # The deploy ramdisk's initrd holding the site CA, for iPXE (its template names it).\n\
                     ExecStartPre=/usr/local/lib/foothold/ironic-ca-initrd {SITE_CA} {HTTP_ROOT}/{CA_INITRD}.cpio.gz\n"
                ),
                0o644,
            ));
        }
    }
    files
}

/// What Ironic's configuration needs from the staged `root`: with TLS, its iPXE template made from the
/// packaged one ([`ipxe_template`]).
pub fn stage(spec: &Spec, root: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let p = plan(spec);
    let Some(addr) = p.provisioning.as_deref().filter(|_| p.tls) else {
        return Ok(());
    };
    let packaged = root.join(PACKAGED_IPXE_TEMPLATE);
    let text = std::fs::read_to_string(&packaged)
        .with_context(|| format!("Ironic's iPXE template {}", packaged.display()))?;
    let ours = ipxe_template(&text, addr)
        .with_context(|| format!("Ironic's iPXE template {}", packaged.display()))?;
    std::fs::write(root.join(IPXE_TEMPLATE.trim_start_matches('/')), ours)?;
    Ok(())
}

/// Ironic's iPXE template with the certificate's initrd loaded after the deploy ramdisk, from the HTTP root on
/// `addr`: an `initrd` line after the ramdisk's, and its name on the kernel's command line (where the EFI stub
/// looks for initrds when iPXE does not hand them over itself). An error if the template's deploy lines are
/// not where Ironic 29 has them.
fn ipxe_template(packaged: &str, addr: &str) -> anyhow::Result<String> {
    const RAMDISK_NAME: &str =
        "initrd={{ pxe_options.initrd_filename|default(\"deploy_ramdisk\", true) }}";
    let mut out = String::new();
    let (mut kernel, mut initrd) = (false, false);
    for line in packaged.lines() {
        if !kernel && line.starts_with("kernel ") && line.contains(RAMDISK_NAME) {
            out.push_str(&line.replacen(
                RAMDISK_NAME,
                &format!("{RAMDISK_NAME} initrd={CA_INITRD}"),
                1,
            ));
            out.push('\n');
            kernel = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if kernel && !initrd && line.starts_with("initrd ") && line.contains("deployment_ari_path")
        {
            out.push_str(&format!(
                "initrd --name {CA_INITRD} http://{addr}:{port}/{CA_INITRD}.cpio.gz || goto retry\n",
                port = crate::dhcp::BOOT_SCRIPT_PORT
            ));
            initrd = true;
        }
    }
    if !(kernel && initrd) {
        anyhow::bail!(
            "no deploy kernel line naming {RAMDISK_NAME:?} followed by the deploy ramdisk's initrd line: \
             the certificate's initrd cannot be added"
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
