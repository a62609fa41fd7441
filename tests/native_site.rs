//! The appliance run natively for end-to-end tests: its own root file system, taken out of the raw image the
//! builder makes, its units run on this host's CPU inside a network namespace the test makes
//! (`tests/fixtures/native-site.sh`), with the helpers a test of its Metal3 needs: `kubectl` and `virsh` in
//! the site's namespaces, waits on BareMetalHosts, the leases of its dnsmasq.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::netns::{Namespace, Running};
use crate::{run, target, tools_dir, try_run, workspace};

/// The appliance's address on the provisioning network (`packages/appliance.yaml`).
pub const APPLIANCE: &str = "172.22.0.1";

/// Debian's `PATH` for root.
const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Takes the root and data partitions of the appliance's raw `image` out into `root` (`scripts/appliance-root.sh`).
pub fn extract_root(image: &Path, root: &Path) {
    run(Command::new("bash")
        .current_dir(workspace())
        .arg("-c")
        .arg(". scripts/appliance-root.sh && root_extract \"$1\" \"$2\"")
        .arg("root-extract")
        .arg(image)
        .arg(root));
}

/// The appliance's root, running in the namespace: commands enter its mount and network namespaces.
pub struct Site {
    pub root: PathBuf,
    /// The site script, PID 1 of its PID namespace; killing it ends everything it started.
    _script: Running,
    /// The script's PID as this host sees it, for nsenter.
    pid: u32,
}

impl Site {
    /// Runs `tests/fixtures/native-site.sh` with the appliance's root `root` and `args` in the namespace `ns`,
    /// in mount and PID namespaces of its own (its log `site_dir/native-site.log`), until it says it is up.
    pub fn start(ns: &Namespace, root: &Path, site_dir: &Path, args: &[&Path]) -> Site {
        let log = std::fs::File::create(site_dir.join("native-site.log")).unwrap();
        let mut script = ns.command("unshare");
        script
            .current_dir(workspace())
            .args(["--mount", "--pid", "--fork", "--kill-child", "bash"])
            .arg(workspace().join("tests/fixtures/native-site.sh"))
            .arg(root)
            .arg(tools_dir())
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut script = Running(script.spawn().unwrap());
        let started = Instant::now();
        loop {
            let text =
                std::fs::read_to_string(site_dir.join("native-site.log")).unwrap_or_default();
            if text.contains("SITE-UP") {
                break;
            }
            if let Some(status) = script.0.try_wait().unwrap() {
                panic!("the site script exited ({status}) before it was up:\n{text}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the site was not up within 600 s:\n{text}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        // unshare's child: the script, PID 1 of its namespace.
        let pid = run(Command::new("pgrep").args(["-P", &script.0.id().to_string()]))
            .trim()
            .parse()
            .unwrap();
        Site {
            root: root.to_owned(),
            _script: script,
            pid,
        }
    }
    /// `program` in the site's mount, network and PID namespaces (its libvirtd, which looks its clients up in
    /// the namespace's /proc; the appliance's mounts), with Debian's `PATH` for root, which a command chrooted
    /// into the appliance's root finds its programs by (`kubectl` is in `/usr/local/bin`), whatever this
    /// process's `PATH` is (a cold CI run without `/usr/local/bin` in it found no kubectl there).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.env("PATH", ROOT_PATH)
            .arg("-t")
            .arg(self.pid.to_string())
            .args(["-m", "-n", "-p", "--"])
            .arg(program);
        c
    }

    /// The appliance's kubectl on its admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        try_run(
            self.command("chroot")
                .arg(&self.root)
                .args([
                    "kubectl",
                    "--kubeconfig",
                    "/etc/kubernetes/admin.conf",
                    "--request-timeout=60s",
                ])
                .args(args),
        )
    }

    pub fn kubectl_apply(&self, yaml: &str) {
        // Not /tmp: the site mounts its own there.
        let file = self.root.join("root/apply.yaml");
        std::fs::write(&file, yaml).unwrap();
        self.kubectl(&["apply", "-f", "/root/apply.yaml"])
            .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{yaml}"));
    }

    pub fn virsh(&self, args: &[&str]) -> Result<String, String> {
        try_run(
            self.command("timeout")
                .args(["60", "virsh", "-c", "qemu:///system"])
                .args(args),
        )
    }

    /// The BareMetalHost `name` as JSON.
    pub fn host(&self, name: &str) -> serde_json::Value {
        let out = self
            .kubectl(&["get", "baremetalhost", name, "-o", "json"])
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&out).unwrap()
    }
}

/// `packages/appliance.yaml` as this test builds it: its local inputs absolute, the tests' agent, the raw image
/// only, the deploy ramdisk the one made in `ipa` (the spec's DHCP and ramdisk are on as committed), the agent's
/// installer Jobs held to the site SSH CA as committed (`--ssh-host-ca`: the nodes' user data carry host
/// certificates from it) and giving the hosts the read token of the Secret `node-read-token`
/// (`--node-read-token-secret`).
pub fn appliance_spec(dir: &Path, ipa: &Path) -> PathBuf {
    let ws = workspace();
    let text = std::fs::read_to_string(ws.join("packages/appliance.yaml")).unwrap();
    let text = text
        .replace("path: ../out/ipa/", &format!("path: {}/", ipa.display()))
        .replace(
            "path: ../target/release/foothold-agent",
            &format!("path: {}", target().join("debug/foothold-agent").display()),
        )
        .replace("path: ../", &format!("path: {}/", ws.display()))
        .replace("formats: [raw, qcow2, iso]", "formats: [raw]")
        .replace(
            "--installer-ssh-user, foothold,",
            "--installer-ssh-user, foothold, --node-read-token-secret, node-read-token,",
        );
    assert!(
        text.contains("\n    dhcp: {range")
            && text.contains(&format!("initramfs: {{path: {}/", ipa.display()))
            && text.contains("--ssh-host-ca, /etc/foothold/ssh-ca/ca.pub,")
            && text.contains("--node-read-token-secret")
    );
    let spec = dir.join("appliance.yaml");
    std::fs::write(&spec, text).unwrap();
    spec
}

/// `foothold-build build spec --out out` with the tests' builder.
pub fn build(spec: &Path, out: &Path) {
    run(Command::new(target().join("debug/foothold-build"))
        .arg("build")
        .arg(spec)
        .arg("--out")
        .arg(out));
}

/// Waits until `ready` says yes (its value), polling every 2 s for the first 30 s (most waits end there) and every
/// 5 s after (a long wait is a VM booting under TCG, which the polls' kubectl and SSH would slow), printing each
/// new state `state` names (past the harness's capture: a CI log shows where the minutes went); fails naming the
/// last state after `limit`.
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut state: impl FnMut() -> (String, Option<T>),
) -> T {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let (now, done) = state();
        if now != last {
            crate::say!(
                "metal3_provisioning: {:>4} s  {what}: {now}",
                started.elapsed().as_secs()
            );
            last = now;
        }
        if let Some(v) = done {
            return v;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not within {limit:?}; the last state: {last}"
        );
        let pause = if started.elapsed() < Duration::from_secs(30) {
            2
        } else {
            5
        };
        std::thread::sleep(Duration::from_secs(pause));
    }
}

/// Waits until every host named is in its provisioning state (their JSON then), failing at once if one goes
/// into error.
pub fn wait_for_hosts(
    site: &Site,
    wanted: &[(&str, &str)],
    limit: Duration,
) -> Vec<serde_json::Value> {
    wait_for_hosts_past(site, wanted, None, limit)
}

/// [`wait_for_hosts`], an error whose message is `past` not counting as a failure: the error a host keeps while
/// it recovers from it (BMO clears it only once the host is through deprovisioning).
pub fn wait_for_hosts_past(
    site: &Site,
    wanted: &[(&str, &str)],
    past: Option<&str>,
    limit: Duration,
) -> Vec<serde_json::Value> {
    wait_for("the hosts", limit, || {
        let hosts: Vec<serde_json::Value> =
            wanted.iter().map(|(name, _)| site.host(name)).collect();
        for (h, (name, _)) in hosts.iter().zip(wanted) {
            let known = past.is_some_and(|p| h["status"]["errorMessage"] == p);
            assert!(
                h["status"]["operationalStatus"] != "error" || known,
                "{name} failed: {}",
                host_state(h)
            );
        }
        let line = hosts
            .iter()
            .zip(wanted)
            .map(|(h, (name, _))| format!("{name}: {}", host_state(h)))
            .collect::<Vec<_>>()
            .join("; ");
        let done = hosts.iter().zip(wanted).all(|(h, (_, state))| {
            h["status"]["provisioning"]["state"] == *state
                && h["status"]["operationalStatus"] != "error"
        });
        (line, done.then_some(hosts))
    })
}

/// `kubectl patch` of the host's spec, merged.
pub fn patch_host(site: &Site, name: &str, spec: serde_json::Value) {
    site.kubectl(&[
        "patch",
        "baremetalhost",
        name,
        "--type=merge",
        "-p",
        &serde_json::json!({ "spec": spec }).to_string(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The address the appliance's dnsmasq leased to `mac`.
pub fn lease(root: &Path, mac: &str) -> String {
    let leases =
        std::fs::read_to_string(root.join("var/lib/foothold-dnsmasq/leases")).unwrap_or_default();
    leases
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(mac))
        .and_then(|l| l.split(' ').nth(2))
        .unwrap_or_else(|| panic!("no lease for {mac}:\n{leases}"))
        .to_owned()
}

/// The host's provisioning state, operational status and error, in one line.
pub fn host_state(h: &serde_json::Value) -> String {
    let s = &h["status"];
    format!(
        "{} / {} {}",
        s["provisioning"]["state"].as_str().unwrap_or("-"),
        s["operationalStatus"].as_str().unwrap_or("-"),
        s["errorMessage"].as_str().unwrap_or("")
    )
}
