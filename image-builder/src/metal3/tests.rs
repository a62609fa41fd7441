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

/// [`ini_value`], which must be set.
fn setting<'a>(conf: &'a str, section: &str, key: &str) -> &'a str {
    ini_value(conf, section, key).unwrap_or_else(|| panic!("[{section}] {key} in\n{conf}"))
}

/// The appliance serving its provisioning network, with a deploy ramdisk: what IPA-based provisioning needs.
fn provisioning_spec() -> Spec {
    crate::spec::tests::metal3_spec(|t| {
        t.replace(
            "  manifests:",
            "    deployRamdisk: {kernel: {path: ipa.kernel}, initramfs: {path: ipa.initramfs}, esp: {path: ipa.esp}}\n  manifests:",
        )
        .replace(
            "address: 172.22.0.1/24}",
            "address: 172.22.0.1/24, dhcp: {range: 172.22.0.10-172.22.0.100}}",
        )
    })
    .unwrap()
}

#[test]
fn with_a_deploy_ramdisk_and_the_provisioning_network_ironic_inspects_cleans_and_boots_by_ipxe() {
    let spec = provisioning_spec();
    let files = render(&spec);
    let file = |path: &str| &files.iter().find(|f| f.0 == path).unwrap().1;
    let conf = file("/etc/ironic/ironic.conf");
    let get = |section: &str, key: &str| setting(conf, section, key);
    // The deploy ramdisk calls the API on the provisioning address; iPXE and BMCs fetch from the HTTP root
    // there, on the port dnsmasq's iPXE clients are sent to.
    assert_eq!(get("api", "host_ip"), "172.22.0.1");
    assert_eq!(
        get("service_catalog", "endpoint_override"),
        "http://172.22.0.1:6385"
    );
    assert_eq!(get("deploy", "http_url"), "http://172.22.0.1:6180");
    assert_eq!(get("deploy", "http_root"), HTTP_ROOT);
    assert_eq!(get("deploy", "fast_track"), "true");
    // Cleaning in metadata mode only.
    assert_eq!(get("conductor", "automated_clean"), "true");
    assert_eq!(get("deploy", "erase_devices_priority"), "0");
    assert_eq!(get("deploy", "erase_devices_metadata_priority"), "10");
    assert!(get("conductor", "file_url_allowed_paths")
        .split(',')
        .any(|p| p == DEPLOY_RAMDISK_DIR));
    for (key, wanted) in [
        ("enabled_hardware_types", "ipmi"),
        ("enabled_power_interfaces", "ipmitool"),
        ("enabled_management_interfaces", "ipmitool"),
        ("enabled_boot_interfaces", "ipxe"),
        ("enabled_deploy_interfaces", "direct"),
    ] {
        assert!(get("DEFAULT", key).split(',').any(|v| v == wanted), "{key}");
    }
    assert!(get("pxe", "kernel_append_params").contains("console=ttyS0"));
    assert_eq!(
        get("DEFAULT", "esp_image"),
        format!("{DEPLOY_RAMDISK_DIR}/esp")
    );
    assert!(PACKAGES.contains(&"genisoimage"));
    // The ISO is made in Ironic's state directory, which its unit makes (not in its private tmpfs /tmp).
    assert_eq!(get("DEFAULT", "tempdir"), TEMPDIR);
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../rootfs/etc/systemd/system/ironic.service"),
    )
    .unwrap();
    assert!(
        unit.contains(&format!("ExecStartPre=/bin/mkdir -p {TEMPDIR}\n")),
        "{unit}"
    );
    // BMO names the deploy ramdisk on every node, from where the image holds it.
    let env = file("/etc/foothold/metal3.env");
    for line in [
        "IRONIC_ENDPOINT=http://172.22.0.1:6385/v1/",
        "DEPLOY_KERNEL_URL=file:///usr/share/foothold/ironic-deploy/kernel",
        "DEPLOY_RAMDISK_URL=file:///usr/share/foothold/ironic-deploy/initramfs",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in {env}");
    }
    let placed: Vec<_> = spec
        .file_inputs()
        .into_iter()
        .filter_map(|(field, f)| field.contains("deployRamdisk").then_some(f.dest.unwrap()))
        .collect();
    assert_eq!(
        placed,
        [
            format!("{DEPLOY_RAMDISK_DIR}/kernel"),
            format!("{DEPLOY_RAMDISK_DIR}/initramfs"),
            format!("{DEPLOY_RAMDISK_DIR}/esp")
        ]
    );
    // The HTTP root is served on the provisioning address, as Ironic's user, and its unit is enabled.
    let unit = file(&format!("/etc/systemd/system/{HTTPBOOT_UNIT}"));
    assert!(
        unit.contains("--bind 172.22.0.1 --directory /var/lib/ironic/httpboot 6180"),
        "{unit}"
    );
    assert!(unit.contains("\nUser=ironic\n"), "{unit}");
    assert_eq!(extra_units(&spec), [HTTPBOOT_UNIT]);
    assert_eq!(ready_checks(&spec)[1], "ironic=http://172.22.0.1:6385/");
}

/// The deploy section of Ironic 29's `ipxe_config.template` (python3-ironic 29.0 in trixie), as packaged.
const IRONIC_29_IPXE: &str = "#!ipxe\n\nset attempts:int32 10\nset i:int32 0\n\ngoto deploy\n\n:deploy\nimgfree\n\
    kernel {% if pxe_options.ipxe_timeout > 0 %}--timeout {{ pxe_options.ipxe_timeout }} {% endif %}{{ pxe_options.deployment_aki_path }} selinux=0 troubleshoot=0 text {{ pxe_options.pxe_append_params|default(\"\", true) }} BOOTIF=${mac} initrd={{ pxe_options.initrd_filename|default(\"deploy_ramdisk\", true) }} || goto retry\n\n\
    initrd {% if pxe_options.ipxe_timeout > 0 %}--timeout {{ pxe_options.ipxe_timeout }} {% endif %}{{ pxe_options.deployment_ari_path }} || goto retry\nboot\n\n\
    :retry\niseq ${i} ${attempts} && goto fail ||\ninc i\n";

#[test]
fn on_an_appliance_serving_tls_ironic_and_its_clients_speak_https_verified_by_the_site_ca() {
    let mut spec = provisioning_spec();
    spec.components.agent_tls = true;
    let files = render(&spec);
    let file = |path: &str| &files.iter().find(|f| f.0 == path).unwrap().1;
    let conf = file("/etc/ironic/ironic.conf");
    let get = |section: &str, key: &str| setting(conf, section, key);
    assert_eq!(get("api", "enable_ssl_api"), "true");
    assert_eq!(get("ssl", "cert_file"), TLS_CERT);
    assert_eq!(
        get("ssl", "key_file"),
        "/run/credentials/ironic.service/tls-key"
    );
    // The deploy ramdisk calls back on HTTPS, with the certificate in its virtual-media ISO or its
    // second initrd.
    assert_eq!(
        get("service_catalog", "endpoint_override"),
        "https://172.22.0.1:6385"
    );
    assert_eq!(get("agent", "api_ca_file"), SITE_CA);
    assert_eq!(get("pxe", "ipxe_config_template"), IPXE_TEMPLATE);
    let env = file("/etc/foothold/metal3.env");
    for line in [
        "IRONIC_ENDPOINT=https://172.22.0.1:6385/v1/".to_owned(),
        format!("IRONIC_CACERT_FILE={SITE_CA}"),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in {env}");
    }
    assert_eq!(file(TLS_NAMES), "IP:172.22.0.1\n");
    let dropin = file("/etc/systemd/system/ironic.service.d/foothold-tls.conf");
    assert!(dropin.contains("\nLoadCredential=tls-key:/etc/ironic/tls/key.pem\n"));
    assert!(dropin.contains(&format!(
        "ironic-ca-initrd {SITE_CA} {HTTP_ROOT}/{CA_INITRD}.cpio.gz\n"
    )));
    assert_eq!(
        ready_checks(&spec)[1..],
        [
            "ironic=https://172.22.0.1:6385/",
            "--ready-check",
            "baremetal-operator=http://127.0.0.1:9440/readyz",
            "--ready-check-ca",
            SITE_CA,
            "--certificate",
            &format!("ironic={TLS_CERT}"),
        ]
    );
    // The overlay's scripts the drop-in and foothold-pki run are there, for these files.
    let renew = include_str!("../../../rootfs/usr/local/lib/foothold/pki-renew");
    assert!(renew.contains(TLS_NAMES) && renew.contains(&format!("cert={TLS_CERT}\n")));
    assert!(renew.contains("pki --cert \"$cert\""));
    assert!(renew.contains(SITE_CA.trim_end_matches("/ca.pem")));
    assert!(
        include_str!("../../../rootfs/usr/local/lib/foothold/ironic-ca-initrd")
            .starts_with("#!/usr/bin/python3\n")
    );
}

#[test]
fn the_certificates_initrd_is_loaded_after_the_deploy_ramdisk() {
    let ours = ipxe_template(IRONIC_29_IPXE, "172.22.0.1").unwrap();
    let lines: Vec<&str> = ours.lines().collect();
    let kernel = lines.iter().position(|l| l.starts_with("kernel ")).unwrap();
    assert!(
        lines[kernel].ends_with(
            "initrd={{ pxe_options.initrd_filename|default(\"deploy_ramdisk\", true) }} initrd=foothold-ironic-ca || goto retry"
        ),
        "{}",
        lines[kernel]
    );
    let ramdisk = lines
        .iter()
        .position(|l| l.contains("deployment_ari_path"))
        .unwrap();
    assert_eq!(
        lines[ramdisk + 1],
        "initrd --name foothold-ironic-ca http://172.22.0.1:6180/foothold-ironic-ca.cpio.gz || goto retry"
    );
    assert_eq!(lines[ramdisk + 2], "boot");
    // Everything else is Ironic's, unchanged.
    assert_eq!(lines.len(), IRONIC_29_IPXE.lines().count() + 1);
    // A template whose deploy lines moved is an error, not a boot script without the certificate.
    let moved = IRONIC_29_IPXE.replace("deployment_ari_path", "ramdisk_path");
    let e = ipxe_template(&moved, "172.22.0.1").unwrap_err().to_string();
    assert!(e.contains("cannot be added"), "{e}");
}

#[test]
fn without_a_deploy_ramdisk_ironic_stays_on_loopback_and_cleans_nothing() {
    // With the provisioning network's DHCP or without it.
    let dhcp = crate::spec::tests::metal3_spec(|t| {
        t.replace(
            "address: 172.22.0.1/24}",
            "address: 172.22.0.1/24, dhcp: {range: 172.22.0.10-172.22.0.100}}",
        )
    })
    .unwrap();
    assert_eq!(
        ini_value(&render(&dhcp)[0].1, "api", "host_ip"),
        Some("127.0.0.1")
    );
    let spec = crate::spec::tests::metal3_spec(|t| t).unwrap();
    let files = render(&spec);
    let conf = &files[0].1;
    assert_eq!(ini_value(conf, "api", "host_ip"), Some("127.0.0.1"));
    assert_eq!(
        ini_value(conf, "conductor", "automated_clean"),
        Some("false")
    );
    assert_eq!(ini_value(conf, "deploy", "fast_track"), Some("false"));
    assert_eq!(ini_value(conf, "deploy", "http_url"), None);
    // ipxe is enabled on every appliance, and Ironic stops at start unless its HTTP root exists (ironic.service
    // makes this one; its default, /httpboot, nothing makes).
    assert!(
        ini_value(conf, "DEFAULT", "enabled_boot_interfaces").is_some_and(|v| v.contains("ipxe")),
        "{conf}"
    );
    assert_eq!(ini_value(conf, "deploy", "http_root"), Some(HTTP_ROOT));
    assert!(
        include_str!("../../../rootfs/etc/systemd/system/ironic.service")
            .contains(&format!("mkdir -p {HTTP_ROOT}\n")),
        "ironic.service makes {HTTP_ROOT}"
    );
    assert!(extra_units(&spec).is_empty());
    assert!(!files[1].1.contains("DEPLOY_"));
    assert_eq!(files.len(), 2);
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
    let unit = include_str!("../../../rootfs/etc/systemd/system/baremetal-operator.service");
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
