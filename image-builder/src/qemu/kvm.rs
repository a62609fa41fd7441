//! What is known of KVM here, per qemu binary and firmware: a probe's verdict, or the failure of a boot whose
//! probe passed. Kept in the process (every boot of a test run asks) and, given a record file
//! (`<cache>/kvm-failures.json`, `foothold-build run`'s), across runs: on a host where KVM passes the probe and
//! then stalls a boot for minutes (seen with SeaBIOS reading a USB stick), the next `run` goes straight to TCG
//! instead of paying the stall again. A remembered failure holds for [`REMEMBERED_FOR`], and only while the
//! qemu binary, the firmware and the host's kernel are the ones it failed with; `--accel kvm` tries KVM anyway.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How long a failure recorded in the file keeps `auto` off KVM.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(30 * 86_400);

type Verdicts = Vec<((PathBuf, bool), Result<(), String>)>;
static VERDICTS: Mutex<Verdicts> = Mutex::new(Vec::new());

/// One failure of KVM, as the record file keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub qemu: PathBuf,
    /// The qemu binary's size and modification time: a new qemu is tried again.
    pub qemu_id: String,
    pub bios: bool,
    /// The host kernel's release: a new kernel (and its KVM module) is tried again.
    pub kernel: String,
    pub why: String,
    /// Unix seconds.
    pub at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    failures: Vec<Failure>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn qemu_id(qemu: &Path) -> Option<String> {
    let md = std::fs::metadata(qemu).ok()?;
    let mtime = md.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!("{} bytes, modified {}", md.len(), mtime.as_secs()))
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn read(file: &Path) -> Record {
    std::fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The failure in `record` that still holds for this qemu (`id`), firmware and `kernel` at `now`, if any.
fn holding<'a>(
    failures: &'a [Failure],
    qemu: &Path,
    id: &str,
    bios: bool,
    kernel: &str,
    now: u64,
) -> Option<&'a Failure> {
    failures.iter().find(|f| {
        f.qemu == qemu
            && f.qemu_id == id
            && f.bios == bios
            && f.kernel == kernel
            && now.saturating_sub(f.at) < REMEMBERED_FOR.as_secs()
    })
}

/// The verdict on KVM for this qemu and firmware: this process's, else a failure `record` remembers, else
/// `probe`'s (run once, and kept for this process).
pub fn verdict(
    qemu: &Path,
    bios: bool,
    record: Option<&Path>,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let mut verdicts = VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = (qemu.to_owned(), bios);
    if let Some((_, v)) = verdicts.iter().find(|(k, _)| *k == key) {
        return v.clone();
    }
    let remembered = record.and_then(|file| {
        let id = qemu_id(qemu)?;
        let r = read(file);
        let f = holding(&r.failures, qemu, &id, bios, &kernel(), now())?;
        Some(format!(
            "KVM failed a boot of this qemu and firmware here {} h ago ({}); not tried again for {} days or \
             until qemu or the kernel changes (--accel kvm tries it now; the record is {})",
            now().saturating_sub(f.at) / 3600,
            f.why,
            REMEMBERED_FOR.as_secs() / 86_400,
            file.display()
        ))
    });
    let v = match remembered {
        Some(why) => Err(why),
        None => probe(),
    };
    if let Err(why) = &v {
        eprintln!("qemu: not using KVM ({why}); booting under TCG");
    }
    verdicts.push((key, v.clone()));
    v
}

/// KVM failed a boot of this qemu and firmware: later boots in this process, and with `record` later runs on
/// this host, go straight to TCG. A record that cannot be written is said, not fatal (the boot goes on).
pub fn remember_failure(qemu: &Path, bios: bool, why: &str, record: Option<&Path>) {
    {
        let mut verdicts = VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
        let key = (qemu.to_owned(), bios);
        verdicts.retain(|(k, _)| *k != key);
        verdicts.push((key, Err(format!("a boot under KVM failed: {why}"))));
    }
    let (Some(file), Some(id)) = (record, qemu_id(qemu)) else {
        return;
    };
    let failure = Failure {
        qemu: qemu.to_owned(),
        qemu_id: id,
        bios,
        kernel: kernel(),
        why: why.to_owned(),
        at: now(),
    };
    if let Err(e) = write(file, failure) {
        eprintln!(
            "qemu: could not remember KVM's failure in {}: {e:#}",
            file.display()
        );
    }
}

/// Adds `failure` to the record at `file` (replacing one for the same qemu and firmware), dropping entries
/// past their time or whose qemu is gone; written whole or not at all.
fn write(file: &Path, failure: Failure) -> anyhow::Result<()> {
    let mut r = read(file);
    let now = now();
    r.failures.retain(|f| {
        !(f.qemu == failure.qemu && f.bios == failure.bios)
            && now.saturating_sub(f.at) < REMEMBERED_FOR.as_secs()
            && f.qemu.exists()
    });
    r.failures.push(failure);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&r)?)?;
    crate::files::publish(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(at: u64) -> Failure {
        Failure {
            qemu: "/usr/bin/qemu".into(),
            qemu_id: "1 bytes, modified 2".into(),
            bios: true,
            kernel: "6.1.0".into(),
            why: "silent".into(),
            at,
        }
    }

    #[test]
    fn a_failure_holds_only_for_its_qemu_firmware_and_kernel_and_for_its_time() {
        let fs = [failure(1_000)];
        let q = Path::new("/usr/bin/qemu");
        let id = "1 bytes, modified 2";
        assert!(holding(&fs, q, id, true, "6.1.0", 1_000 + 3_600).is_some());
        assert!(holding(&fs, q, id, false, "6.1.0", 1_000).is_none(), "UEFI");
        assert!(
            holding(&fs, q, "3 bytes, modified 4", true, "6.1.0", 1_000).is_none(),
            "new qemu"
        );
        assert!(
            holding(&fs, q, id, true, "6.12.0", 1_000).is_none(),
            "new kernel"
        );
        assert!(holding(&fs, Path::new("/opt/qemu"), id, true, "6.1.0", 1_000).is_none());
        let later = 1_000 + REMEMBERED_FOR.as_secs();
        assert!(
            holding(&fs, q, id, true, "6.1.0", later).is_none(),
            "expired"
        );
    }

    #[test]
    fn a_remembered_failure_spares_the_next_process_the_probe() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("cache/kvm-failures.json");
        // A qemu of its own, so that this process's verdicts (shared by the tests) do not answer first.
        let qemu = dir.path().join("qemu");
        std::fs::write(&qemu, b"#!/bin/sh\n").unwrap();
        remember_failure(&qemu, true, "no output for 30 s", Some(&record));
        let kept: Record = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        assert_eq!(kept.failures.len(), 1);
        assert_eq!(kept.failures[0].why, "no output for 30 s");
        // What another process finds: the record's failure, without a probe.
        let r = read(&record);
        let f = holding(
            &r.failures,
            &qemu,
            &qemu_id(&qemu).unwrap(),
            true,
            &kernel(),
            now(),
        );
        assert_eq!(f.map(|f| f.why.as_str()), Some("no output for 30 s"));
        // A second failure of the same qemu and firmware replaces the first; one of a qemu that is gone is
        // dropped.
        let gone = Failure {
            qemu: dir.path().join("gone"),
            ..failure(now())
        };
        write(&record, gone).unwrap();
        remember_failure(&qemu, true, "a KVM internal error", Some(&record));
        let kept = read(&record);
        assert_eq!(kept.failures.len(), 1, "{kept:?}");
        assert_eq!(kept.failures[0].why, "a KVM internal error");
    }
}
