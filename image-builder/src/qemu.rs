//! `foothold-build run` and the boot tests: boot an image in qemu with a serial console and port forwards, UEFI
//! (OVMF) by default or BIOS (SeaBIOS), under KVM where KVM runs the guest and under TCG otherwise.
//!
//! KVM is decided by what will actually run. On some hosts /dev/kvm opens and SeaBIOS runs under it, yet OVMF
//! dies at its first instruction ("KVM internal error. Suberror: 1") and qemu stalls with an empty console. So
//! `auto` probes with the boot's own firmware, machine type and CPU model, and then watches the real boot: a KVM
//! internal error on qemu's stderr, qemu exiting, or a console still empty after `kvm_first_output` stops it
//! and boots again under TCG, said once on stderr. A `Vm` never outlives its owner: qemu is stopped on drop.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

mod child;
mod console;
pub mod kvm;
mod provisioning;
mod relay;

use console::{file_len, first_line, read_lossy, tail};
pub use console::{kernel_panic, KernelPanic, FAILED_MARKER, READY_MARKER};
pub use provisioning::{ProvisioningNic, PROVISIONING_SLOT};
pub use relay::{guestfwd, relay};

pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// The qemu binary `run` starts unless `--qemu` or `$FOOTHOLD_QEMU` names another.
pub const QEMU: &str = "qemu-system-x86_64";
/// `auto`, `kvm` or `tcg`: what `run --accel` defaults to and what the boot tests use.
pub const ACCEL_ENV: &str = "FOOTHOLD_ACCEL";

/// What qemu prints (and then stalls) when KVM cannot execute the guest's code.
const KVM_INTERNAL_ERROR: &str = "KVM internal error";

/// The accelerator a qemu runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// The accelerator and the CPU model that go with it.
    fn args(self) -> [&'static str; 4] {
        match self {
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => ["-accel", "tcg", "-cpu", "max"],
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG",
        })
    }
}

/// The accelerator asked for: `auto` uses KVM where a probe and the boot itself show it works and TCG
/// otherwise; `kvm` and `tcg` force one (a forced KVM that fails is an error, not a fallback).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccelChoice {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

impl FromStr for AccelChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(format!("{s:?} is not one of auto, kvm, tcg")),
        }
    }
}

impl fmt::Display for AccelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccelChoice::Auto => "auto",
            AccelChoice::Kvm => "kvm",
            AccelChoice::Tcg => "tcg",
        })
    }
}

impl AccelChoice {
    /// `$FOOTHOLD_ACCEL`, `auto` when unset or empty.
    pub fn from_env() -> Result<AccelChoice> {
        match std::env::var(ACCEL_ENV) {
            Ok(v) if !v.is_empty() => v
                .parse()
                .map_err(|e: String| anyhow::anyhow!("{ACCEL_ENV}: {e}")),
            _ => Ok(AccelChoice::Auto),
        }
    }
}

/// Whether KVM runs this firmware here: a guest with the boot's machine type, CPU model and firmware (OVMF, or
/// SeaBIOS with `bios`) must show output within `timeout` — OVMF on the serial console, SeaBIOS reaching its boot
/// menu on the debug console — with no KVM internal error. Err says why not.
pub fn probe_kvm(qemu: &Path, bios: bool, timeout: Duration) -> Result<(), String> {
    // No /dev/kvm, or one this user may not open, is qemu's to say ("Could not access KVM kernel module").
    let dir = tempfile::Builder::new()
        .prefix("foothold-kvm-probe-")
        .tempdir()
        .map_err(|e| format!("a scratch directory for the probe: {e}"))?;
    let (console, debugcon, stderr) = (
        dir.path().join("console.log"),
        dir.path().join("debugcon.log"),
        dir.path().join("stderr.log"),
    );
    let mut c = Command::new(qemu);
    c.args(["-M", "q35", "-m", "128"])
        .args(Accel::Kvm.args())
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-chardev")
        .arg(format!("file,id=dbg,path={}", debugcon.display()))
        .args(["-device", "isa-debugcon,iobase=0x402,chardev=dbg"]);
    if !bios {
        firmware_args(&mut c, &dir.path().join("vars.fd")).map_err(|e| format!("{e:#}"))?;
    }
    let firmware = if bios { "SeaBIOS" } else { "OVMF" };
    let err_file = std::fs::File::create(&stderr).map_err(|e| e.to_string())?;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", qemu.display()))?;
    let deadline = Instant::now() + timeout;
    let verdict = loop {
        let err = read_lossy(&stderr);
        if let Some(line) = err.lines().find(|l| l.contains(KVM_INTERNAL_ERROR)) {
            break Err(format!("{firmware} under KVM: {}", line.trim()));
        }
        let booted = if bios {
            let d = read_lossy(&debugcon);
            d.contains("Booting from") || d.contains("No bootable device")
        } else {
            file_len(&console) > 0
        };
        if booted {
            break Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(format!(
                "{firmware} under KVM: qemu exited ({status}): {}",
                first_line(&err)
            ));
        }
        if Instant::now() > deadline {
            break Err(format!(
                "{firmware} under KVM: no output within {timeout:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    verdict
}

/// OVMF prints its boot manager's first line in about a second under KVM (nine under TCG).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the image is attached to the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// A virtio disk.
    Disk,
    /// A CD drive (read-only).
    Cdrom,
    /// A USB stick: mass storage on an xHCI controller, as the image would be written to a stick.
    Usb,
}

impl Media {
    /// Where an image goes by default: an `.iso` in a CD drive, anything else on a disk.
    pub fn for_image(image: &Path) -> Media {
        match image.extension().and_then(|e| e.to_str()) {
            Some("iso") => Media::Cdrom,
            _ => Media::Disk,
        }
    }
}

/// Under `auto`, how long a KVM boot may leave the console empty: OVMF, GRUB and the kernel all print within a
/// few seconds under KVM, and a guest KVM cannot run prints nothing at all.
pub const KVM_FIRST_OUTPUT: Duration = Duration::from_secs(30);

/// The address in qemu's user network where a guest reaches the host's forwarded ports
/// ([`RunOptions::guest_forwards`]).
pub const GUEST_FORWARD_ADDRESS: &str = "10.0.2.100";

/// A guest's connections to `address:port` (an address of its user network) reach 127.0.0.1:`host_port` on
/// this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestForward {
    pub address: String,
    pub port: u16,
    pub host_port: u16,
}

impl GuestForward {
    /// `port` at [`GUEST_FORWARD_ADDRESS`].
    pub fn at_host(port: u16, host_port: u16) -> GuestForward {
        GuestForward {
            address: GUEST_FORWARD_ADDRESS.into(),
            port,
            host_port,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub image: PathBuf,
    pub media: Media,
    pub bios: bool,
    /// (host port on 127.0.0.1, guest port)
    pub forwards: Vec<(u16, u16)>,
    /// The guest's connections that reach 127.0.0.1 on this host (usually at [`GUEST_FORWARD_ADDRESS`]), through
    /// `relay` (an isolated guest reaches nothing else).
    pub guest_forwards: Vec<GuestForward>,
    /// The program that relays one guest connection (its stdin and stdout) to the TCP address it is given:
    /// `foothold-build relay` (see [`relay`]).
    pub relay: Option<PathBuf>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// Where the serial console goes (None: this terminal, with a copy in the VM's scratch directory that the
    /// boot is watched by).
    pub serial_log: Option<PathBuf>,
    /// Discard writes to the image (qemu -snapshot).
    pub snapshot: bool,
    /// No network beyond the port forwards: the guest reaches nothing outside (qemu's `restrict=on`), as at an
    /// offline site.
    pub isolated: bool,
    pub accel: AccelChoice,
    /// The qemu binary.
    pub qemu: PathBuf,
    /// Under `auto`: a KVM boot whose console is still empty after this long is restarted under TCG.
    pub kvm_first_output: Duration,
    /// Where KVM's failures are remembered across runs on this host (`kvm::`; `foothold-build run` keeps
    /// `<cache>/kvm-failures.json`). None: only in this process.
    pub kvm_record: Option<PathBuf>,
    /// A second NIC on an existing tap device: the appliance's provisioning network (see [`PROVISIONING_SLOT`]).
    pub provisioning: Option<ProvisioningNic>,
    /// More USB sticks (raw images, read-only), plugged in from the start: e.g. the site CA's key on a file
    /// system labelled FOOTHOLD-CA.
    pub sticks: Vec<PathBuf>,
}

impl RunOptions {
    /// `image` on its default medium under UEFI, 2 GiB and 2 CPUs, console on the terminal, `auto`.
    pub fn new(image: PathBuf) -> RunOptions {
        RunOptions {
            media: Media::for_image(&image),
            image,
            bios: false,
            forwards: Vec::new(),
            guest_forwards: Vec::new(),
            relay: None,
            memory_mib: 2048,
            cpus: 2,
            serial_log: None,
            snapshot: false,
            isolated: false,
            accel: AccelChoice::Auto,
            qemu: PathBuf::from(QEMU),
            kvm_first_output: KVM_FIRST_OUTPUT,
            kvm_record: None,
            provisioning: None,
            sticks: Vec::new(),
        }
    }
}

/// OVMF's code, read-only, and a fresh copy of its variable store at `vars`.
fn firmware_args(c: &mut Command, vars: &Path) -> Result<()> {
    if !Path::new(OVMF_CODE).exists() {
        bail!("UEFI needs {OVMF_CODE} (Debian ovmf); or boot with --bios");
    }
    std::fs::copy(OVMF_VARS, vars).with_context(|| format!("copying {OVMF_VARS}"))?;
    c.arg("-drive").arg(format!(
        "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
    ));
    c.arg("-drive").arg(format!(
        "if=pflash,format=raw,unit=1,file={}",
        vars.display()
    ));
    Ok(())
}

/// `-smp` for `cpus` CPUs on one socket. TCG's `max` CPU is an AMD without an invariant TSC, and Linux takes
/// the TSCs of such a CPU on more than one socket for unsynchronised: it marks the TSC unstable at boot and
/// keeps time with the HPET, an emulated device (seen on the 2-socket compute node libvirt made by default:
/// "Marking TSC unstable due to TSCs unsynchronized", clocksource hpet). One socket keeps the TSC.
fn smp(cpus: u32) -> String {
    format!("{cpus},sockets=1,cores={cpus},threads=1")
}

/// The qemu command for `o` under `accel`; the firmware variables and the terminal console's copy go in
/// `scratch`.
pub fn command(o: &RunOptions, accel: Accel, scratch: &Path) -> Result<Command> {
    let format = match o.image.extension().and_then(|e| e.to_str()) {
        Some("qcow2") => "qcow2",
        _ => "raw",
    };
    let mut c = Command::new(&o.qemu);
    c.args([
        "-M",
        "q35",
        "-m",
        &o.memory_mib.to_string(),
        "-smp",
        &smp(o.cpus),
    ]);
    c.args(accel.args());
    c.args(["-nodefaults", "-display", "none", "-no-reboot"]);
    if !o.bios {
        firmware_args(&mut c, &scratch.join("ovmf-vars.fd"))?;
    }
    // qemu's -drive options are comma-separated: a comma in the path is written twice.
    let file = o.image.display().to_string().replace(',', ",,");
    match o.media {
        Media::Disk => c
            .arg("-drive")
            .arg(format!("file={file},format={format},if=virtio")),
        Media::Cdrom => c
            .arg("-drive")
            .arg(format!("file={file},format=raw,media=cdrom,readonly=on")),
        // The stick is the first boot device for both firmwares.
        Media::Usb => c
            .args(["-device", "qemu-xhci,id=xhci"])
            .arg("-drive")
            .arg(format!("file={file},format={format},if=none,id=stick"))
            .args(["-device", "usb-storage,bus=xhci.0,drive=stick,bootindex=0"]),
    };
    if !o.sticks.is_empty() && !matches!(o.media, Media::Usb) {
        c.args(["-device", "qemu-xhci,id=xhci"]);
    }
    for (i, stick) in o.sticks.iter().enumerate() {
        let file = stick.display().to_string().replace(',', ",,");
        c.arg("-drive")
            .arg(format!(
                "file={file},format=raw,if=none,id=extra{i},readonly=on"
            ))
            .args(["-device", &format!("usb-storage,bus=xhci.0,drive=extra{i}")]);
    }
    if o.snapshot {
        c.arg("-snapshot");
    }
    let fwd: String = o
        .forwards
        .iter()
        .map(|(h, g)| format!(",hostfwd=tcp:127.0.0.1:{h}-:{g}"))
        .collect();
    let mut fwd = fwd;
    for f in &o.guest_forwards {
        let relay = o
            .relay
            .as_deref()
            .context("a guest forward needs RunOptions::relay (foothold-build's path)")?;
        fwd.push_str(&guestfwd(&f.address, f.port, relay, f.host_port));
    }
    let restrict = if o.isolated { ",restrict=on" } else { "" };
    c.args([
        "-netdev",
        &format!("user,id=n0{restrict}{fwd}"),
        "-device",
        "virtio-net-pci,netdev=n0",
    ]);
    if let Some(p) = &o.provisioning {
        provisioning::args(&mut c, p)?;
    }
    match &o.serial_log {
        Some(p) => c.arg("-serial").arg(format!("file:{}", p.display())),
        // The terminal, and a copy of what the guest prints for the watcher.
        None => c
            .arg("-chardev")
            .arg(format!(
                "stdio,id=console,signal=on,logfile={}",
                scratch.join("console.log").display()
            ))
            .args(["-serial", "chardev:console"]),
    };
    Ok(c)
}

/// A booted image, watched: under `auto`, a boot KVM fails is restarted under TCG. qemu is stopped on drop.
pub struct Vm {
    opts: RunOptions,
    child: Child,
    accel: Accel,
    /// Why this boot left KVM for TCG, if it did.
    fallback: Option<String>,
    /// The guest kernel's panic under TCG that this boot was started again after, if one was.
    tcg_panic: Option<KernelPanic>,
    /// What the guest printed: `serial_log`, or the terminal's copy in `scratch`.
    console: PathBuf,
    /// qemu's stderr, kept in a file so that the watcher can read it whatever qemu does.
    stderr: PathBuf,
    /// How much of qemu's stderr has been copied to ours (console on the terminal only).
    stderr_shown: usize,
    started: Instant,
    /// The console has shown output since this qemu started.
    spoke: bool,
    scratch: tempfile::TempDir,
}

impl Vm {
    /// Starts `opts.image` under the accelerator asked for (`auto`: KVM if the probe passes).
    pub fn start(opts: RunOptions) -> Result<Vm> {
        let accel = match opts.accel {
            AccelChoice::Kvm => Accel::Kvm,
            AccelChoice::Tcg => Accel::Tcg,
            AccelChoice::Auto => {
                match kvm::verdict(&opts.qemu, opts.bios, opts.kvm_record.as_deref(), || {
                    probe_kvm(&opts.qemu, opts.bios, PROBE_TIMEOUT)
                }) {
                    Ok(()) => Accel::Kvm,
                    Err(_) => Accel::Tcg,
                }
            }
        };
        let scratch = tempfile::Builder::new()
            .prefix("foothold-vm-")
            .tempdir()
            .context("creating a scratch directory for the VM")?;
        let console = opts
            .serial_log
            .clone()
            .unwrap_or_else(|| scratch.path().join("console.log"));
        let stderr = scratch.path().join("qemu-stderr.log");
        let child = spawn(&opts, accel, scratch.path(), &console, &stderr)?;
        Ok(Vm {
            opts,
            child,
            accel,
            fallback: None,
            tcg_panic: None,
            console,
            stderr,
            stderr_shown: 0,
            started: Instant::now(),
            spoke: false,
            scratch,
        })
    }

    /// The accelerator the guest runs under now.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// Why the boot was restarted under TCG, if it was.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The guest kernel's panic under TCG that the boot was started again after, if it was.
    pub fn tcg_panic(&self) -> Option<&KernelPanic> {
        self.tcg_panic.as_ref()
    }

    /// The console log the boot is watched by.
    pub fn console(&self) -> &Path {
        &self.console
    }

    /// One look at the boot; under `auto`, restarts it under TCG if KVM failed it. qemu's exit status once it
    /// has ended.
    pub fn poll(&mut self) -> Result<Option<ExitStatus>> {
        let err = read_lossy(&self.stderr);
        let status = self.child.try_wait().context("waiting for qemu")?;
        if self.accel == Accel::Kvm {
            if !self.spoke && file_len(&self.console) > 0 {
                self.spoke = true;
            }
            let failed = if let Some(line) = err.lines().find(|l| l.contains(KVM_INTERNAL_ERROR)) {
                Some(line.trim().to_owned())
            } else if self.spoke || self.opts.accel == AccelChoice::Kvm {
                None
            } else if let Some(status) = status {
                Some(format!(
                    "qemu exited ({status}) before the guest printed anything: {}",
                    first_line(&err)
                ))
            } else if self.started.elapsed() > self.opts.kvm_first_output {
                Some(format!(
                    "no console output within {:?}",
                    self.opts.kvm_first_output
                ))
            } else {
                None
            };
            if let Some(why) = failed {
                if self.opts.accel == AccelChoice::Kvm {
                    bail!(
                        "{why} under KVM (--accel kvm / {ACCEL_ENV}=kvm): the guest cannot run here; \
                         boot with --accel tcg, or auto to fall back by itself"
                    );
                }
                self.restart_under_tcg(why)?;
                return Ok(None);
            }
        }
        self.show_stderr(&err);
        Ok(status)
    }

    fn restart_under_tcg(&mut self, why: String) -> Result<()> {
        eprintln!("qemu: KVM failed this boot ({why}); booting it again under TCG");
        kvm::remember_failure(
            &self.opts.qemu,
            self.opts.bios,
            &why,
            self.opts.kvm_record.as_deref(),
        );
        self.fallback = Some(why);
        self.restart(Accel::Tcg)
    }

    /// Stops qemu and boots the image again from the start under `accel`.
    fn restart(&mut self, accel: Accel) -> Result<()> {
        child::stop(&mut self.child);
        self.child = spawn(
            &self.opts,
            accel,
            self.scratch.path(),
            &self.console,
            &self.stderr,
        )?;
        self.accel = accel;
        self.stderr_shown = 0;
        self.started = Instant::now();
        self.spoke = false;
        Ok(())
    }

    /// With the console on the terminal, qemu's own messages follow it — except a KVM boot's under `auto`
    /// before the guest spoke, which may yet be restarted under TCG with a message of ours.
    fn show_stderr(&mut self, err: &str) {
        let undecided =
            self.accel == Accel::Kvm && self.opts.accel == AccelChoice::Auto && !self.spoke;
        if self.opts.serial_log.is_some() || undecided || err.len() <= self.stderr_shown {
            return;
        }
        eprint!("{}", &err[self.stderr_shown..]);
        self.stderr_shown = err.len();
    }

    /// Waits for qemu to end (the console on the terminal), watching the boot: until the ready marker, a guest
    /// kernel panic under TCG boots it again once, as [`Vm::wait_ready`] does (a second fails the run).
    pub fn wait(&mut self) -> Result<ExitStatus> {
        let mut ready = false;
        loop {
            if let Some(status) = self.poll()? {
                return Ok(status);
            }
            if !ready {
                let text = read_lossy(&self.console);
                if text.contains(READY_MARKER) {
                    ready = true;
                } else if let Some(panic) = kernel_panic(&text) {
                    self.after_kernel_panic(panic)?;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for the ready marker on the console; fails on the failure marker, qemu's exit, or `timeout` after
    /// the boot (re)started.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<String> {
        loop {
            let exited = self.poll()?;
            // The console carries firmware and GRUB escape sequences, not always UTF-8.
            let text = read_lossy(&self.console);
            if let Some(line) = text.lines().find(|l| l.contains(READY_MARKER)) {
                return Ok(line.trim().to_owned());
            }
            if let Some(line) = text.lines().find(|l| l.contains(FAILED_MARKER)) {
                bail!("the image reported failure: {line}");
            }
            if let Some(panic) = kernel_panic(&text) {
                self.after_kernel_panic(panic)?;
                continue;
            }
            if let Some(status) = exited {
                bail!(
                    "qemu exited ({status}) before the ready marker under {}: {}\nconsole tail:\n{}",
                    self.accel,
                    read_lossy(&self.stderr).trim(),
                    tail(&text)
                );
            }
            if self.started.elapsed() > timeout {
                bail!(
                    "no {READY_MARKER} on the console within {timeout:?} under {}; console tail:\n{}",
                    self.accel,
                    tail(&text)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Vm {
    /// The guest kernel panicked: nothing more will come. Under TCG, the first time, the boot starts again. Seen
    /// once on CI (2026-11-24), on a lab ISO that booted 12 times of 12 here: a vCPU of qemu 7.2's
    /// multi-threaded TCG resumed one byte into a two-byte jump (RIP `enqueue_timer+0xa5`, `Code: … eb <09>`),
    /// one of the jumps the kernel rewrites at run time — what running a stale translation of code just
    /// patched would look like. Read as a fault of the emulator, not of the image (not proven). A second
    /// panic, or a panic under KVM, ends the boot with the oops.
    fn after_kernel_panic(&mut self, panic: KernelPanic) -> Result<()> {
        if self.accel == Accel::Tcg && self.tcg_panic.is_none() {
            eprintln!(
                "qemu: the guest kernel panicked under TCG ({}); booting it again once. The oops:\n{}",
                panic.summary, panic.report
            );
            self.tcg_panic = Some(panic);
            return self.restart(Accel::Tcg);
        }
        let before = match &self.tcg_panic {
            Some(p) => format!(" (and in the boot before this one: {})", p.summary),
            None => String::new(),
        };
        bail!(
            "the guest kernel panicked under {}{before}: {}\n{}",
            self.accel,
            panic.summary,
            panic.report
        )
    }
}

/// Starts qemu for `o` under `accel`, its console log and stderr file emptied first.
fn spawn(
    o: &RunOptions,
    accel: Accel,
    scratch: &Path,
    console: &Path,
    stderr: &Path,
) -> Result<Child> {
    // A restarted boot must not be judged by what the one before it printed.
    for p in [console, stderr] {
        match std::fs::remove_file(p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", p.display()))
            }
            _ => {}
        }
    }
    let err =
        std::fs::File::create(stderr).with_context(|| format!("creating {}", stderr.display()))?;
    let mut c = command(o, accel, scratch)?;
    // A `run` or a test killed before it could stop its VM takes the VM with it.
    child::dies_with_parent(&mut c);
    if o.serial_log.is_some() {
        c.stdin(Stdio::null()).stdout(Stdio::null());
    }
    c.stderr(err)
        .spawn()
        .with_context(|| format!("starting {} (Debian qemu-system-x86)", o.qemu.display()))
}

impl Drop for Vm {
    fn drop(&mut self) {
        child::stop(&mut self.child);
    }
}

#[cfg(test)]
mod tests;
