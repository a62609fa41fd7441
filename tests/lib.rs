//! Helpers shared by the end-to-end tests (`lab_media.rs`, `container_images.rs`, `appliance.rs`).
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use foothold_image_builder::qemu::{AccelChoice, RunOptions, Vm};
use sha2::{Digest, Sha256};

pub mod deadline;
pub mod libvirt;
pub mod native_site;
pub mod netns;
pub mod sushy;

pub use deadline::Deadline;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

pub fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

pub fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command, returning its stdout or, on failure, its stdout and stderr.
pub fn try_run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

pub fn sha256_file(p: &Path) -> String {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(p).unwrap(), &mut h).unwrap();
    hex::encode(h.finalize())
}

/// The HTTP status curl gets for `args` (the URL and any options); "000" when nothing answers.
pub fn http_code(args: &[&str]) -> String {
    http_code_of(Command::new("curl"), args)
}

/// [`http_code`] with `curl` as given (e.g. one run in a network namespace).
pub fn http_code_of(mut curl: Command, args: &[&str]) -> String {
    let out = curl
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "30",
        ])
        .args(args)
        .output()
        .expect("running curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// OpenSSH's client running `command` on the VM whose SSH is forwarded to 127.0.0.1:`port`, as its user
/// `foothold` with `key`: batch mode, the VM's fresh host key taken without a known_hosts file.
pub fn ssh_command(port: u16, key: &Path, command: &str) -> Command {
    let mut c = Command::new("ssh");
    c.args(ssh_args("127.0.0.1", port, key, command));
    c
}

/// The arguments of [`ssh_command`] for the machine at `host`:`port` (for an ssh run elsewhere, e.g. inside a
/// network namespace).
pub fn ssh_args(host: &str, port: u16, key: &Path, command: &str) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=30",
        "-o",
        "LogLevel=ERROR",
        "-i",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.push(key.into());
    for a in [
        "-p",
        &port.to_string(),
        &format!("foothold@{host}"),
        command,
    ] {
        args.push(a.into());
    }
    args
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The debug foothold-agent and foothold-build the tests run (`target/debug/`), from the same build as the tests
/// themselves: `cargo build --workspace --all-targets` selects what `cargo test --workspace --all-targets`
/// does, so it unifies the same features (dev-dependencies' among them) and, after `scripts/test.sh`'s build,
/// has nothing to do. (Building the two packages alone unified fewer features and compiled tokio and everything
/// above it a second time.) Cargo runs this test with its package's variables set (`CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR`, …), and build scripts that watch them (ring's) would run again, and everything above
/// them be compiled again, for a cargo that inherited them: they are removed. Says how many units it compiled.
pub fn build_binaries() {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(workspace()).args([
        "build",
        "--workspace",
        "--all-targets",
        "--message-format=json-render-diagnostics",
    ]);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_by_cargo_test = ["CARGO_PKG_", "CARGO_BIN_", "CARGO_CFG_"]
            .iter()
            .any(|p| key.starts_with(p))
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&key.as_ref());
        if set_by_cargo_test {
            cargo.env_remove(key.as_ref());
        }
    }
    let messages = run(&mut cargo);
    let compiled = messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["fresh"] == false)
        .count();
    let _ = writeln!(
        std::io::stderr(),
        "build_binaries: {compiled} units compiled (none after scripts/test.sh's build)"
    );
}

/// Where `scripts/install-test-tools.sh` links the test tools (`$FOOTHOLD_TOOLS`, else the clone's
/// `target/tools/bin`); the sushy-tools venv is `../sushy` beside it.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("FOOTHOLD_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/tools/bin"))
}

/// The builder's cache, as `foothold-build` picks it: `$FOOTHOLD_CACHE`, else `~/.cache/foothold`.
pub fn builder_cache() -> PathBuf {
    std::env::var_os("FOOTHOLD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/foothold")
        })
}

/// Of `foothold-build fetch --json`'s `events`, the `input` events of every input of `loaded` built from source:
/// each must have been built in this run, or taken from the cache where an earlier build *on this machine* left
/// its record. An input in the cache with no record (placed there by hand, or from another machine's cache or a
/// bundle) is an error: the provenance the manifest then gives was never seen to happen here. (To build every
/// input from source, point the builder at an empty cache: `FOOTHOLD_CACHE=$(mktemp -d)`.) Returns, for each,
/// (field, what the builder said of it, what its build said it made).
pub fn built_on_this_machine(
    events: &str,
    loaded: &foothold_image_builder::spec::Loaded,
) -> Result<Vec<(String, String, String)>, String> {
    let machine = foothold_image_builder::fetch::machine_id();
    let events: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["event"] == "input")
        .collect();
    let mut out = Vec::new();
    for (field, f) in loaded.spec.sources() {
        if f.recipe().is_none() {
            continue;
        }
        let e = events
            .iter()
            .find(|e| e["field"] == field.as_str())
            .ok_or_else(|| format!("the fetch said nothing of {field}"))?;
        let said = e["message"].as_str().unwrap_or_default().to_owned();
        let record = &e["record"];
        match (e["outcome"].as_str(), record["machine"].as_str()) {
            (Some("built"), _) => {}
            (Some("cached"), Some(m)) if m == machine => {}
            _ => {
                return Err(format!(
                    "{field}: {said}: its build was not seen on this machine (build from source with an empty \
                     cache: FOOTHOLD_CACHE=$(mktemp -d))"
                ))
            }
        }
        let made = record["made"].as_str().unwrap_or_default().to_owned();
        out.push((field, said, made));
    }
    if out.is_empty() {
        return Err("the spec has no input built from source".into());
    }
    Ok(out)
}

/// The options the boot tests start a VM with: 1.5 GiB and 2 CPUs, the console in `console`, writes discarded,
/// no network but the forwards, and the accelerator `$FOOTHOLD_ACCEL` asks for (auto when unset).
pub fn boot_options(image: &Path, console: PathBuf) -> RunOptions {
    RunOptions {
        memory_mib: 1536,
        serial_log: Some(console),
        snapshot: true,
        isolated: true,
        accel: AccelChoice::from_env().unwrap(),
        ..RunOptions::new(image.to_owned())
    }
}

/// Starts `o` and waits up to 10 minutes for the ready marker; says which accelerator ran the boot (why it left
/// KVM, and the guest kernel panic under TCG it was booted again after, if so). The VM and the marker line.
pub fn boot_until_ready(what: &str, o: RunOptions) -> (Vm, String) {
    let mut vm = Vm::start(o).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let line = vm
        .wait_ready(Duration::from_secs(600))
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let mut notes = Vec::new();
    if let Some(why) = vm.fallback() {
        notes.push(format!("KVM failed: {why}"));
    }
    if let Some(panic) = vm.tcg_panic() {
        notes.push(format!(
            "after booting again: the guest kernel panicked under TCG: {}",
            panic.summary
        ));
    }
    match notes.is_empty() {
        true => eprintln!("{what}: ready under {}", vm.accel()),
        false => eprintln!("{what}: ready under {} ({})", vm.accel(), notes.join("; ")),
    }
    (vm, line)
}

/// A copy of `image-builder/tests/fixtures/fake-qemu.sh` in `dir` that fails KVM as some hosts do — its probe
/// passes, then the boot prints "KVM internal error" and stalls — and runs the real qemu under TCG. Every call
/// is logged to `dir/calls.log`.
pub fn qemu_with_broken_kvm(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let qemu = dir.join("qemu");
    std::fs::copy(
        workspace().join("image-builder/tests/fixtures/fake-qemu.sh"),
        &qemu,
    )
    .unwrap();
    std::fs::write(
        dir.join("behaviour"),
        "PROBE=pass\nBOOT=internal-error\nTCG=real\n",
    )
    .unwrap();
    qemu
}

/// An image only a test's agent has: Debian's static busybox as `docker.io/library/busybox:1.35`, made with the
/// builder's own image writer into the OCI layout `layout`. Returns its manifest digest.
pub fn busybox_layout(layout: &Path) -> String {
    let records = foothold_image_builder::built_images::write_layout(
        &[foothold_image_builder::built_images::BuiltImage {
            reference: "docker.io/library/busybox:1.35",
            binary: Path::new("/bin/busybox"),
            binary_sha256: &sha256_file(Path::new("/bin/busybox")),
            entrypoint: "/bin/busybox",
            user: "0:0",
            cmd: &[],
            extra: &[],
        }],
        layout,
        1_767_225_600,
    )
    .unwrap();
    records[0]["digest"].as_str().unwrap().to_owned()
}

/// Uploads `file` to the agent at `base` (`https://127.0.0.1:<port>`, signed by `ca`) as the `os_images` record
/// `name` of cluster `owner/cluster` on ICN's BPA REST paths, with its sha256; returns the `/files` URL it is
/// served at once complete.
pub fn upload_os_image(
    base: &str,
    ca: &Path,
    token: &str,
    cluster: (&str, &str),
    file: &Path,
    name: &str,
) -> String {
    upload_record(base, ca, token, (cluster, "os_images"), file, name)
}

/// [`upload_os_image`] for any of the BPA's record kinds (`os_images`, `binary_images`, `container_images`).
pub fn upload_record(
    base: &str,
    ca: &Path,
    token: &str,
    record: ((&str, &str), &str),
    file: &Path,
    name: &str,
) -> String {
    upload_record_with(
        &|| Command::new("curl"),
        base,
        ca,
        token,
        record,
        file,
        name,
    )
}

/// [`upload_record`] with the curl `new_curl` makes (e.g. one run inside a network namespace).
pub fn upload_record_with(
    new_curl: &dyn Fn() -> Command,
    base: &str,
    ca: &Path,
    token: &str,
    ((owner, cluster), kind): ((&str, &str), &str),
    file: &Path,
    name: &str,
) -> String {
    let records = format!("{base}/v1/baremetalcluster/{owner}/{cluster}/{kind}");
    let auth = format!("Authorization: Bearer {token}");
    let meta = serde_json::json!({
        "image_name": name,
        "image_length": std::fs::metadata(file).unwrap().len(),
        "sha256": sha256_file(file),
    });
    let curl = || {
        let mut c = new_curl();
        c.args(["-fsS", "--max-time", "600", "--cacert"])
            .arg(ca)
            .args(["-H", &auth]);
        c
    };
    run(curl()
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &meta.to_string(),
        ])
        .arg(&records));
    run(curl()
        .args(["-X", "PATCH", "-H", "Upload-Offset: 0", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(format!("{records}/{name}")));
    let record: serde_json::Value =
        serde_json::from_str(&run(curl().arg(format!("{records}/{name}")))).unwrap();
    assert_eq!(record["upload_complete"], true, "{record}");
    format!("{base}/files/{owner}/{cluster}/{kind}/{name}")
}

/// The two packages the Software tests install, uploaded as `binary_images` of cluster `c1` of owner
/// `foothold` with `token` (curl from `new_curl`, verifying `ca`): `hello-foothold` 1.0, a Debian package made
/// in `dir`, and `hello-tool`, a script that prints `hello-tool 1`.
pub fn upload_hello_packages(
    new_curl: &dyn Fn() -> Command,
    (base, ca, token): (&str, &Path, &str),
    dir: &Path,
) {
    let deb = build_deb(dir, "hello-foothold", "1.0");
    let tool = dir.join("hello-tool");
    std::fs::write(&tool, "#!/bin/sh\necho hello-tool 1\n").unwrap();
    for (file, name) in [(&deb, "hello-foothold"), (&tool, "hello-tool")] {
        upload_record_with(
            new_curl,
            base,
            ca,
            token,
            (("foothold", "c1"), "binary_images"),
            file,
            name,
        );
    }
}

/// A Debian package `<name>_<version>_all.deb` in `dir`, made by dpkg-deb: one file, `/usr/share/doc/<name>/note`.
pub fn build_deb(dir: &Path, name: &str, version: &str) -> PathBuf {
    let root = dir.join(format!("{name}-{version}"));
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join(format!("usr/share/doc/{name}"))).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: Foothold tests <tests@foothold.invalid>\n\
             Description: a package the agent's apt repository serves in Foothold's tests\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join(format!("usr/share/doc/{name}/note")),
        format!("{name} {version}\n"),
    )
    .unwrap();
    let deb = dir.join(format!("{name}_{version}_all.deb"));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&root)
        .arg(&deb));
    deb
}

/// What Ironic's launcher (`rootfs/usr/local/lib/foothold/ironic`) changes, checked on a running appliance
/// whose root shell commands `as_root` runs: its database in write-ahead-log mode (bytes 18 and 19 of an SQLite
/// header are 2 in WAL mode, 1 with a rollback journal; Ironic 29's own listener never sets it), each of its
/// changes against the image's own Ironic, oslo.db, SQLAlchemy, Pecan and jsonschema
/// (`fixtures/ironic_launcher_check.py`), and the running Ironic holding its database open between
/// transactions (oslo.db alone opens and closes it for each). Returns what the checks printed.
pub fn check_ironic_launcher(as_root: impl Fn(&str) -> String) -> String {
    let header = as_root("od -An -tu1 -j18 -N2 /var/lib/ironic/ironic.sqlite");
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["2", "2"],
        "Ironic's database is not in WAL mode: {header}"
    );
    let said = as_root(&format!(
        "python3 - <<'EOF'\n{}\nEOF",
        include_str!("fixtures/ironic_launcher_check.py")
    ));
    let fds = as_root("ls -l /proc/$(pgrep -of '/usr/local/lib/foothold/ironic --config-file')/fd");
    assert!(
        fds.lines().any(|l| l.ends_with("/ironic.sqlite")),
        "Ironic holds no connection to its database:\n{fds}"
    );
    said
}

/// Waits up to `limit` for the ready marker on the console log `console` (a file a VM's serial port writes);
/// returns its line.
pub fn wait_for_marker(console: &Path, limit: Duration) -> String {
    wait_for_nth_marker(console, 1, limit)
}

/// The `n`th ready marker line on `console` (1 for the first boot's, 2 after a reboot, …), waited for up to
/// `limit`.
pub fn wait_for_nth_marker(console: &Path, n: usize, limit: Duration) -> String {
    let marker = format!("{} ", foothold_image_builder::qemu::READY_MARKER);
    let deadline = std::time::Instant::now() + limit;
    loop {
        // Firmware and terminal queries put bytes on a console that are not UTF-8.
        let text =
            String::from_utf8_lossy(&std::fs::read(console).unwrap_or_default()).into_owned();
        if let Some((at, _)) = text.match_indices(&marker).nth(n.saturating_sub(1)) {
            return text[at..]
                .lines()
                .next()
                .unwrap_or_default()
                .trim_end()
                .to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ready marker number {n} on {} within {limit:?}; the console ends:\n{}",
            console.display(),
            text.lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `packages/node.yaml` as committed (its mirror `https://172.22.0.1:5000`), with the site CA `ca`, the tests'
/// agent binary, busybox to prefetch and, if given, an SSH public key for its user `foothold`, built by the real
/// `foothold-build` into `dir` as `format` (`iso`, the live ISO, or `qcow2`, the disk image); that output.
pub fn build_node_image(dir: &Path, ca: &Path, ssh_key: Option<&str>, format: &str) -> PathBuf {
    build_node_image_prefetching(dir, ca, ssh_key, format, "[docker.io/library/busybox:1.35]")
}

/// [`build_node_image`] with `prefetch` (a YAML list) the images the node pulls before it reports ready.
pub fn build_node_image_prefetching(
    dir: &Path,
    ca: &Path,
    ssh_key: Option<&str>,
    format: &str,
    prefetch: &str,
) -> PathBuf {
    let ws = workspace();
    let keys = match ssh_key {
        Some(k) => format!("authorizedKeys: [\"{}\"]", k.trim()),
        None => "authorizedKeys: []".into(),
    };
    let text = std::fs::read_to_string(ws.join("packages/node.yaml"))
        .unwrap()
        .replace("authorizedKeys: []", &keys)
        .replace(
            "path: ../target/release/foothold-agent",
            &format!("path: {}", target().join("debug/foothold-agent").display()),
        )
        .replace("path: ../", &format!("path: {}/", ws.display()))
        .replace("path: site-ca.pem", &format!("path: {}", ca.display()))
        .replace("prefetch: []", &format!("prefetch: {prefetch}"));
    let spec = dir.join("node.yaml");
    std::fs::write(&spec, text).unwrap();
    let out = dir.join("node-out");
    run(Command::new(target().join("debug/foothold-build"))
        .arg("build")
        .arg(&spec)
        .args(["--formats", format])
        .arg("--out")
        .arg(&out));
    out.join(format!("foothold-node.{format}"))
}

/// A booted image's agent, through the forward `port` on 127.0.0.1, serves HTTPS (`agentTls`) with the
/// certificate `foothold-pki.service` made at first boot: a leaf (`CA:FALSE`) naming `host`, localhost and
/// 127.0.0.1, whose chain ends in the site CA (`pathlen:0`, certificate signing), which alone verifies it (its
/// PEM is written to `dir/served-site-ca.pem`); the agent's `/metrics` give both certificates' expiry.
pub fn serves_its_first_boot_certificate(port: u16, host: &str, dir: &Path) {
    let ready: serde_json::Value = serde_json::from_str(&run(Command::new("curl").args([
        "-kfsS",
        "--max-time",
        "30",
        &format!("https://127.0.0.1:{port}/readyz"),
    ])))
    .unwrap();
    assert_eq!(ready["http"], "ok", "{ready}");
    let pem = run(Command::new("sh").arg("-c").arg(format!(
        "openssl s_client -connect 127.0.0.1:{port} -servername localhost </dev/null 2>/dev/null \
         | openssl x509 -noout -ext subjectAltName,basicConstraints"
    )));
    for name in [
        &format!("DNS:{host}"),
        "DNS:localhost",
        "IP Address:127.0.0.1",
        "CA:FALSE",
    ] {
        assert!(
            pem.contains(name),
            "{name} in the first boot's certificate: {pem}"
        );
    }
    let chain = run(Command::new("sh").arg("-c").arg(format!(
        "openssl s_client -connect 127.0.0.1:{port} -showcerts </dev/null 2>/dev/null"
    )));
    let ca = chain
        .rfind("-----BEGIN CERTIFICATE-----")
        .and_then(|start| {
            let end = chain[start..].find("-----END CERTIFICATE-----")?;
            Some(format!(
                "{}-----END CERTIFICATE-----\n",
                &chain[start..start + end]
            ))
        })
        .unwrap_or_else(|| panic!("no certificate served: {chain}"));
    let ca_file = dir.join("served-site-ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let ca_text = run(Command::new("openssl")
        .args(["x509", "-noout", "-ext", "basicConstraints,keyUsage", "-in"])
        .arg(&ca_file));
    assert!(
        ca_text.contains("CA:TRUE, pathlen:0") && ca_text.contains("Certificate Sign"),
        "{ca_text}"
    );
    let metrics = run(Command::new("curl")
        .args(["-fsS", "--max-time", "30", "--cacert"])
        .arg(&ca_file)
        .arg(format!("https://127.0.0.1:{port}/metrics")));
    for name in ["agent", "site-ca"] {
        assert!(
            metrics.contains(&format!(
                "foothold_certificate_expiry_seconds{{name=\"{name}\"}} "
            )),
            "{name}'s expiry in /metrics:\n{metrics}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec with one input built from source, and the `input` event a fetch of it gave.
    fn fetched(
        outcome: &str,
        record: serde_json::Value,
    ) -> Result<Vec<(String, String, String)>, String> {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "name: lab\nbase:\n  suite: trixie\nhostname: lab\noutputs:\n  formats: [raw]\n  diskSize: 4GiB\n\
             components:\n  files:\n    - {{go: example.com/tool/cmd/tool@v1.0.0, sha256: {}, dest: /usr/local/bin/tool}}\n",
            "ab".repeat(32)
        );
        let loaded = foothold_image_builder::spec::load_text(
            &dir.path().join("lab.yaml"),
            &text,
            foothold_image_builder::spec::Pins::Required,
        )
        .unwrap();
        let event = serde_json::json!({"event": "input", "field": "components.files[0]", "outcome": outcome,
            "record": record, "message": format!("{outcome} (as the builder says)")});
        built_on_this_machine(&format!("{{\"event\":\"phase\"}}\n{event}\n"), &loaded)
    }

    fn record(machine: &str) -> serde_json::Value {
        serde_json::json!({"reference": "example.com/tool/cmd/tool@v1.0.0", "made": "built from example.com/tool \
            v1.0.0 (go version go1.26.8 linux/amd64)", "machine": machine, "finished": "2026-11-27T01:00:00Z",
            "seconds": 12})
    }

    /// `scripts/bmo-state-times.py` (the Metal3 benchmark's last table) on BMO's log lines: the state machine's
    /// lines only (not the provisioner's of the same message), a host's time from entering a state to leaving
    /// it, epoch and ISO 8601 times alike, a state not yet left not counted.
    #[test]
    fn the_benchmark_s_state_times_come_from_bmo_s_state_machine_lines() {
        let out = run(Command::new("python3")
            .arg(workspace().join("scripts/bmo-state-times.py"))
            .arg(workspace().join("tests/fixtures/bmo-states.log")));
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                ["registering", "2", "45", "s", "60", "s", "60", "s"],
                ["available", "1", "70", "s", "70", "s", "70", "s"],
            ],
            "{out}"
        );
    }

    #[test]
    fn an_input_built_here_passes_and_a_cache_filled_by_hand_fails_the_provenance_check() {
        let here = foothold_image_builder::fetch::machine_id();
        let ok = fetched("built", record(&here)).unwrap();
        assert_eq!(ok[0].0, "components.files[0]");
        assert!(
            ok[0].2.starts_with("built from example.com/tool v1.0.0"),
            "{ok:?}"
        );
        fetched("cached", record(&here)).unwrap();
        // Placed in the cache by hand: no record of a build. From another machine's cache: not built here.
        for r in [
            serde_json::Value::Null,
            record("0123456789abcdef0123456789abcdef"),
        ] {
            let e = fetched("cached", r).unwrap_err();
            assert!(
                e.contains("components.files[0]") && e.contains("not seen on this machine"),
                "{e}"
            );
        }
    }
}
