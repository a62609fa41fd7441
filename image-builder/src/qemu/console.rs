//! Reading what a guest and its qemu printed: the markers the image prints when it is ready or has failed, and
//! a guest kernel's panic, recognised so that a boot that can no longer reach its marker ends at once with the
//! oops that ended it instead of waiting out its timeout.

use std::path::Path;

/// The marker line the image prints on its serial console when the agent is ready.
pub const READY_MARKER: &str = "FOOTHOLD-READY";
pub const FAILED_MARKER: &str = "FOOTHOLD-FAILED";

/// The line Linux prints last when it panics; with no `panic=` on the command line the guest then hangs.
const KERNEL_PANIC: &str = "Kernel panic - not syncing";

/// Where an oops report begins, the earliest of these on the console.
const OOPS_STARTS: &[&str] = &[
    "------------[ cut here ]",
    "BUG: ",
    "Oops: ",
    "general protection fault",
    "invalid opcode",
    KERNEL_PANIC,
];

/// How much of an oops [`KernelPanic::report`] keeps: its header, registers and the start of its trace.
const REPORT_LINES: usize = 24;

/// A guest kernel's panic, as its console showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPanic {
    /// One line: the oops's first line, where the CPU was (`RIP: …`) and the panic's reason.
    pub summary: String,
    /// The oops from its first line, at most [`REPORT_LINES`] lines, and the panic line.
    pub report: String,
}

/// The kernel panic on `console`, if the guest printed one.
pub fn kernel_panic(console: &str) -> Option<KernelPanic> {
    let lines: Vec<&str> = console.lines().map(str::trim_end).collect();
    let panic = lines.iter().position(|l| l.contains(KERNEL_PANIC))?;
    let start = lines[..panic]
        .iter()
        .position(|l| OOPS_STARTS.iter().any(|m| l.contains(m)))
        .unwrap_or(panic);
    let first = without_timestamp(lines[start]);
    let mut parts = vec![first];
    if let Some(rip) = lines[start..panic]
        .iter()
        .map(|l| without_timestamp(l))
        .find(|l| l.starts_with("RIP: "))
    {
        parts.push(rip);
    }
    let reason = without_timestamp(lines[panic]);
    if reason != first {
        parts.push(reason);
    }
    let mut report: Vec<&str> = lines[start..panic]
        .iter()
        .take(REPORT_LINES)
        .copied()
        .collect();
    report.push(lines[panic]);
    Some(KernelPanic {
        summary: parts.join(" | "),
        report: report.join("\n"),
    })
}

/// `[   1.285834] text` → `text`.
fn without_timestamp(line: &str) -> &str {
    let l = line.trim_start();
    match l.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((stamp, rest)) if stamp.trim().parse::<f64>().is_ok() => rest.trim(),
        _ => l.trim(),
    }
}

/// A file as text, invalid UTF-8 replaced (a console carries firmware and GRUB escape sequences); empty if it
/// cannot be read yet.
pub fn read_lossy(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The first line with anything on it.
pub fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no message)")
}

/// The last 30 lines.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panicked boot's console: the RIP, Code and panic lines as CI's boot under TCG printed them on
    /// 2026-11-24, the lines before them as Linux 6.12 begins such an oops.
    const PANICKED: &str = "\
Loading initial ramdisk ...\r
[    1.270102] Freeing unused kernel image (initmem) memory: 4188K\r
[    1.284321] Oops: general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] PREEMPT SMP NOPTI\r
[    1.284400] CPU: 1 UID: 0 PID: 16 Comm: rcu_preempt Not tainted 6.12.57+deb13-amd64 #1  Debian 6.12.57-1\r
[    1.285834] RIP: 0010:enqueue_timer+0xa5/0x100\r
[    1.285845] Code: 78 08 4c 89 e2 48 89 de e8 08 da ff ff 65 ff 0d e9 40 69 5b 75 b5 0f 1f 44 00 00 eb <09> 5b 5d\r
[    1.285852] RSP: 0018:ff78d5554009bd88 EFLAGS: 00000097\r
[    1.286000] Kernel panic - not syncing: Fatal exception in interrupt\r
[    1.286445] ---[ end Kernel panic - not syncing: Fatal exception in interrupt ]---\r
";

    #[test]
    fn a_panic_is_summed_up_from_its_oops_to_its_reason() {
        let p = kernel_panic(PANICKED).unwrap();
        assert_eq!(
            p.summary,
            "Oops: general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] \
             PREEMPT SMP NOPTI | RIP: 0010:enqueue_timer+0xa5/0x100 | Kernel panic - not syncing: Fatal \
             exception in interrupt"
        );
        let report: Vec<&str> = p.report.lines().collect();
        assert_eq!(report.len(), 6, "{}", p.report);
        assert!(report[0].ends_with("PREEMPT SMP NOPTI"));
        assert!(report[5].ends_with("Kernel panic - not syncing: Fatal exception in interrupt"));
    }

    #[test]
    fn a_bare_panic_is_its_own_summary_and_a_console_without_one_has_none() {
        let bare = "[    2.5] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n";
        let p = kernel_panic(bare).unwrap();
        assert_eq!(
            p.summary,
            "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
        );
        assert_eq!(p.report, bare.trim_end());
        // An oops the kernel survived, and a boot that merely talks about panics, are no panic.
        let survived =
            "[    3.1] BUG: soft lockup - CPU#0 stuck for 22s!\n[   9.0] FOOTHOLD-READY\n";
        assert_eq!(kernel_panic(survived), None);
        assert_eq!(kernel_panic("sysctl kernel.panic = 10\n"), None);
    }

    #[test]
    fn a_long_oops_is_cut_but_keeps_its_panic_line() {
        let mut console =
            String::from("[ 1.0] BUG: unable to handle page fault for address: 0000000000001000\n");
        for i in 0..100 {
            console.push_str(&format!("[ 1.0]  frame_{i}+0x10/0x20\n"));
        }
        console.push_str(
            "[ 1.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009\n",
        );
        let p = kernel_panic(&console).unwrap();
        let report: Vec<&str> = p.report.lines().collect();
        assert_eq!(report.len(), REPORT_LINES + 1);
        assert!(report[REPORT_LINES].contains("Attempted to kill init!"));
        assert!(p.summary.starts_with("BUG: unable to handle page fault"));
    }

    #[test]
    fn timestamps_go_and_other_brackets_stay() {
        assert_eq!(without_timestamp("[    1.285834] RIP: x"), "RIP: x");
        assert_eq!(
            without_timestamp("[  OK  ] Started x"),
            "[  OK  ] Started x"
        );
        assert_eq!(without_timestamp("  plain "), "plain");
    }
}
