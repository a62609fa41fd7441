//! `foothold-build run`: boot an image in qemu with a serial console and port forwards, UEFI (OVMF) by default
//! or BIOS (SeaBIOS). KVM is used only when a probe boot shows it works: on some hosts /dev/kvm exists but
//! guests stall ("KVM internal error"), so the probe runs SeaBIOS for a few seconds and checks it reached its
//! boot menu; otherwise TCG.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// The marker line the image prints on its serial console when the agent is ready.
pub const READY_MARKER: &str = "FOOTHOLD-READY";
pub const FAILED_MARKER: &str = "FOOTHOLD-FAILED";

pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

/// Whether KVM runs guests here: SeaBIOS must reach its boot menu within `timeout`.
pub fn probe_kvm(timeout: Duration) -> bool {
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return false;
    }
    let Ok(dir) = tempfile_dir() else {
        return false;
    };
    let log = dir.join("debugcon.log");
    let child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-M",
            "q35",
            "-m",
            "64",
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-chardev")
        .arg(format!("file,id=dbg,path={}", log.display()))
        .args(["-device", "isa-debugcon,iobase=0x402,chardev=dbg"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    let deadline = Instant::now() + timeout;
    let mut ok = false;
    while Instant::now() < deadline {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        if text.contains("Booting from") || text.contains("No bootable device") {
            ok = true;
            break;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

fn tempfile_dir() -> std::io::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("foothold-kvm-probe-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

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

pub struct RunOptions {
    pub image: PathBuf,
    pub media: Media,
    pub bios: bool,
    /// (host port on 127.0.0.1, guest port)
    pub forwards: Vec<(u16, u16)>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// Where the serial console goes (None: this terminal).
    pub serial_log: Option<PathBuf>,
    /// Discard writes to the image (qemu -snapshot).
    pub snapshot: bool,
    pub accel: Accel,
    /// For UEFI: where to keep the firmware variables copy.
    pub vars: PathBuf,
}

/// The qemu command for `o`.
pub fn command(o: &RunOptions) -> Result<Command> {
    let format = match o.image.extension().and_then(|e| e.to_str()) {
        Some("qcow2") => "qcow2",
        _ => "raw",
    };
    let mut c = Command::new("qemu-system-x86_64");
    c.args([
        "-M",
        "q35",
        "-m",
        &o.memory_mib.to_string(),
        "-smp",
        &o.cpus.to_string(),
    ]);
    match o.accel {
        Accel::Kvm => c.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => c.args(["-accel", "tcg", "-cpu", "max"]),
    };
    c.args(["-nodefaults", "-display", "none", "-no-reboot"]);
    if !o.bios {
        if !Path::new(OVMF_CODE).exists() {
            bail!("UEFI needs {OVMF_CODE} (Debian ovmf); or boot with --bios");
        }
        std::fs::copy(OVMF_VARS, &o.vars).with_context(|| format!("copying {OVMF_VARS}"))?;
        c.arg("-drive").arg(format!(
            "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
        ));
        c.arg("-drive").arg(format!(
            "if=pflash,format=raw,unit=1,file={}",
            o.vars.display()
        ));
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
    if o.snapshot {
        c.arg("-snapshot");
    }
    let fwd: String = o
        .forwards
        .iter()
        .map(|(h, g)| format!(",hostfwd=tcp:127.0.0.1:{h}-:{g}"))
        .collect();
    c.args([
        "-netdev",
        &format!("user,id=n0{fwd}"),
        "-device",
        "virtio-net-pci,netdev=n0",
    ]);
    match &o.serial_log {
        Some(p) => c.arg("-serial").arg(format!("file:{}", p.display())),
        None => c.args(["-serial", "stdio"]),
    };
    Ok(c)
}

/// A booted image; qemu is killed on drop.
pub struct Vm {
    pub child: Child,
    pub serial: PathBuf,
}

impl Vm {
    pub fn start(o: &RunOptions) -> Result<Vm> {
        let serial = o
            .serial_log
            .clone()
            .context("a started VM logs its console to a file")?;
        let child = command(o)?
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting qemu-system-x86_64 (Debian qemu-system-x86)")?;
        Ok(Vm { child, serial })
    }

    /// Waits for the ready marker on the console; fails on the failure marker, qemu's exit or `timeout`.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            // The console carries firmware and GRUB escape sequences, not always UTF-8.
            let text = String::from_utf8_lossy(&std::fs::read(&self.serial).unwrap_or_default())
                .into_owned();
            if let Some(line) = text.lines().find(|l| l.contains(READY_MARKER)) {
                return Ok(line.trim().to_owned());
            }
            if let Some(line) = text.lines().find(|l| l.contains(FAILED_MARKER)) {
                bail!("the image reported failure: {line}");
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                bail!(
                    "qemu exited ({status}) before the ready marker: {err}\nconsole tail:\n{}",
                    tail(&text)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "no {READY_MARKER} on the console within {timeout:?}; console tail:\n{}",
                    tail(&text)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(image: &str, media: Media) -> Vec<String> {
        let o = RunOptions {
            image: PathBuf::from(image),
            media,
            bios: true,
            forwards: vec![(8080, 5000)],
            memory_mib: 512,
            cpus: 1,
            serial_log: None,
            snapshot: true,
            accel: Accel::Tcg,
            vars: PathBuf::from("/nonexistent"),
        };
        command(&o)
            .unwrap()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn an_iso_goes_in_a_cd_drive_and_anything_else_on_a_disk_by_default() {
        assert_eq!(Media::for_image(Path::new("a/site.iso")), Media::Cdrom);
        assert_eq!(Media::for_image(Path::new("a/site.qcow2")), Media::Disk);
        assert_eq!(Media::for_image(Path::new("a/site.raw")), Media::Disk);
        assert_eq!(Media::for_image(Path::new("a/site")), Media::Disk);
    }

    #[test]
    fn each_medium_attaches_the_image_its_own_way() {
        let disk = args("/i/site.qcow2", Media::Disk);
        assert!(disk.contains(&"file=/i/site.qcow2,format=qcow2,if=virtio".to_owned()));
        let cd = args("/i/site.iso", Media::Cdrom);
        assert!(cd.contains(&"file=/i/site.iso,format=raw,media=cdrom,readonly=on".to_owned()));
        let usb = args("/i/a,b.iso", Media::Usb);
        assert!(usb.contains(&"file=/i/a,,b.iso,format=raw,if=none,id=stick".to_owned()));
        let i = usb
            .iter()
            .position(|a| a.starts_with("usb-storage,"))
            .unwrap();
        assert_eq!(usb[i - 1], "-device");
        assert!(usb[i].contains("drive=stick") && usb[i].contains("bootindex=0"));
        assert!(usb.contains(&"qemu-xhci,id=xhci".to_owned()));
        for a in [&disk, &cd] {
            assert!(!a.iter().any(|a| a.contains("usb")), "{a:?}");
        }
        // BIOS: no pflash; -snapshot and the forward as asked.
        assert!(!usb.iter().any(|a| a.contains("pflash")));
        assert!(usb.contains(&"-snapshot".to_owned()));
        assert!(usb
            .iter()
            .any(|a| a.contains("hostfwd=tcp:127.0.0.1:8080-:5000")));
    }
}
