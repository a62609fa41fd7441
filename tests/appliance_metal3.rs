//! Metal3 on the booted appliance (part of `appliance.rs`'s first boot): baremetal-operator built from source and
//! Debian's Ironic drive BareMetalHosts whose BMCs are sushy-tools on this host (the appliance is isolated: it
//! reaches them through guest forwards, as it would reach BMCs on its provisioning network).
//! - node-00 is a real compute node, a libvirt domain behind sushy-tools' libvirt driver (the virtual site).
//!   `packages/node.yaml` is built with the appliance's CA and uploaded to its agent as an `os_images` record;
//!   the host goes Registering → Available → Provisioning → Provisioned with that live ISO, the BMC fetching it
//!   from the agent's `/files` over TLS; the node boots it and its containerd pulls busybox from the appliance's
//!   registry by its original name (the ready marker on its console names the digest). Deprovisioned, the domain
//!   is off and its CD empty.
//! - node-01 is a fake system with a wrong BMC password: a registration error that names the cause, recovered
//!   when its Secret is fixed.
//! - SIP claims both real BareMetalHosts.
//! - node-02, a second libvirt domain, is provisioned the same way (no SIP label: it is the BPA's); node-00 and
//!   node-02 are linked to each other by a second NIC, and stay provisioned for `appliance_bpa.rs`, which makes
//!   them a cluster; then both are deprovisioned.

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::libvirt::Site;
use foothold_e2e::native_site::APPLIANCE;
use foothold_e2e::netns::Namespace;
use foothold_e2e::sushy::{Sushy, System};
use foothold_e2e::{build_node_image, target, upload_os_image, wait_for_marker};
use foothold_image_builder::qemu::GUEST_FORWARD_ADDRESS;
use foothold_image_builder::site::{self, site_network, Bmc, ComputeNode, Link};

use super::{wait_for, Appliance};

/// The ports the appliance reaches the BMCs at, on qemu's guest-forward address: the fake one, and the virtual
/// site's (libvirt).
pub const FAKE_BMC_GUEST_PORT: u16 = 8000;
pub const SITE_BMC_GUEST_PORT: u16 = site::BMC_GUEST_PORT;

/// The fake system behind the fake BMC, named as the SIP fixture's second host.
fn fake_system() -> System {
    System {
        name: "node-01".into(),
        uuid: "27946b59-9e44-4fa7-8e91-f3527a1ef001".into(),
        mac: "02:00:00:00:10:01".into(),
    }
}

/// The link between node-00 and node-02 (the workload cluster's network): each node's NIC on it, and its address
/// there. The addresses are in the appliance's user network (10.0.2.0/24), where its guest forwards to the nodes'
/// SSH are: the installer reaches a host at the address the cluster knows it by.
pub const LINK: [(&str, &str); 2] = [
    ("02:00:00:00:31:00", "10.0.2.50"),
    ("02:00:00:00:31:01", "10.0.2.51"),
];

/// What BMO records of a host whose inspection is disabled (`inspect.metal3.io/hardwaredetails`): its CPUs and
/// memory, and its link NIC with the address on it, which the BPA's inventory names.
fn hardware_details(node: &ComputeNode, link: (&str, &str)) -> String {
    serde_json::json!({
        "cpu": {"arch": "x86_64", "count": node.vcpus},
        "ramMebibytes": node.memory_mib,
        "nics": [
            {"name": "site", "mac": node.mac},
            {"name": "link", "mac": link.0, "ip": link.1},
        ],
    })
    .to_string()
}

/// The address BMO is given for the system `uuid` of the BMC the appliance reaches at guest port `port`: Redfish
/// with virtual media.
fn bmc(port: u16, uuid: &str) -> String {
    format!("redfish-virtualmedia+http://{GUEST_FORWARD_ADDRESS}:{port}/redfish/v1/Systems/{uuid}")
}

/// The SIP fixture's hosts as real BMO manages them: node-00 the virtual site's `node`, node-01 the fake
/// system; their BMCs by UUID with virtual media, no inspection and no cleaning (no IPA ramdisk), UEFI. node-00
/// stays off until it is provisioned. Then node-02, the site's `worker`, for the BPA only (not in SIP's pool).
/// node-00 and node-02 carry their hardware details.
fn fixture(ws: &Path, node: &ComputeNode, worker: &ComputeNode) -> String {
    let text = std::fs::read_to_string(ws.join("tests/fixtures/sip-two-hosts.yaml")).unwrap();
    let fake = fake_system();
    text.replace(
        "redfish+http://127.0.0.1:8000/redfish/v1/Systems/node-00",
        &bmc(SITE_BMC_GUEST_PORT, &node.uuid),
    )
    .replace("\"02:00:00:00:10:00\"", &format!("\"{}\"", node.mac))
    .replace(
        "redfish+http://127.0.0.1:8000/redfish/v1/Systems/node-01",
        &bmc(FAKE_BMC_GUEST_PORT, &fake.uuid),
    )
    .replacen("  online: true\n", "  online: false\n", 1)
    .replace(
        "  online: ",
        "  bootMode: UEFI\n  inspectionMode: disabled\n  automatedCleaningMode: disabled\n  online: ",
    )
    .replace(
        "  name: node-00\n  namespace: site\n",
        &format!(
            "  name: node-00\n  namespace: site\n  annotations:\n    inspect.metal3.io/hardwaredetails: '{}'\n",
            hardware_details(node, LINK[0])
        ),
    ) + &format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: node-02-bmc, namespace: site}}\n\
         stringData: {{username: admin, password: pw-0}}\n\
         ---\napiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: node-02\n  namespace: site\n  \
         annotations:\n    inspect.metal3.io/hardwaredetails: '{details}'\nspec:\n  bootMode: UEFI\n  \
         inspectionMode: disabled\n  automatedCleaningMode: disabled\n  online: false\n  \
         bootMACAddress: \"{mac}\"\n  bmc: {{address: \"{bmc}\", credentialsName: node-02-bmc}}\n",
        details = hardware_details(worker, LINK[1]),
        mac = worker.mac,
        bmc = bmc(SITE_BMC_GUEST_PORT, &worker.uuid),
    )
}

fn bmh(a: &Appliance, name: &str, path: &str) -> Result<String, String> {
    a.kubectl(&[
        "-n",
        "site",
        "get",
        "bmh",
        name,
        "-o",
        &format!("jsonpath={{{path}}}"),
    ])
}

fn patch_bmh(a: &Appliance, name: &str, kind: &str, patch: &str) {
    a.kubectl(&[
        "-n",
        "site",
        "patch",
        "bmh",
        name,
        &format!("--type={kind}"),
        "-p",
        patch,
    ])
    .unwrap();
}

/// Gives BareMetalHost `name` (`node`, inspection disabled) the link address `link.1` in its hardware details,
/// as a new `inspect.metal3.io/hardwaredetails` does, and waits until BMO's status says so.
pub fn set_link_address(a: &Appliance, name: &str, node: &ComputeNode, link: (&str, &str)) {
    a.kubectl(&[
        "-n",
        "site",
        "annotate",
        "--overwrite",
        "bmh",
        name,
        &format!(
            "inspect.metal3.io/hardwaredetails={}",
            hardware_details(node, link)
        ),
    ])
    .unwrap();
    wait_for(
        &format!("{name}'s link address {}", link.1),
        Duration::from_secs(300),
        || {
            let ip = bmh(
                a,
                name,
                &format!(".status.hardware.nics[?(@.mac==\"{}\")].ip", link.0),
            )?;
            (ip == link.1).then_some(()).ok_or(ip)
        },
    );
}

fn wait_powered(a: &Appliance, name: &str, want: &str) {
    wait_for(
        &format!("{name} poweredOn {want}"),
        Duration::from_secs(300),
        || {
            let s = bmh(a, name, ".status.poweredOn")?;
            (s == want).then_some(()).ok_or(s)
        },
    );
}

/// Waits for host `name` to reach provisioning state `want`; returns how long it took.
fn wait_state(a: &Appliance, name: &str, want: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    wait_for(&format!("{name} {want}"), limit, || {
        let s = bmh(
            a,
            name,
            ".status.provisioning.state} {.status.errorType} {.status.errorMessage",
        )?;
        (s.split(' ').next() == Some(want)).then_some(()).ok_or(s)
    });
    started.elapsed()
}

/// The ports on this host the appliance's guest forwards lead to: the BMCs, and the SSH of node-00 and node-02
/// (at their [`LINK`] addresses).
pub struct SitePorts {
    pub fake: u16,
    pub site: u16,
    pub ssh: [u16; 2],
}

/// Ironic and baremetal-operator up on the booted appliance, as its agent's `/readyz` reports them; Ironic's
/// launcher, as the image carries it, checked against the image's own Ironic; Metal3's CRDs applied.
pub fn services_ready(a: &Appliance) {
    // BMO and Ironic, as the agent's /readyz reports them.
    wait_for(
        "Ironic and baremetal-operator ready in the agent's /readyz",
        Duration::from_secs(600),
        || {
            let v = a.readyz()?;
            let s = &v["services"];
            (s["ironic"]["state"] == "ok" && s["baremetal-operator"]["state"] == "ok")
                .then_some(())
                .ok_or(v.to_string())
        },
    );
    // As root: without D-Bus (none in the image) only root's tools reach what systemd runs.
    let said =
        foothold_e2e::check_ironic_launcher(|c| a.ssh(&format!("sudo sh <<'ROOT'\n{c}\nROOT")));
    eprintln!("{said}");
    // Ironic makes each virtual-media ISO of the deploy ramdisk (about 400 MiB at once) in its working directory:
    // on disk, with room, as Ironic's own mount namespace sees it (its private /tmp is a tmpfs a tenth of the
    // memory, where the ISO did not fit).
    let avail = a.ssh(
        "sudo nsenter -t $(sudo systemctl show -p MainPID --value ironic) -m \
         df -B1 --output=avail /var/lib/ironic/tmp | tail -1",
    );
    let avail: u64 = avail
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("Ironic's working directory: {avail}"));
    assert!(
        avail > 1 << 30,
        "Ironic's working directory has {avail} bytes free"
    );
    let crds = a.kubectl(&["get", "crd", "-o", "name"]).unwrap();
    for crd in [
        "baremetalhosts.metal3.io",
        "hostfirmwaresettings.metal3.io",
        "preprovisioningimages.metal3.io",
        "dataimages.metal3.io",
    ] {
        assert!(crds.contains(crd), "{crd} not applied: {crds}");
    }
}

/// The MAC of the compute node that asks the appliance's DHCP for a lease.
const NODE_MAC: &str = "52:54:00:fd:01:10";

/// The provisioning network as a compute node on it sees the booted appliance (its ens4 on the test's bridge):
/// the appliance's dnsmasq leases it an address from the spec's range and records the lease; from that address
/// Ironic's API and the agent answer over HTTPS verified with the site CA, Ironic's HTTP root serves the iPXE boot
/// script, and the API server and SSH are closed to it (the firewall drops them: the connection times out).
pub fn provisioning_network(a: &Appliance, ns: &Namespace, dir: &Path) {
    let node = ns.dhcp_client("apnode", "apnode0", NODE_MAC);
    let started = Instant::now();
    let address = wait_for(
        "a lease from the appliance's dnsmasq",
        Duration::from_secs(300),
        || node.lease(None),
    );
    eprintln!(
        "appliance: the node {NODE_MAC} leased {address} on the provisioning network after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let host: u8 = address
        .strip_prefix("172.22.0.")
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("{address}: not in 172.22.0.0/24"));
    assert!(
        (10..=100).contains(&host),
        "{address}: outside the spec's range"
    );
    let leases = a.ssh("sudo cat /var/lib/foothold-dnsmasq/leases");
    assert!(
        leases
            .lines()
            .any(|l| l.contains(&format!(" {NODE_MAC} {address} "))),
        "the appliance's lease file: {leases}"
    );
    let ca = dir.join("site-ca.pem");
    std::fs::write(&ca, a.ssh("sudo cat /etc/foothold/tls/ca.pem")).unwrap();
    let curl = |url: &str, extra: &[&str]| {
        node.command("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(&ca)
            .args(extra)
            .arg(url)
            .output()
            .unwrap()
    };
    let ok = |url: &str| {
        let out = curl(url, &["--fail"]);
        assert!(
            out.status.success(),
            "{url} from the provisioning network: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ironic = ok(&format!("https://{APPLIANCE}:6385/"));
    assert!(
        ironic.contains("\"versions\""),
        "Ironic's API root: {ironic}"
    );
    let agent = ok(&format!("https://{APPLIANCE}:5000/readyz"));
    assert!(
        agent.contains("\"services\""),
        "the agent's /readyz: {agent}"
    );
    let script = ok(&format!("http://{APPLIANCE}:6180/boot.ipxe"));
    assert!(script.starts_with("#!ipxe"), "the boot script: {script}");
    // Dropped, not refused: curl's "timeout" (28), in a bounded 5 s.
    for closed in [
        format!("https://{APPLIANCE}:6443/readyz"),
        format!("telnet://{APPLIANCE}:22"),
    ] {
        let out = curl(&closed, &["--connect-timeout", "5", "-k"]);
        assert_eq!(
            out.status.code(),
            Some(28),
            "{closed} from the provisioning network: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A BareMetalHost (node-01, the fake system) whose BMC, a sushy-tools fake on this host at `port` (the
/// appliance reaches it at [`FAKE_BMC_GUEST_PORT`]), refuses the password in its Secret: BMO reports a
/// registration error that names the cause; with the Secret put right the host registers and is available.
pub fn registration_error(a: &Appliance, dir: &Path, port: u16) {
    let system = fake_system();
    let _bmc = Sushy::fake(dir, port, std::slice::from_ref(&system), "admin", "pw-0");
    let host = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: site}}\n---\n{}",
        fake_host(&system, "not-pw-0")
    );
    let path = dir.join("node-01.yaml");
    std::fs::write(&path, host).unwrap();
    let started = Instant::now();
    wait_for("node-01 to apply", Duration::from_secs(120), || {
        a.kubectl(&["apply", "-f", path.to_str().unwrap()])
    });
    let error = refused(a);
    eprintln!(
        "metal3: node-01's registration error {:.0} s after its creation: {error}",
        started.elapsed().as_secs_f64()
    );
    fix_password(a);
    let took = wait_state(a, "node-01", "available", Duration::from_secs(600));
    assert_eq!(bmh(a, "node-01", ".status.errorType").unwrap(), "");
    eprintln!(
        "metal3: node-01 available {:.0} s after its Secret was put right",
        took.as_secs_f64()
    );
}

/// BMO registers a host through Ironic: node-03, behind a fake BMC of its own, its Secret right, becomes
/// available.
pub fn registers(a: &Appliance, dir: &Path, port: u16) {
    let system = System {
        name: "node-03".into(),
        uuid: "27946b59-9e44-4fa7-8e91-f3527a1ef003".into(),
        mac: "02:00:00:00:10:03".into(),
    };
    let _bmc = Sushy::fake(dir, port, std::slice::from_ref(&system), "admin", "pw-0");
    let path = dir.join("node-03.yaml");
    std::fs::write(&path, fake_host(&system, "pw-0")).unwrap();
    wait_for("node-03 to apply", Duration::from_secs(120), || {
        a.kubectl(&["apply", "-f", path.to_str().unwrap()])
    });
    let took = wait_state(a, "node-03", "available", Duration::from_secs(600));
    foothold_e2e::say!(
        "metal3: node-03 available {:.0} s after its creation",
        took.as_secs_f64()
    );
}

/// A BareMetalHost in namespace `site` for `system` behind the fake BMC (as the appliance reaches it), no
/// inspection, no cleaning, off, and its BMC Secret with `password`.
fn fake_host(system: &System, password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-bmc, namespace: site}}\n\
         stringData: {{username: admin, password: {password}}}\n\
         ---\napiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {{name: {name}, namespace: site}}\n\
         spec:\n  bootMode: UEFI\n  inspectionMode: disabled\n  automatedCleaningMode: disabled\n  online: false\n  \
         bootMACAddress: \"{mac}\"\n  bmc: {{address: \"{bmc}\", credentialsName: {name}-bmc}}\n",
        name = system.name,
        mac = system.mac,
        bmc = bmc(FAKE_BMC_GUEST_PORT, &system.uuid),
    )
}

/// Waits for node-01's registration error, which names the BMC's refusal of its Secret's password; returns it.
fn refused(a: &Appliance) -> String {
    let error = wait_for(
        "node-01's registration error",
        Duration::from_secs(300),
        || {
            let s = bmh(a, "node-01", ".status.errorType}|{.status.errorMessage")?;
            s.starts_with("registration error|")
                .then_some(s.clone())
                .ok_or(s)
        },
    );
    assert!(
        error.contains("401") && error.contains("Incorrect username or password"),
        "{error}"
    );
    error
}

/// node-01's Secret given the fake BMC's password.
fn fix_password(a: &Appliance) {
    a.kubectl(&[
        "-n",
        "site",
        "patch",
        "secret",
        "node-01-bmc",
        "--type=merge",
        "-p",
        r#"{"stringData": {"password": "pw-0"}}"#,
    ])
    .unwrap();
}

/// The site's hosts Metal3 provisioned, node-00 (`node`) and node-02 (`worker`), running until [`deprovision`].
pub struct Provisioned {
    pub site: Site,
    pub node: ComputeNode,
    pub worker: ComputeNode,
    site_bmc: Sushy,
    _fake_bmc: Sushy,
}

/// `busybox`: the digest of the image the appliance's registry holds as `docker.io/library/busybox:1.35`.
pub fn provision(
    a: &Appliance,
    ws: &Path,
    dir: &Path,
    ports: &SitePorts,
    busybox: &str,
) -> Provisioned {
    // The virtual site: one compute node reaching the appliance's agent at the provisioning address the node
    // image is built for, and its BMC, which fetches media from the agent as the appliance's CA vouches.
    let ca = dir.join("site-ca.pem");
    std::fs::write(&ca, a.ssh("cat /etc/foothold/tls/ca.pem")).unwrap();
    // node-00 becomes the workload cluster's control plane: kubeadm wants two CPUs and 1.7 GB there, and the
    // live system keeps the pulled images in memory.
    let mut site = Site::new(&target().join("debug/foothold-build"));
    let mut node = site.node(0, 3072);
    node.vcpus = 2;
    let worker = site.node(2, 2048);
    let links = [foothold_e2e::free_port(), foothold_e2e::free_port()];
    for (i, n) in [&node, &worker].into_iter().enumerate() {
        let mut net = site_network(a.agent_port, site.relay());
        net.host_forwards.push((ports.ssh[i], 22));
        net.link = Some(Link {
            local: links[i],
            peer: links[1 - i],
            mac: LINK[i].0.into(),
        });
        site.define(n, &net);
    }
    let site_bmc = Sushy::libvirt(
        dir,
        &Bmc {
            listen: "127.0.0.1".into(),
            port: ports.site,
            auth_file: dir.join("site-bmc.htpasswd"),
            nodes: vec![node.uuid.clone(), worker.uuid.clone()],
            pool: "default".into(),
            media_ca: Some(ca.clone()),
            state_dir: dir.join("site-bmc-state"),
        },
        "admin",
        "pw-0",
    );
    // The fixture's node-01 Secret has another password than the fake BMC's.
    let fake_bmc = Sushy::fake(dir, ports.fake, &[fake_system()], "admin", "pw-0");
    std::fs::write(dir.join("metal3-hosts.yaml"), fixture(ws, &node, &worker)).unwrap();
    let started = Instant::now();
    wait_for(
        "the Metal3 fixture to apply",
        Duration::from_secs(120),
        || {
            a.kubectl(&[
                "apply",
                "-f",
                dir.join("metal3-hosts.yaml").to_str().unwrap(),
            ])
        },
    );

    // While Metal3 registers the hosts: the node's image, with the appliance's CA, uploaded to its agent.
    let building = Instant::now();
    let public = std::fs::read_to_string(a.key.with_extension("pub")).unwrap();
    let iso = build_node_image(dir, &ca, Some(&public), "iso");
    eprintln!(
        "metal3: the node image built in {:.0} s",
        building.elapsed().as_secs_f64()
    );
    let token = a.ssh("sudo cat /etc/foothold/token");
    let started_upload = Instant::now();
    let url = upload_os_image(
        &format!("https://127.0.0.1:{}", a.agent_port),
        &ca,
        token.trim(),
        ("foothold", "site"),
        &iso,
        "node.iso",
    );
    eprintln!(
        "metal3: the node image ({} MiB) uploaded in {:.0} s",
        std::fs::metadata(&iso).unwrap().len() >> 20,
        started_upload.elapsed().as_secs_f64()
    );

    let available = wait_state(a, "node-00", "available", Duration::from_secs(600));
    eprintln!(
        "metal3: node-00 registered and available {:.0} s after its creation",
        started.elapsed().as_secs_f64().max(available.as_secs_f64())
    );
    wait_state(a, "node-02", "available", Duration::from_secs(600));
    refused(a);
    fix_password(a);
    wait_state(a, "node-01", "available", Duration::from_secs(600));
    assert_eq!(bmh(a, "node-01", ".status.errorType").unwrap(), "");

    // SIP claims both real hosts.
    wait_for("the SIPCluster Ready", Duration::from_secs(300), || {
        let s = a.kubectl(&[
            "-n",
            "site",
            "get",
            "sipcluster",
            "edge",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])?;
        (s == "True").then_some(()).ok_or(s)
    });
    let claimed = a
        .kubectl(&[
            "-n",
            "site",
            "get",
            "bmh",
            "-l",
            "sip.airshipit.org/cluster-name=edge",
            "-o",
            "name",
        ])
        .unwrap();
    assert_eq!(claimed.lines().count(), 2, "{claimed}");

    // The compute node provisioned with the uploaded live ISO, which its BMC fetches from the agent; node-02
    // once node-00's ISO is in (one download from the agent at a time).
    let patch =
        serde_json::json!({"spec": {"online": true, "image": {"url": url, "format": "live-iso"}}});
    patch_bmh(a, "node-00", "merge", &patch.to_string());
    let provisioning = Instant::now();
    let took = wait_state(a, "node-00", "provisioned", Duration::from_secs(900));
    eprintln!(
        "metal3: node-00 provisioning → provisioned in {:.0} s",
        took.as_secs_f64()
    );
    patch_bmh(a, "node-02", "merge", &patch.to_string());
    // BMO records the power state at its next look at the host.
    wait_powered(a, "node-00", "true");
    let inserted = site_bmc.requests("VirtualMedia.InsertMedia");
    assert!(
        inserted.iter().any(|l| l.contains(&node.uuid)),
        "no InsertMedia for {}: {inserted:?}",
        node.uuid
    );
    assert!(
        site.cdrom(&node)
            .unwrap()
            .is_some_and(|m| m.contains(&node.uuid)),
        "the BMC's copy of the ISO is not in node-00's CD"
    );
    let line = wait_for_marker(&site.console(&node), Duration::from_secs(900));
    eprintln!(
        "metal3: node-00's marker {:.0} s after the image was set: {line}",
        provisioning.elapsed().as_secs_f64()
    );
    assert!(line.contains(" role=node "), "{line}");
    // Its apt source came from the appliance's agent over TLS, and apt read the (empty) signed index.
    assert!(line.contains(" apt=0 "), "{line}");
    assert!(
        line.contains(&format!("pulled=docker.io/library/busybox:1.35@{busybox}")),
        "{line} (the appliance holds {busybox})"
    );
    let claimed_by = bmh(
        a,
        "node-00",
        ".metadata.labels.sip\\.airshipit\\.org/cluster-name",
    )
    .unwrap();
    assert_eq!(claimed_by, "edge");
    wait_state(a, "node-02", "provisioned", Duration::from_secs(900));
    eprintln!(
        "{}",
        a.kubectl(&["-n", "site", "get", "bmh", "-o", "wide"])
            .unwrap()
    );
    Provisioned {
        site,
        node,
        worker,
        site_bmc,
        _fake_bmc: fake_bmc,
    }
}

/// Deprovisioned: the image removed and the host set offline (an available host that is `online` is powered on
/// again by BMO), each domain is powered off and its CD emptied.
pub fn deprovision(a: &Appliance, p: Provisioned) {
    for name in ["node-00", "node-02"] {
        patch_bmh(
            a,
            name,
            "json",
            r#"[{"op": "remove", "path": "/spec/image"}, {"op": "replace", "path": "/spec/online", "value": false}]"#,
        );
    }
    for (name, n) in [("node-00", &p.node), ("node-02", &p.worker)] {
        wait_state(a, name, "available", Duration::from_secs(900));
        wait_powered(a, name, "false");
        wait_for(
            &format!("{name}'s domain off"),
            Duration::from_secs(120),
            || {
                let s = p.site.state(n)?;
                (s == "shut off").then_some(()).ok_or(s)
            },
        );
        wait_for(
            &format!("{name}'s CD empty"),
            Duration::from_secs(120),
            || match p.site.cdrom(n)? {
                None => Ok(()),
                Some(m) => Err(m),
            },
        );
    }
    assert!(
        !p.site_bmc.requests("VirtualMedia.EjectMedia").is_empty(),
        "no EjectMedia after deprovisioning"
    );
    // Ironic's own log of it, on the appliance.
    let journal =
        a.ssh("sudo journalctl -u ironic.service --no-pager -o cat | grep -m 5 deploying || true");
    assert!(
        journal.contains("deploying"),
        "no deploy in Ironic's journal"
    );
}
