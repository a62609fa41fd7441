//! `packages/node.yaml`, the compute node's live ISO, built by the real `foothold-build` (as root) and booted in
//! qemu as Metal3 boots it (a CD under UEFI), isolated: its only way out is a guest forward to a foothold-agent
//! on this host, serving over TLS with a certificate for the mirror address the node was built with (the site
//! CA in the image). At boot containerd pulls `docker.io/library/busybox:1.35`, an image only that agent has,
//! by its original name through the mirror, and the node's ready marker names it with the agent's digest; the
//! agent's metrics count the manifest requests.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use foothold_e2e::{
    boot_options, build_binaries, busybox_layout, free_port, run, target, workspace,
};
use foothold_image_builder::qemu::{RunOptions, Vm, GUEST_FORWARD_ADDRESS};

/// The agent this test serves the mirror with; killed on drop.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn manifest_requests(port: u16, ca: &Path) -> u64 {
    let metrics = run(Command::new("curl")
        .args(["-fsS", "--max-time", "30", "--cacert"])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}/metrics")));
    metrics
        .lines()
        .filter(|l| l.starts_with("foothold_http_requests_total{route=\"manifest\""))
        .filter(|l| l.contains("status=\"200\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn the_node_image_boots_and_pulls_through_the_mirror_with_the_site_ca() {
    build_binaries();
    let ws = workspace();
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
        .arg(format!(
            "subjectAltName=IP:{GUEST_FORWARD_ADDRESS},IP:127.0.0.1"
        ))
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
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    // The spec as committed, with the mirror where this test's agent is, its CA, and busybox to prefetch.
    let text = std::fs::read_to_string(ws.join("packages/node.yaml"))
        .unwrap()
        .replace("path: ../", &format!("path: {}/", ws.display()))
        .replace("release/foothold-agent", "debug/foothold-agent")
        .replace(
            "mirror: https://172.22.0.1:5000",
            &format!("mirror: https://{GUEST_FORWARD_ADDRESS}:5000"),
        )
        .replace("path: site-ca.pem", &format!("path: {}", cert.display()))
        .replace("prefetch: []", "prefetch: [docker.io/library/busybox:1.35]");
    let spec = dir.join("node.yaml");
    std::fs::write(&spec, text).unwrap();
    let out = dir.join("out");
    run(Command::new(target().join("debug/foothold-build"))
        .arg("build")
        .arg(&spec)
        .arg("--out")
        .arg(&out));
    let iso = out.join("foothold-node.iso");
    assert!(iso.is_file());

    let before = manifest_requests(port, &cert);
    let mut vm = Vm::start(RunOptions {
        guest_forwards: vec![(5000, port)],
        relay: Some(target().join("debug/foothold-build")),
        ..boot_options(&iso, dir.join("console.log"))
    })
    .unwrap();
    let line = vm.wait_ready(Duration::from_secs(900)).unwrap_or_else(|e| {
        panic!(
            "{e:#}\nagent log:\n{}",
            std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
        )
    });
    eprintln!("node ISO under {}: {line}", vm.accel());
    assert!(line.contains(" role=node "), "{line}");
    assert!(
        line.contains(&format!("pulled=docker.io/library/busybox:1.35@{digest}")),
        "{line} (the layout's digest is {digest})"
    );
    assert!(
        manifest_requests(port, &cert) > before,
        "the node's containerd did not ask the agent"
    );
}
