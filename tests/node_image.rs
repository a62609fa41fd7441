//! `packages/node.yaml`, the compute node's live ISO, built as committed by the real `foothold-build` (as root)
//! and booted as Metal3 boots it: uploaded to a foothold-agent on this host as an `os_images` record, then
//! sushy-tools (the virtual site's Redfish BMC, libvirt driver) inserts it from the agent's `/files` over TLS as
//! virtual media and powers on a libvirt domain that boots it under UEFI. The node is isolated: its only way out
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
    ssh_command, target, upload_os_image, upload_record, wait_for_marker,
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

#[test]
#[ignore = "not in CI for its time: appliance.rs boots the same ISO through Metal3 and installs a Software \
            through a real Job; run it with `cargo test -p foothold-e2e --test node_image -- --ignored`"]
fn the_node_image_boots_and_pulls_through_the_mirror_with_the_site_ca() {
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

    // The site CA: here a self-signed certificate for the address the node reaches the mirror at.
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "2", "-subj", "/CN=foothold", "-addext"])
        .arg(format!("subjectAltName=IP:{},IP:127.0.0.1", MIRROR.0))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    let layout = dir.join("busybox");
    let digest = busybox_layout(&layout);
    let data = dir.join("data");
    let agent_bin = target().join("debug/foothold-agent");
    run(Command::new(&agent_bin)
        .arg("import")
        .arg(&layout)
        .arg("--data")
        .arg(&data));
    std::fs::write(dir.join("token"), "node-image-test\n").unwrap();
    let port = free_port();
    let _agent = Agent(
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
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    // The spec as committed, with the test's CA, busybox to prefetch and an SSH key for the installer.
    let ssh_key = dir.join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "installer", "-f"])
        .arg(&ssh_key));
    let public = std::fs::read_to_string(ssh_key.with_extension("pub")).unwrap();
    let iso = build_node_image(dir, &cert, Some(&public));
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
    let deb = build_deb(dir, "hello-foothold", "1.0");
    upload_record(
        &base,
        &cert,
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
        .arg(&cert)
        .arg(&packages))
    .contains("Package: hello-foothold\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not publish hello-foothold within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
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
    let install = || {
        Command::new(target().join("debug/foothold-agent"))
            .arg("install-software")
            .arg("--inventory")
            .arg(&inventory)
            .arg("--packages")
            .arg(&packages)
            .arg("--ssh-key")
            .arg(key)
            .output()
            .unwrap()
    };
    std::fs::write(&packages, manifest(&sha256_file(&tool))).unwrap();
    for (round, done) in [(1, "installed"), (2, "already installed")] {
        let out = install();
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

    // A digest the agent's bytes do not have: the host refuses the download, and the run says where.
    std::fs::write(&packages, manifest(&"0".repeat(64))).unwrap();
    let out = install();
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
}

/// A command on the node over SSH (OpenSSH's client, as the node's sudo user); its standard output.
fn ssh(port: u16, key: &Path, command: &str) -> String {
    run(&mut ssh_command(port, key, command))
}
