//! `foothold-build run` where KVM half-works: a stand-in for qemu (tests/fixtures/fake-qemu.sh) whose KVM probe
//! passes and whose KVM boot prints "KVM internal error" and stalls. `run` boots again under TCG and says so once,
//! with the console in a file or on the terminal; a forced `--accel kvm` fails naming the override.

use std::path::PathBuf;
use std::process::{Command, Output};

struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-qemu.sh"),
            dir.path().join("qemu"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("behaviour"),
            "PROBE=pass\nBOOT=internal-error\nTCG=marker\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("site.raw"), b"").unwrap();
        Site { dir }
    }

    /// A stand-in that behaves as `behaviour` says (the PROBE, BOOT and TCG lines of fake-qemu.sh).
    fn with(behaviour: &str) -> Site {
        let site = Site::new();
        std::fs::write(site.path("behaviour"), behaviour).unwrap();
        site
    }

    /// `run` with the console in `console.log` (waiting for the ready marker) and ARGS after it.
    fn run_logged(&self, args: &[&str]) -> Output {
        let log = self.path("console.log");
        let mut all = vec!["--serial-log", log.to_str().unwrap()];
        all.extend_from_slice(args);
        self.run(&all, None)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `foothold-build run site.raw ARGS` with the stand-in as qemu and $FOOTHOLD_ACCEL as given.
    fn run(&self, args: &[&str], accel_env: Option<&str>) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_foothold-build"));
        c.arg("run").arg(self.path("site.raw")).args(args);
        c.env("FOOTHOLD_QEMU", self.path("qemu"));
        // KVM's failures are remembered in the site's own cache, not this machine's.
        c.env("FOOTHOLD_CACHE", self.path("cache"));
        match accel_env {
            Some(v) => c.env("FOOTHOLD_ACCEL", v),
            None => c.env_remove("FOOTHOLD_ACCEL"),
        };
        c.output().unwrap()
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.path("calls.log")).unwrap_or_default()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const FELL_BACK: &str =
    "qemu: KVM failed this boot (KVM internal error. Suberror: 1); booting it again under TCG";

#[test]
fn run_boots_again_under_tcg_when_kvm_fails_the_boot_and_says_so_once() {
    let site = Site::new();
    let log = site.path("console.log");
    let out = site.run(&["--serial-log", log.to_str().unwrap()], None);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches(FELL_BACK).count(), 1, "{err}");
    assert!(
        err.contains("FOOTHOLD-READY host=fake accel=tcg (under TCG)"),
        "{err}"
    );
    assert_eq!(site.calls(), "kvm probe\nkvm boot\ntcg boot\n");

    // The console on the terminal: the guest's output on stdout, qemu's KVM dump kept off stderr.
    let site = Site::new();
    let out = site.run(&[], None);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches(FELL_BACK).count(), 1, "{err}");
    assert!(!err.contains("emulation failure"), "{err}");
    assert!(
        text(&out.stdout).contains("FOOTHOLD-READY host=fake accel=tcg"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(site.calls(), "kvm probe\nkvm boot\ntcg boot\n");
}

/// A KVM that failed a boot is remembered on this host: the next `run` goes straight to TCG, without the probe
/// or the failing boot, and says why and how to try KVM again; `--accel kvm` still tries it.
#[test]
fn a_run_after_kvm_failed_a_boot_goes_straight_to_tcg_and_says_why() {
    let site = Site::new();
    let log = site.path("console.log");
    let args = ["--serial-log", log.to_str().unwrap()];
    let out = site.run(&args, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(site.calls(), "kvm probe\nkvm boot\ntcg boot\n");
    assert!(site.path("cache/kvm-failures.json").is_file());

    let out = site.run(&args, None);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        site.calls(),
        "kvm probe\nkvm boot\ntcg boot\ntcg boot\n",
        "the second run probed or booted KVM: {err}"
    );
    assert!(
        err.contains("KVM failed a boot of this qemu and firmware here")
            && err.contains("KVM internal error")
            && err.contains("--accel kvm tries it now"),
        "{err}"
    );

    // The record is per firmware: SeaBIOS is probed afresh.
    let out = site.run(&["--serial-log", log.to_str().unwrap(), "--bios"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        site.calls()
            .ends_with("tcg boot\nkvm probe\nkvm boot\ntcg boot\n"),
        "{}",
        site.calls()
    );

    // Forced, KVM is tried whatever the record says.
    let out = site.run(
        &["--serial-log", log.to_str().unwrap(), "--accel", "kvm"],
        None,
    );
    assert!(!out.status.success());
    assert!(site.calls().ends_with("kvm boot\n"), "{}", site.calls());
}

#[test]
fn the_accelerator_can_be_forced_by_flag_or_environment() {
    // --accel kvm: no probe, no fallback; the stall is an error that names the way out.
    let site = Site::new();
    let log = site.path("console.log");
    let out = site.run(
        &["--serial-log", log.to_str().unwrap(), "--accel", "kvm"],
        None,
    );
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("KVM internal error") && err.contains("--accel tcg"),
        "{err}"
    );
    assert_eq!(site.calls(), "kvm boot\n");

    // FOOTHOLD_ACCEL=tcg: straight to TCG; the flag wins over the variable.
    let site = Site::new();
    let out = site.run(&["--serial-log", log.to_str().unwrap()], Some("tcg"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(site.calls(), "tcg boot\n");
    let site = Site::new();
    let args = ["--serial-log", log.to_str().unwrap(), "--accel", "tcg"];
    let out = site.run(&args, Some("kvm"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(site.calls(), "tcg boot\n");

    let out = Site::new().run(&[], Some("hvf"));
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("\"hvf\" is not one of auto, kvm, tcg"),
        "{err}"
    );
}

/// With the console on the terminal too, a guest kernel panic under TCG before the ready marker boots the image
/// again once, saying so with the oops; a second panic ends the run, naming both.
#[test]
fn an_interactive_run_boots_again_after_a_guest_kernel_panic_once() {
    let site = Site::with("PROBE=pass\nBOOT=works\nTCG=panic-once\n");
    let out = site.run(&["--accel", "tcg"], None);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("the guest kernel panicked under TCG")
            && err.contains("booting it again once")
            && err.contains("enqueue_timer+0xa5"),
        "{err}"
    );
    assert_eq!(site.calls(), "tcg boot\ntcg boot\n");
    assert!(text(&out.stdout).contains("FOOTHOLD-READY host=fake accel=tcg"));

    let site = Site::with("PROBE=pass\nBOOT=works\nTCG=panic\n");
    let out = site.run(&["--accel", "tcg"], None);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("(boot 2)") && err.contains("in the boot before this one"),
        "{err}"
    );
    assert_eq!(site.calls(), "tcg boot\ntcg boot\n");
}

/// `foothold-build run --ready-timeout`: a boot that never prints the ready marker fails after that long,
/// saying so.
#[test]
fn a_boot_without_the_ready_marker_fails_after_the_ready_timeout() {
    let site = Site::with("PROBE=pass\nBOOT=silent\nTCG=marker\n");
    let out = site.run_logged(&["--accel", "kvm", "--ready-timeout", "2"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("no FOOTHOLD-READY on the console within 2s"),
        "{err}"
    );
}

/// `foothold-build run --stop-when-ready`: the VM is stopped at the ready marker and `run` succeeds, though the
/// guest would have gone on running (and qemu failed a minute later, which `run` without the flag reports).
#[test]
fn stop_when_ready_stops_the_vm_at_the_marker_and_succeeds() {
    let site = Site::with("PROBE=pass\nBOOT=silent\nTCG=marker-then-fail\n");
    let out = site.run_logged(&["--accel", "tcg", "--stop-when-ready"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("FOOTHOLD-READY host=fake accel=tcg (under TCG)"),
        "{err}"
    );
    assert_eq!(site.calls(), "tcg boot\n");

    // Without --serial-log there is no marker to wait for: clap refuses the flag.
    let out = site.run(&["--stop-when-ready"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--serial-log"),
        "{}",
        text(&out.stderr)
    );
}

/// `foothold-build relay`, what qemu runs for each connection to a guest forward: the request goes through,
/// the whole answer comes back (no newline at its end, so nothing may wait in a line buffer), and the server
/// sees the end of the request.
#[test]
fn the_relay_carries_a_connection_both_ways() {
    use std::io::{Read as _, Write as _};
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let served = std::thread::spawn(move || {
        let (mut c, _) = server.accept().unwrap();
        let mut request = Vec::new();
        c.read_to_end(&mut request).unwrap();
        c.write_all(&request.to_ascii_uppercase()).unwrap();
        request.len()
    });
    let mut relay = Command::new(env!("CARGO_BIN_EXE_foothold-build"))
        .args(["relay", &addr.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let body = "GET /redfish/v1/ HTTP/1.1\r\n\r\npartial".repeat(1000);
    relay
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = relay.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(served.join().unwrap(), body.len());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        body.to_ascii_uppercase()
    );
    // Nothing listening: an error naming the address.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_foothold-build"))
        .args(["relay", &closed.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("connecting to {closed}")), "{err}");
}
