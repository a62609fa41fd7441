//! `vino-builder`'s libvirt side: the rendered XML against snapshots and libvirt's own schemas
//! (`virt-xml-validate`), and the whole apply loop on libvirt's test driver (`test:///default`, in memory, one
//! `virsh` session): defined, idempotent, updated, removed, and never touching a domain that is not ours.
//! The watch-driven process with the reconciler's plans is tested in `vino.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use foothold_agent::vino_builder::virsh::Virsh;
use foothold_agent::vino_builder::xml::{self, Host, Plan};
use foothold_agent::vino_builder::{apply, Options, Report};
use serde_json::json;

fn plan() -> Plan {
    serde_json::from_value(json!({
        "node": "node-a", "cpuExclude": "0-1", "vncPasswordSecret": "v-vnc",
        "networks": [
            {"network": "oam", "bridge": "vino-oam", "ip": "192.168.100.1", "prefixLength": 24,
             "dhcpStart": "192.168.100.128", "dhcpStop": "192.168.100.143", "physicalInterface": "eth1"},
            {"network": "prov", "bridge": "vino-prov", "ip": "fd00:50::2", "prefixLength": 64,
             "dhcpStart": "fd00:50::1:0", "dhcpStop": "fd00:50::1:ff"},
        ],
        "vms": [
            {"name": "node-a-master-0", "bareMetalHost": "site-v-node-a-master-0", "vcpus": 2, "memoryMiB": 4096,
             "rootDiskGb": 20, "enableVNC": true,
             "interfaces": [
                {"name": "enp1s0", "network": "oam", "mac": "52:54:00:00:00:01", "ip": "192.168.100.10",
                 "bridge": "vino-oam", "mtu": 1500, "prefix_length": 24, "dns_servers": ["192.168.100.1"], "routes": []},
                {"name": "enp2s0", "network": "prov", "mac": "52:54:01:00:00:01", "ip": "fd00:50::100",
                 "bridge": "vino-prov", "prefix_length": 64}],
             "diskDrives": [{"name": "data", "type": "file", "options": {"sizeGb": 10, "sparse": false}},
                            {"name": "scratch", "options": {"sizeGb": 5, "sparse": true}}]},
            {"name": "node-a-worker-0", "bareMetalHost": "site-v-node-a-worker-0", "vcpus": 4, "memoryMiB": 8192, "hugepages": true,
             "rootDiskGb": 40,
             "interfaces": [
                {"name": "enp1s0", "network": "oam", "mac": "52:54:00:00:00:02", "ip": "192.168.100.11", "bridge": "vino-oam"},
                {"name": "enp2s0", "network": "prov", "mac": "52:54:01:00:00:02", "ip": "fd00:50::101", "bridge": "vino-prov"}]},
        ],
    }))
    .unwrap()
}

fn host() -> Host {
    Host {
        owner: "site/v".into(),
        domain_type: "kvm".into(),
        cpus: (0..8).collect(),
        pool: "vino".into(),
        vnc_listen: "127.0.0.1".into(),
    }
}

fn vnc() -> BTreeMap<String, String> {
    BTreeMap::from([("node-a-master-0".to_owned(), "Vnc2pass".to_owned())])
}

fn snapshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/vino-builder")
}

/// Compares `text` with the snapshot `name`; `UPDATE_SNAPSHOTS=1` rewrites it instead.
fn snapshot(name: &str, text: &str) {
    let path = snapshots().join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "snapshot {}: {e} (UPDATE_SNAPSHOTS=1 writes it)",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "{name} differs from its snapshot (UPDATE_SNAPSHOTS=1 rewrites it)"
    );
}

fn validate(dir: &Path, name: &str, text: &str, schema: &str) {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let out = Command::new("virt-xml-validate")
        .arg(&file)
        .arg(schema)
        .output()
        .expect("virt-xml-validate (Debian libvirt-clients) is installed by scripts/install-test-tools.sh");
    assert!(
        out.status.success(),
        "{name} is not a valid libvirt {schema}:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Airship's `management` network template, as the builder builds it: routed without a physical interface, and
/// the Vino's PXE boot host as the BOOTP file.
#[test]
fn a_routed_network_with_a_bootp_file_is_valid_libvirt() {
    let tmp = tempfile::tempdir().unwrap();
    let mut p = plan();
    p.networks = vec![serde_json::from_value(json!({
        "network": "management", "bridge": "vm-infra", "ip": "192.168.2.10", "prefixLength": 20,
        "dhcpStart": "192.168.4.16", "dhcpStop": "192.168.4.31", "routed": true,
        "bootpFile": "http://10.0.0.5:80/dualboot.ipxe",
    }))
    .unwrap()];
    p.vms.clear();
    let rendered = xml::render(&host(), &p, &vnc()).unwrap();
    let text = &rendered.networks["vino-site-v-management"];
    assert!(text.contains("<forward mode='route'/>"), "{text}");
    assert!(
        text.contains("<bootp file='http://10.0.0.5:80/dualboot.ipxe'/>"),
        "{text}"
    );
    snapshot("network-vino-site-v-management.xml", text);
    validate(tmp.path(), "network-management.xml", text, "network");
}

#[test]
fn rendered_xml_matches_its_snapshots_and_libvirts_schemas() {
    let tmp = tempfile::tempdir().unwrap();
    let rendered = xml::render(&host(), &plan(), &vnc()).unwrap();
    assert_eq!(
        rendered.networks.keys().collect::<Vec<_>>(),
        ["vino-site-v-oam", "vino-site-v-prov"]
    );
    for (name, text) in &rendered.networks {
        snapshot(&format!("network-{name}.xml"), text);
        validate(tmp.path(), &format!("network-{name}.xml"), text, "network");
    }
    for (name, (text, hash)) in &rendered.domains {
        snapshot(&format!("domain-{name}.xml"), text);
        validate(tmp.path(), &format!("domain-{name}.xml"), text, "domain");
        assert_eq!(
            xml::domain_marker(text),
            Some(("site/v".into(), hash.clone()))
        );
    }
    let pool = xml::pool_xml("vino", "/var/lib/libvirt/vino-images");
    snapshot("pool-vino.xml", &pool);
    validate(tmp.path(), "pool-vino.xml", &pool, "storagepool");
    assert_eq!(
        rendered
            .volumes
            .iter()
            .map(|v| (v.name.as_str(), v.size_gb, v.sparse))
            .collect::<Vec<_>>(),
        [
            ("node-a-master-0-root", 20, true),
            ("node-a-master-0-data", 10, false),
            ("node-a-master-0-scratch", 5, true),
            ("node-a-worker-0-root", 40, true),
        ]
    );

    // The same plan renders the same bytes; any change of a VM changes its hash.
    let again = xml::render(&host(), &plan(), &vnc()).unwrap();
    assert_eq!(again.domains, rendered.domains);
    let mut bigger = plan();
    bigger.vms[1].memory_mib = 16384;
    let changed = xml::render(&host(), &bigger, &vnc()).unwrap();
    assert_eq!(
        changed.domains["node-a-master-0"],
        rendered.domains["node-a-master-0"]
    );
    assert_ne!(
        changed.domains["node-a-worker-0"].1,
        rendered.domains["node-a-worker-0"].1
    );
}

#[test]
fn bad_plans_are_refused_with_the_reason() {
    let err =
        |p: Plan, vnc: &BTreeMap<String, String>| xml::render(&host(), &p, vnc).err().unwrap();
    let mut p = plan();
    p.cpu_exclude = Some("0-7".into());
    assert!(
        err(p, &vnc()).contains("cpuExclude 0-7 leaves none"),
        "cpuExclude"
    );
    let mut p = plan();
    p.cpu_exclude = Some("0-4".into());
    let e = err(p, &vnc());
    assert!(
        e.contains("node-a-worker-0: 4 vCPUs but only 3 host CPUs (5-7)"),
        "{e}"
    );
    let e = err(plan(), &BTreeMap::new());
    assert!(
        e.contains("node-a-master-0: enableVNC but no VNC password"),
        "{e}"
    );
    let mut p = plan();
    p.networks[0].bridge = "a-bridge-name-too-long".into();
    assert!(err(p, &vnc()).contains("1 to 15 characters"));
    let mut p = plan();
    p.vms[0].disk_drives[0].options = None;
    assert!(err(p, &vnc()).contains("disk drive data needs options.sizeGb"));
    let mut p = plan();
    p.networks.pop();
    assert!(err(p, &vnc()).contains("interface enp2s0 is on network prov, which the plan lacks"));
}

fn options(dir: &Path) -> Options {
    Options {
        uri: "test:///default".into(),
        pool: "vino".into(),
        pool_dir: dir.join("pool").to_string_lossy().into_owned(),
        domain_type: "kvm".into(),
        cpus: (0..8).collect(),
        vnc_listen: "127.0.0.1".into(),
        work_dir: dir.join("work"),
        command_timeout: Duration::from_secs(30),
    }
}

fn names(list: &[String]) -> BTreeSet<&str> {
    list.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn apply_on_libvirts_test_driver_is_idempotent_follows_changes_and_leaves_others_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = options(tmp.path());
    let mut virsh = Virsh::connect(&opts.uri, opts.command_timeout)
        .await
        .unwrap();
    let before_domains = virsh.run("list --all --name").await.unwrap();
    assert_eq!(
        before_domains, "test",
        "the test driver starts with its own domain"
    );

    let r = apply(&mut virsh, &opts, "site/v", Some(&plan()), &vnc())
        .await
        .unwrap();
    assert_eq!(
        names(&r.domains_defined),
        ["node-a-master-0", "node-a-worker-0"].into()
    );
    assert_eq!(
        names(&r.networks_defined),
        ["vino-site-v-oam", "vino-site-v-prov"].into()
    );
    assert_eq!(r.volumes_created.len(), 4);

    let dumped = virsh
        .run("dumpxml --security-info node-a-master-0")
        .await
        .unwrap();
    for want in [
        "<memory unit='KiB'>4194304</memory>",
        "<vcpu placement='static' cpuset='2-7'>2</vcpu>",
        "<mac address='52:54:00:00:00:01'/>",
        "<mac address='52:54:01:00:00:01'/>",
        "<source network='vino-site-v-oam'/>",
        "<mtu size='1500'/>",
        "<source pool='vino' volume='node-a-master-0-root'/>",
        "<target dev='vdb' bus='virtio'/>",
        "passwd='Vnc2pass'",
        "<console type='pty'>",
    ] {
        assert!(dumped.contains(want), "{want} missing from\n{dumped}");
    }
    assert!(!virsh
        .run("dumpxml node-a-worker-0")
        .await
        .unwrap()
        .contains("graphics"));
    assert_eq!(
        virsh.run("domstate node-a-master-0").await.unwrap(),
        "shut off",
        "left for Ironic to power on"
    );
    let net = virsh.run("net-dumpxml vino-site-v-oam").await.unwrap();
    assert!(
        net.contains("<range start='192.168.100.128' end='192.168.100.143'/>"),
        "{net}"
    );
    assert!(
        net.contains("<host mac='52:54:00:00:00:02' name='node-a-worker-0' ip='192.168.100.11'/>"),
        "{net}"
    );
    assert!(
        net.contains("<forward dev='eth1' mode='route'>") || net.contains("mode='route'"),
        "{net}"
    );
    assert!(virsh
        .run("net-info vino-site-v-prov")
        .await
        .unwrap()
        .contains("yes"));
    let vols = virsh
        .run("vol-info --bytes --pool vino node-a-master-0-data")
        .await
        .unwrap();
    assert!(vols.contains("10737418240 bytes"), "{vols}");

    // Nothing changed: nothing is redefined.
    let r = apply(&mut virsh, &opts, "site/v", Some(&plan()), &vnc())
        .await
        .unwrap();
    assert!(!r.changed(), "{r:?}");
    assert_eq!(r.domains_unchanged.len(), 2);
    assert_eq!(r.networks_unchanged.len(), 2);

    // Scale down, change a VM's memory and the DHCP range. (Volume growth, `vol-resize`, is not in the test
    // driver.)
    let mut p = plan();
    p.vms.remove(1);
    p.vms[0].memory_mib = 6144;
    p.networks[0].dhcp_stop = Some("192.168.100.135".into());
    let r = apply(&mut virsh, &opts, "site/v", Some(&p), &vnc())
        .await
        .unwrap();
    assert_eq!(
        r,
        Report {
            networks_defined: vec!["vino-site-v-oam".into()],
            networks_unchanged: vec!["vino-site-v-prov".into()],
            domains_defined: vec!["node-a-master-0".into()],
            domains_removed: vec!["node-a-worker-0".into()],
            ..Report::default()
        }
    );
    assert_eq!(
        lines(&virsh.run("list --all --name").await.unwrap()),
        ["node-a-master-0", "test"]
    );
    assert!(virsh
        .run("dumpxml node-a-master-0")
        .await
        .unwrap()
        .contains("<memory unit='KiB'>6291456</memory>"));
    assert!(virsh
        .run("net-dumpxml vino-site-v-oam")
        .await
        .unwrap()
        .contains("end='192.168.100.135'"));
    let vols = lines(&virsh.run("vol-list vino").await.unwrap());
    assert!(
        !vols.iter().any(|l| l.contains("node-a-worker-0")),
        "the removed VM's disk stays: {vols:?}"
    );
    assert!(
        virsh
            .run("net-info vino-site-v-oam")
            .await
            .unwrap()
            .contains("yes"),
        "the replaced network runs"
    );

    // Another owner's domain with a planned name is refused, not taken over; another owner's apply leaves
    // ours alone.
    let other = apply(&mut virsh, &opts, "site/other", Some(&plan()), &vnc())
        .await
        .unwrap_err();
    assert!(
        other.contains("a domain named node-a-master-0 exists and is not this Vino's (site/other)"),
        "{other}"
    );
    let r = apply(&mut virsh, &opts, "site/other", None, &BTreeMap::new())
        .await
        .unwrap();
    assert!(!r.changed(), "{r:?}");

    // The plan is gone: everything of ours goes, the driver's own domain and network stay.
    let r = apply(&mut virsh, &opts, "site/v", None, &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(names(&r.domains_removed), ["node-a-master-0"].into());
    assert_eq!(
        names(&r.networks_removed),
        ["vino-site-v-oam", "vino-site-v-prov"].into()
    );
    assert_eq!(
        lines(&virsh.run("list --all --name").await.unwrap()),
        ["test"]
    );
    assert_eq!(
        lines(&virsh.run("net-list --all --name").await.unwrap()),
        ["default"]
    );
}

#[tokio::test]
async fn virsh_errors_name_the_command() {
    let mut virsh = Virsh::connect("test:///default", Duration::from_secs(30))
        .await
        .unwrap();
    let e = virsh
        .run("dumpxml no-such-domain")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("virsh dumpxml no-such-domain") && e.contains("no-such-domain"),
        "{e}"
    );
    // The session stays usable after an error.
    assert_eq!(virsh.run("list --all --name").await.unwrap(), "test");
    let e = Virsh::connect("nosuchdriver:///x", Duration::from_secs(30))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("nosuchdriver:///x") && e.contains("cannot connect"),
        "{e}"
    );
}

fn lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}
