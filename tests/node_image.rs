//! `packages/node.yaml`, the compute node's live ISO, built as committed by the real `foothold-build` (as root)
//! and booted as Metal3 boots it: uploaded to a foothold-agent on this host as an `os_images` record, then
//! sushy-tools (the virtual site's Redfish BMC, libvirt driver) inserts it from the agent's `/files` over TLS as
//! virtual media and powers on a libvirt domain that boots it under UEFI (CI's one boot of a live root from a
//! CD: `lab_media.rs` boots its ISO from a USB stick, and from a CD only to the kernel). The node is isolated: its only way out
//! is a guest forward from the mirror address it was built for (172.22.0.1:5000) to the agent, which serves with
//! a certificate for that address (the site CA in the image). At boot containerd pulls
//! `docker.io/library/busybox:1.35`, an image only that agent has, by its original name through the mirror, and
//! the node's ready marker names it with the agent's digest; the agent's metrics count the manifest requests.
//! A package uploaded to the agent beforehand is in the index the node's apt reads from the agent's signed
//! repository, its source fetched at boot over TLS verified by the site CA: the marker says `apt=1`.
//! Ejecting the media and powering off leaves the domain off with an empty CD.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use foothold_e2e::libvirt::Site;
use foothold_e2e::sushy::Sushy;
use foothold_e2e::{
    build_binaries, build_deb, build_node_image, busybox_layout, free_port, run, sha256_file,
    ssh_command, target, upload_os_image, upload_record, wait_for_marker, wait_for_nth_marker,
};
use foothold_image_builder::site::{site_network, Bmc, MIRROR};
use serde_json::json;

/// The agent this test serves the mirror with; killed on drop.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The appliance's agent as a node meets it: serving on this host with a certificate for the mirror address the
/// node image is built for (`MIRROR`, which the node's guest forward brings here), busybox imported.
struct Mirror {
    /// The site CA, which signs the agent's certificate for that address.
    cert: std::path::PathBuf,
    /// busybox's manifest digest.
    digest: String,
    /// The agent's port on 127.0.0.1.
    port: u16,
    agent: Agent,
}

impl Mirror {
    fn start(dir: &Path) -> Mirror {
        // The site's certificates as the appliance makes them (foothold-agent pki): the node trusts the CA only.
        let agent_bin = target().join("debug/foothold-agent");
        let tls = dir.join("tls");
        run(Command::new(&agent_bin)
            .args(["pki", "--name", MIRROR.0, "--name", "127.0.0.1", "--dir"])
            .arg(&tls));
        let (cert, chain, key) = (
            tls.join("ca.pem"),
            tls.join("cert.pem"),
            tls.join("key.pem"),
        );
        let layout = dir.join("busybox");
        let digest = busybox_layout(&layout);
        let data = dir.join("data");
        run(Command::new(&agent_bin)
            .arg("import")
            .arg(&layout)
            .arg("--data")
            .arg(&data));
        std::fs::write(dir.join("token"), "node-image-test\n").unwrap();
        let port = free_port();
        let agent = Agent(
            Command::new(&agent_bin)
                .args([
                    "serve",
                    "--no-controllers",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                ])
                .arg("--data")
                .arg(&data)
                .arg("--token-file")
                .arg(dir.join("token"))
                .arg("--tls-cert")
                .arg(&chain)
                .arg("--tls-key")
                .arg(&key)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
                .spawn()
                .unwrap(),
        );
        Mirror {
            cert,
            digest,
            port,
            agent,
        }
    }
}

/// `hello-foothold` 1.0 uploaded to the agent on `port` and published in its apt repository; the package.
fn publish_deb(dir: &Path, port: u16, cert: &Path) -> std::path::PathBuf {
    let deb = build_deb(dir, "hello-foothold", "1.0");
    upload_record(
        &format!("https://127.0.0.1:{port}"),
        cert,
        "node-image-test",
        (("foothold", "site"), "binary_images"),
        &deb,
        "hello-foothold_1.0_all.deb",
    );
    let packages =
        format!("https://127.0.0.1:{port}/apt/dists/foothold/main/binary-amd64/Packages");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !run(Command::new("curl")
        .args(["-fsS", "--max-time", "30", "--cacert"])
        .arg(cert)
        .arg(&packages))
    .contains("Package: hello-foothold\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not publish hello-foothold within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    deb
}

/// The agent's count of requests on `route` it answered 200.
fn requests(port: u16, ca: &Path, route: &str) -> u64 {
    let metrics = run(Command::new("curl")
        .args(["-fsS", "--max-time", "30", "--cacert"])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}/metrics")));
    let series = format!("foothold_http_requests_total{{route=\"{route}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(&series))
        .filter(|l| l.contains("status=\"200\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn manifest_requests(port: u16, ca: &Path) -> u64 {
    requests(port, ca, "manifest")
}

fn apt_requests(port: u16, ca: &Path) -> u64 {
    requests(port, ca, "apt")
}

/// CI's one boot of the live ISO (about 140 s warm): the appliance test's live-ISO nodes, which boot it through
/// Metal3, are not run by CI for their time.
#[test]
fn the_node_image_boots_and_pulls_through_the_mirror_with_the_site_ca() {
    if !foothold_e2e::deadline::budget_allows("node_image", Duration::from_secs(600)) {
        return;
    }
    let deadline = foothold_e2e::Deadline::start("node_image", Duration::from_secs(2400));
    deadline.phase("build the binaries");
    build_binaries();
    deadline.phase("build, upload, boot, install");
    deadline.diagnose("the compute node's console (its last 40 lines)", || {
        foothold_e2e::libvirt::consoles_of_this_process()
            .iter()
            .map(|c| foothold_e2e::deadline::tail_file(c, 40))
            .collect()
    });
    let tmp = tempfile::tempdir_in(target()).unwrap();
    let dir = tmp.path();
    let Mirror {
        cert,
        digest,
        port,
        agent: _agent,
    } = Mirror::start(dir);

    // The spec as committed, with the test's CA, busybox to prefetch and an SSH key for the installer.
    let ssh_key = dir.join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "installer", "-f"])
        .arg(&ssh_key));
    let public = std::fs::read_to_string(ssh_key.with_extension("pub")).unwrap();
    let iso = build_node_image(dir, &cert, Some(&public), "iso");
    assert!(iso.is_file());

    let base = format!("https://127.0.0.1:{port}");
    let url = upload_os_image(
        &base,
        &cert,
        "node-image-test",
        ("foothold", "site"),
        &iso,
        "node.iso",
    );

    // A package in the agent's apt repository, which the node's apt must see through the site CA.
    let deb = publish_deb(dir, port, &cert);
    let apt_before = apt_requests(port, &cert);

    // The virtual site's node and its BMC.
    let mut site = Site::new(&target().join("debug/foothold-build"));
    let node = site.node(0, 1536);
    let ssh_port = free_port();
    let mut net = site_network(port, site.relay());
    net.host_forwards.push((ssh_port, 22));
    site.define(&node, &net);
    let bmc = Sushy::libvirt(
        dir,
        &Bmc {
            listen: "127.0.0.1".into(),
            port: free_port(),
            auth_file: dir.join("bmc.htpasswd"),
            nodes: vec![node.uuid.clone()],
            pool: "default".into(),
            media_ca: Some(cert.clone()),
            state_dir: dir.join("bmc-state"),
        },
        "admin",
        "bmc-pw",
    );
    let admin = ("admin", "bmc-pw");
    let (system, media) = (
        format!("/redfish/v1/Systems/{}", node.uuid),
        format!("/redfish/v1/Systems/{}/VirtualMedia/Cd", node.uuid),
    );

    // What Ironic's redfish-virtual-media boot does: insert the ISO, boot once from CD under UEFI, power on.
    let before = manifest_requests(port, &cert);
    bmc.call(
        admin,
        "POST",
        &format!("{media}/Actions/VirtualMedia.InsertMedia"),
        Some(json!({"Image": url, "Inserted": true, "WriteProtected": true})),
    );
    bmc.call(
        admin,
        "PATCH",
        &system,
        Some(
            json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideMode": "UEFI"}}),
        ),
    );
    bmc.call(
        admin,
        "POST",
        &format!("{system}/Actions/ComputerSystem.Reset"),
        Some(json!({"ResetType": "On"})),
    );
    assert!(
        site.cdrom(&node)
            .unwrap()
            .is_some_and(|m| m.contains(&node.uuid)),
        "the BMC's copy of the ISO is not in the CD"
    );
    let line = wait_for_marker(&site.console(&node), Duration::from_secs(900));
    eprintln!("node ISO, booted by the BMC: {line}");
    assert!(line.contains(" role=node "), "{line}");
    assert!(
        line.contains(&format!("pulled=docker.io/library/busybox:1.35@{digest}")),
        "{line} (the layout's digest is {digest})"
    );
    assert!(
        manifest_requests(port, &cert) > before,
        "the node's containerd did not ask the agent"
    );
    // Its apt source came from the agent over TLS, and apt read the signed index with the one package in it.
    assert!(line.contains(" apt=1 "), "{line}");
    assert!(
        apt_requests(port, &cert) > apt_before,
        "the node's apt did not ask the agent"
    );
    let inserted: serde_json::Value =
        serde_json::from_str(&bmc.call(admin, "GET", &media, None)).unwrap();
    assert_eq!(inserted["Image"], url.as_str(), "{inserted}");

    // No config drive: ds-identify found no datasource, and cloud-init did not run.
    let cloud_init = ssh(ssh_port, &ssh_key, "cloud-init status || true");
    assert!(cloud_init.contains("status: disabled"), "{cloud_init}");
    install_software(dir, port, ssh_port, &ssh_key, &cert, &deb);

    // Powered off and the media ejected, as deprovisioning does.
    bmc.call(
        admin,
        "POST",
        &format!("{system}/Actions/ComputerSystem.Reset"),
        Some(json!({"ResetType": "ForceOff"})),
    );
    bmc.call(
        admin,
        "POST",
        &format!("{media}/Actions/VirtualMedia.EjectMedia"),
        Some(json!({})),
    );
    assert_eq!(site.state(&node).unwrap(), "shut off");
    assert_eq!(site.cdrom(&node).unwrap(), None);
}

/// A Software's packages put on the node as its Job does it: `foothold-agent install-software` with an inventory
/// and a packages.json as the BPA writes them (URLs at the mirror address the node reaches), over SSH as the
/// node's sudo user. The package goes in through apt, the binary into /usr/local/bin; a second run finds both
/// there; a package whose sha256 is not what the agent serves fails, naming the host and the package. What is
/// installed is checked with OpenSSH's client.
fn install_software(dir: &Path, port: u16, ssh_port: u16, key: &Path, ca: &Path, deb: &Path) {
    let tool = dir.join("hello-tool");
    std::fs::write(&tool, "#!/bin/sh\necho hello-tool 1\n").unwrap();
    upload_record(
        &format!("https://127.0.0.1:{port}"),
        ca,
        "node-image-test",
        (("foothold", "site"), "binary_images"),
        &tool,
        "hello-tool",
    );
    let files = format!(
        "https://{}:{}/files/foothold/site/binary_images",
        MIRROR.0, MIRROR.1
    );
    let manifest = |tool_sha: &str| {
        json!({"owner": "foothold", "cluster": "site", "packages": [
            {"name": "hello-foothold", "version": "1.0", "groups": ["kube_node"],
             "url": format!("{files}/hello-foothold_1.0_all.deb"), "sha256": sha256_file(deb)},
            {"name": "hello-tool", "version": null, "groups": ["kube_control_plane", "kube_node"],
             "url": format!("{files}/hello-tool"), "sha256": tool_sha},
        ]})
        .to_string()
    };
    let inventory = dir.join("hosts.ini");
    std::fs::write(
        &inventory,
        format!(
            "[all]\nnode-0 ansible_host=127.0.0.1 ansible_port={ssh_port} ansible_user=foothold\n\n\
             [kube_control_plane]\nnode-0\n\n[kube_node]\nnode-0\n"
        ),
    )
    .unwrap();
    let packages = dir.join("packages.json");
    let report = dir.join("report.json");
    let install = |inventory: &Path| {
        Command::new(target().join("debug/foothold-agent"))
            .arg("install-software")
            .arg("--inventory")
            .arg(inventory)
            .arg("--packages")
            .arg(&packages)
            .arg("--ssh-key")
            .arg(key)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap()
    };
    // The per-host report the Software shows: (host, state, detail) each.
    let hosts = || -> Vec<(String, String, String)> {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        r["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                let s = |k: &str| h[k].as_str().unwrap().to_owned();
                (s("host"), s("state"), s("detail"))
            })
            .collect()
    };
    std::fs::write(&packages, manifest(&sha256_file(&tool))).unwrap();
    for (round, done, state) in [
        (1, "installed", "Updated"),
        (2, "already installed", "Unchanged"),
    ] {
        let out = install(&inventory);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("install-software, round {round}:\n{said}");
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in [
            format!("node-0 hello-foothold: deb hello-foothold 1.0 {done}\n"),
            format!("node-0 hello-tool: binary /usr/local/bin/hello-tool {done}\n"),
        ] {
            assert!(said.contains(&line), "{line:?} in\n{said}");
        }
        assert!(said.contains("node-0 host key SHA256:"), "{said}");
        assert_eq!(
            hosts(),
            [(
                "node-0".into(),
                state.into(),
                format!("deb hello-foothold 1.0 {done}; binary /usr/local/bin/hello-tool {done}")
            )]
        );
    }
    let ssh = ssh(
        ssh_port,
        key,
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' hello-foothold; hello-tool",
    );
    assert_eq!(
        ssh,
        "hello-foothold 1.0 install ok installed\nhello-tool 1\n"
    );

    // A digest the agent's bytes do not have: the host refuses the download, and the run says where; the
    // rollout stops there: a second host (a port nothing listens on) is never tried.
    std::fs::write(&packages, manifest(&"0".repeat(64))).unwrap();
    let two = dir.join("hosts-two.ini");
    std::fs::write(
        &two,
        format!(
            "[all]\nnode-0 ansible_host=127.0.0.1 ansible_port={ssh_port} ansible_user=foothold\n\
             node-1 ansible_host=127.0.0.1 ansible_port={} ansible_user=foothold\n\n\
             [kube_control_plane]\nnode-0\n\n[kube_node]\nnode-0\nnode-1\n",
            free_port()
        ),
    )
    .unwrap();
    let out = install(&two);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "node-0 hello-tool: FAILED: {files}/hello-tool (exit status "
        )),
        "{said}"
    );
    assert!(
        said.contains("node-0 hello-foothold: deb hello-foothold 1.0 already installed\n"),
        "{said}"
    );
    assert!(
        said.contains("node-1: skipped: node-0 failed first\n"),
        "{said}"
    );
    let report = hosts();
    let states: Vec<(&str, &str)> = report
        .iter()
        .map(|h| (h.0.as_str(), h.1.as_str()))
        .collect();
    assert_eq!(states, [("node-0", "Failed"), ("node-1", "Skipped")]);
    assert!(
        report[0]
            .2
            .contains(&format!("hello-tool: {files}/hello-tool (exit status ")),
        "{report:?}"
    );
}

/// A command on the node over SSH (OpenSSH's client, as the node's sudo user); its standard output.
fn ssh(port: u16, key: &Path, command: &str) -> String {
    run(&mut ssh_command(port, key, command))
}

/// The node's disk image (`foothold-node.qcow2`) as a node installed by Ironic's `direct` deploy runs it. What
/// IPA does to the disk is done here with the same tools: the qcow2 converted onto a larger raw disk
/// (`qemu-img convert`), GPT's backup header moved to the disk's end, and the config drive (an ISO 9660 file
/// system labelled `config-2` with `openstack/latest/`, as Ironic builds it from the BareMetalHost's
/// `metaData`, `networkData` and `userData`) written into a new partition in the disk's last 64 MiB. The disk
/// is then a libvirt domain's, booted under UEFI with its CD empty. The image has no SSH key of its own: the
/// one the test logs in with comes from the user data. Checked: the host name from the metadata, the static
/// address from the network data (not a DHCP lease), a file from the user data, cloud-init done without errors,
/// the root on the disk and the data partition grown up to the config drive; then the node pulls through the
/// mirror and reads the agent's apt index (its ready marker), a Software is installed on it over SSH, and after a
/// reboot it comes back from its disk with the same name, address and installed package.
#[test]
#[ignore = "not in CI for its time: metal3_provisioning.rs installs the same disk image through Ironic, with a \
            config drive Metal3 makes (network data, user data), and checks the same on its nodes, a Software and \
            a reboot among it; run it with `cargo test -p foothold-e2e --test node_image -- --ignored`"]
fn the_node_disk_image_boots_from_disk_and_takes_its_identity_from_the_config_drive() {
    let deadline = foothold_e2e::Deadline::start("node_disk", Duration::from_secs(2400));
    deadline.phase("build the binaries");
    build_binaries();
    deadline.diagnose("the compute node's console (its last 60 lines)", || {
        foothold_e2e::libvirt::consoles_of_this_process()
            .iter()
            .map(|c| foothold_e2e::deadline::tail_file(c, 60))
            .collect()
    });
    deadline.phase("build the node's disk image");
    let tmp = tempfile::tempdir_in(target()).unwrap();
    let dir = tmp.path();
    let Mirror {
        cert,
        digest,
        port,
        agent: _agent,
    } = Mirror::start(dir);
    let image = build_node_image(dir, &cert, None, "qcow2");
    let deb = publish_deb(dir, port, &cert);
    // The checksum file a BareMetalHost's image.checksum names by URL.
    let sums =
        std::fs::read_to_string(image.with_file_name("foothold-node.qcow2.sha256sum")).unwrap();
    assert_eq!(
        sums,
        format!("{}  foothold-node.qcow2\n", sha256_file(&image))
    );

    deadline.phase("write the disk as IPA does, boot it");
    let key = dir.join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "config-drive", "-f"])
        .arg(&key));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let mut site = Site::new(&target().join("debug/foothold-build"));
    let mut node = site.node(0, 1536);
    node.vcpus = 2;
    let config = config_drive(dir, &node.mac, public.trim());
    let disk = site.dir.join(format!("{}.raw", node.name));
    let partitions = write_as_ipa_does(&image, &disk, &config);
    eprintln!("node_disk: the disk as IPA leaves it:\n{partitions}");
    node.disk = Some(disk);
    let ssh_port = free_port();
    let mut net = site_network(port, site.relay());
    net.host_forwards.push((ssh_port, 22));
    site.define(&node, &net);
    foothold_e2e::libvirt::virsh(&["start", &node.name]).unwrap();
    let console = site.console(&node);
    let line = wait_for_marker(&console, Duration::from_secs(1200));
    eprintln!("node disk, first boot: {line}");
    assert!(line.contains(" host=node-7 "), "{line}");
    assert!(line.contains(" role=node "), "{line}");
    assert!(line.contains(" apt=1 "), "{line}");
    assert!(
        line.contains(&format!("pulled=docker.io/library/busybox:1.35@{digest}")),
        "{line}"
    );

    deadline.phase("what the config drive set, a Software, a reboot");
    let ssh = |command: &str| -> String {
        let started = std::time::Instant::now();
        loop {
            match foothold_e2e::try_run(&mut ssh_command(ssh_port, &key, command)) {
                Ok(out) => return out,
                Err(e) if started.elapsed() < Duration::from_secs(120) => {
                    eprintln!("node_disk: ssh not yet: {}", e.lines().last().unwrap_or(""));
                    std::thread::sleep(Duration::from_secs(2));
                }
                Err(e) => panic!("ssh {command}: {e}"),
            }
        }
    };
    assert_eq!(ssh("hostname").trim(), "node-7");
    // The name resolves without DNS (sudo looks it up on every call).
    let hosts = ssh("getent hosts node-7");
    assert_eq!(
        hosts.split_whitespace().next(),
        Some("127.0.1.1"),
        "{hosts}"
    );
    assert_eq!(
        ssh("cat /etc/foothold-test/user-data"),
        "from the user data\n"
    );
    // cloud-init ran from the config drive, once, and reports no error.
    let status: serde_json::Value =
        // As root: `--wait` asks systemd, which only root reaches without D-Bus (none in the image).
        serde_json::from_str(&ssh("sudo cloud-init status --wait --format json || true")).unwrap();
    eprintln!("node_disk: cloud-init status: {status}");
    assert_eq!(status["status"], "done", "{status}");
    assert!(
        status["datasource"]
            .as_str()
            .is_some_and(|d| d.eq_ignore_ascii_case("configdrive")),
        "{status}"
    );
    assert_eq!(status["errors"], json!([]), "{status}");
    // The address is the network data's, static (a DHCP lease would be `dynamic`).
    let addr = ssh(&format!(
        "ip -4 -o addr show dev \"$(ip -o link | awk -F': ' 'tolower($0) ~ /{}/ {{print $2}}')\"",
        node.mac
    ));
    assert!(addr.contains(" inet 172.22.0.15/24 "), "{addr}");
    assert!(!addr.contains("dynamic"), "{addr}");
    // Root on the disk, not a live system's overlay; the data partition grown to the config drive's start.
    let root = ssh("findmnt -no SOURCE /");
    assert!(root.starts_with("/dev/vda"), "{root}");
    let blocks = ssh("lsblk -bnro NAME,SIZE,LABEL /dev/vda");
    eprintln!("node_disk: the disk after the first boot:\n{blocks}");
    let labelled = |label: &str| {
        blocks
            .lines()
            .find(|l| l.split(' ').nth(2) == Some(label))
            .unwrap_or_else(|| panic!("no {label} on vda: {blocks}"))
            .split(' ')
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(labelled("config-2") > 0);
    assert!(labelled("foothold-data") > 1 << 30, "{blocks}");

    install_software(dir, port, ssh_port, &key, &cert, &deb);

    // A reboot: the same machine comes back from its disk.
    let _ = foothold_e2e::try_run(&mut ssh_command(ssh_port, &key, "sudo systemctl reboot"));
    let again = wait_for_nth_marker(&console, 2, Duration::from_secs(1200));
    eprintln!("node disk, after a reboot: {again}");
    assert!(again.contains(" host=node-7 "), "{again}");
    // containerd's store is on the disk's root file system (a live ISO's is a tmpfs).
    let after = ssh(
        "hostname; dpkg-query -W -f '${Version}\\n' hello-foothold; hello-tool; \
         ip -4 -o addr | grep -c ' 172.22.0.15/24 '; cloud-init query instance-id; \
         findmnt -no FSTYPE --target /var/lib/containerd",
    );
    assert_eq!(
        after,
        format!("node-7\n1.0\nhello-tool 1\n1\n{NODE_UUID}\next4\n"),
        "after the reboot"
    );
}

/// The BareMetalHost's UID as Metal3 puts it in the config drive's metadata: cloud-init's instance id.
const NODE_UUID: &str = "7e0d0000-0000-4000-8000-000000000007";

/// The config drive Ironic builds for a BareMetalHost named `node-7` (BMO's metadata keys), with a static
/// address for the NIC `mac` on the site network (qemu's user network: gateway .2, DNS .3) and user data that
/// authorises `key` and writes a file: an ISO 9660 image labelled `config-2`.
fn config_drive(dir: &Path, mac: &str, key: &str) -> std::path::PathBuf {
    let tree = dir.join("config-drive");
    let latest = tree.join("openstack/latest");
    std::fs::create_dir_all(&latest).unwrap();
    let meta = json!({"uuid": NODE_UUID, "metal3-namespace": "site", "metal3-name": "node-7",
        "local-hostname": "node-7", "local_hostname": "node-7", "hostname": "node-7", "name": "node-7"});
    let network = json!({
        "links": [{"id": "site", "type": "phy", "ethernet_mac_address": mac, "mtu": 1500}],
        "networks": [{"id": "site-ipv4", "type": "ipv4", "link": "site", "ip_address": "172.22.0.15",
            "netmask": "255.255.255.0", "network_id": "site",
            "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "172.22.0.2"}]}],
        "services": [{"type": "dns", "address": "172.22.0.3"}],
    });
    std::fs::write(latest.join("meta_data.json"), meta.to_string()).unwrap();
    std::fs::write(latest.join("network_data.json"), network.to_string()).unwrap();
    std::fs::write(
        latest.join("user_data"),
        format!(
            "#cloud-config\nssh_authorized_keys:\n  - {key}\nwrite_files:\n  - path: /etc/foothold-test/user-data\n    \
             content: \"from the user data\\n\"\n"
        ),
    )
    .unwrap();
    let iso = dir.join("config-drive.iso");
    run(Command::new("xorriso")
        .args([
            "-as", "mkisofs", "-quiet", "-V", "config-2", "-J", "-r", "-o",
        ])
        .arg(&iso)
        .arg(&tree));
    iso
}

/// The disk `disk` (4 GiB) as IPA leaves it after a `direct` deploy of the qcow2 `image` with the config drive
/// `config`; sfdisk's listing of it.
fn write_as_ipa_does(image: &Path, disk: &Path, config: &Path) -> String {
    const SECTOR: u64 = 512;
    const DISK: u64 = 4 << 30;
    run(Command::new("qemu-img")
        .args(["convert", "-f", "qcow2", "-O", "raw"])
        .arg(image)
        .arg(disk));
    let f = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    f.set_len(DISK).unwrap();
    drop(f);
    // `sgdisk -e`, then `sgdisk -n 0:-64MB:0`: the backup header at the end, a partition in the last 64 MiB
    // (aligned to 1 MiB, up to the last usable sector).
    run(Command::new("sfdisk")
        .args(["--quiet", "--relocate", "gpt-bak-std"])
        .arg(disk));
    let last_usable = DISK / SECTOR - 34;
    let start = (last_usable + 1 - (64 << 20) / SECTOR) / 2048 * 2048;
    let mut append = Command::new("sfdisk");
    append
        .args(["--quiet", "--append", "--no-reread", "--no-tell-kernel"])
        .arg(disk)
        .stdin(Stdio::piped());
    let mut child = append.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("start={start}\n").as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "sfdisk --append");
    // `dd` of the config drive into that partition.
    let bytes = std::fs::read(config).unwrap();
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    f.write_all_at(&bytes, start * SECTOR).unwrap();
    f.sync_all().unwrap();
    run(Command::new("sfdisk").arg("--list").arg(disk))
}
