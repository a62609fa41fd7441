//! An end-to-end test's clock: its phases with their seconds, and an overall deadline. Phase lines go to the
//! process's standard error directly (the harness captures only `print!`/`eprint!`), so a passing CI run's log
//! shows where the test's minutes went. Past the deadline the test's registered diagnoses are printed, its
//! libvirt domains are destroyed, every process it started is killed and the binary exits failing: a stuck
//! run says why instead of being killed by CI's own limit with nothing said. A test that fails before it
//! prints the same diagnoses, from a panic hook: at the panic, before unwinding drops the test's VMs and
//! temporary directories, so the consoles, the SSH keys and the VMs themselves are still there to ask.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How long one diagnosis may take before the report moves on without it.
const DIAGNOSIS_LIMIT: Duration = Duration::from_secs(120);

type Probe = Box<dyn Fn() -> String + Send + Sync>;

struct Inner {
    test: &'static str,
    limit: Duration,
    started: Instant,
    /// The phase under way and when it began.
    current: Mutex<Option<(String, Instant)>>,
    done: Mutex<bool>,
    wake: Condvar,
    diagnoses: Mutex<Vec<(String, Arc<Probe>)>>,
    /// The failure's diagnosis has been printed (by the panic hook, or at drop).
    diagnosed: AtomicBool,
}

/// The deadlines under way, by the thread that runs their test: a panic on that thread prints its diagnosis.
static WATCHED: Mutex<Vec<(ThreadId, Weak<Inner>)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Chains a panic hook (once per process) that prints the diagnosis of the panicking thread's deadline before
/// the panic unwinds, then hands over to the hook that was there.
fn watch_panics() {
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let me = std::thread::current().id();
            // try_lock: a panic while this thread holds the list must not wait on itself.
            let inner = WATCHED
                .try_lock()
                .map(|w| {
                    w.iter()
                        .find(|(t, _)| *t == me)
                        .and_then(|(_, d)| d.upgrade())
                })
                .ok()
                .flatten();
            if let Some(inner) = inner {
                say(&format!("{}: {info}", inner.test));
                inner.failed();
            }
            before(info);
        }));
    });
}

/// The clock of one end-to-end test; dropping it ends the last phase and stops the watch.
pub struct Deadline(Arc<Inner>);

/// Writes a line to the real standard error, past the test harness's capture.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// [`say`] with `format!`'s arguments: `foothold_e2e::say!("{test}: ready in {} s", secs)`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::deadline::say(&format!($($arg)*))
    };
}

/// Seconds since the epoch.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// When CI's budget for the end-to-end tests runs out (`$FOOTHOLD_CI_DEADLINE`, seconds since the epoch, set by
/// `.ci/run`), if it has one.
fn ci_deadline() -> Option<u64> {
    std::env::var("FOOTHOLD_CI_DEADLINE").ok()?.parse().ok()
}

/// Where the last run of `test` on this machine left its seconds: a pass's, or the limit one ran out at.
fn duration_file(test: &str) -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(std::path::Path::new(&home).join(format!(".cache/foothold/e2e-durations/{test}")))
}

/// Keeps `seconds` as what `test` takes on this machine.
fn record_duration(test: &str, seconds: u64) {
    if let Some(f) = duration_file(test) {
        let _ = std::fs::create_dir_all(f.parent().unwrap());
        let _ = std::fs::write(&f, seconds.to_string());
    }
}

/// Whether `test` fits what is left of CI's budget (always, outside CI): its last pass on this machine, or the
/// limit its last run ran out at (`~/.cache/foothold/e2e-durations/`), and a sixth more; `first` for a machine
/// that has not run it yet. A test that does not fit says so (`budget: <test>: NOT RUN …`, which CI's table shows)
/// and is not run: CI's limit is the same on a machine whose emulated CPUs are two or three times slower, and a
/// run killed at the limit lands nothing. The appliance test, which `scripts/test.sh` runs after all the others,
/// takes what they left.
pub fn budget_allows(test: &str, first: Duration) -> bool {
    let Some(deadline) = ci_deadline() else {
        return true;
    };
    let last = duration_file(test)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    match fits(last, first.as_secs(), deadline.saturating_sub(now())) {
        Ok(()) => true,
        Err(why) => {
            say(&format!("budget: {test}: NOT RUN: {why}"));
            false
        }
    }
}

/// Whether a test whose last run here took `last` seconds (`first` if none), and a sixth more, fits in `left`
/// seconds; why not, if it does not.
fn fits(last: Option<u64>, first: u64, left: u64) -> Result<(), String> {
    let need = last.map_or(first, |s| s + s / 6);
    if need <= left {
        return Ok(());
    }
    Err(format!(
        "needs about {need} s ({}), {left} s are left of CI's budget",
        match last {
            Some(s) => format!("its last run here took {s} s"),
            None => "not run on this machine before".into(),
        }
    ))
}

impl Deadline {
    /// Starts the clock of `test` with `limit` overall (`$FOOTHOLD_E2E_DEADLINE` seconds instead, if set), or
    /// less: what is left of CI's budget.
    pub fn start(test: &'static str, limit: Duration) -> Deadline {
        let limit = std::env::var("FOOTHOLD_E2E_DEADLINE")
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(limit);
        let limit = match ci_deadline() {
            Some(d) => limit.min(Duration::from_secs(d.saturating_sub(now()))),
            None => limit,
        };
        let inner = Arc::new(Inner {
            test,
            limit,
            started: Instant::now(),
            current: Mutex::new(None),
            done: Mutex::new(false),
            wake: Condvar::new(),
            diagnoses: Mutex::new(Vec::new()),
            diagnosed: AtomicBool::new(false),
        });
        watch_panics();
        WATCHED
            .lock()
            .unwrap()
            .push((std::thread::current().id(), Arc::downgrade(&inner)));
        let watch = inner.clone();
        std::thread::spawn(move || {
            let done = watch.done.lock().unwrap();
            let (done, _) = watch
                .wake
                .wait_timeout_while(done, watch.limit, |d| !*d)
                .unwrap();
            if !*done {
                drop(done);
                watch.expire();
            }
        });
        Deadline(inner)
    }

    /// Ends the phase under way (printing its seconds) and begins `name`.
    pub fn phase(&self, name: &str) {
        self.0.end_phase();
        *self.0.current.lock().unwrap() = Some((name.to_owned(), Instant::now()));
    }

    /// A diagnosis of the newest `console*.log` in `dir` (the boot under way): its last 40 lines.
    pub fn diagnose_consoles_in(&self, dir: &std::path::Path) {
        let dir = dir.to_owned();
        self.diagnose("the newest console (its last 40 lines)", move || {
            let newest = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("console"))
                .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
            match newest {
                Some(e) => format!("{}:\n{}", e.path().display(), tail_file(&e.path(), 40)),
                None => format!("no console log in {}", dir.display()),
            }
        });
    }

    /// What to print if the test fails or runs out of time: `probe`'s answer under `what`. Probes run in the
    /// order registered, each for at most two minutes.
    pub fn diagnose(&self, what: &str, probe: impl Fn() -> String + Send + Sync + 'static) {
        self.0
            .diagnoses
            .lock()
            .unwrap()
            .push((what.to_owned(), Arc::new(Box::new(probe))));
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.0.end_phase();
        *self.0.done.lock().unwrap() = true;
        self.0.wake.notify_all();
        if let Ok(mut w) = WATCHED.lock() {
            w.retain(|(_, d)| !std::ptr::eq(d.as_ptr(), Arc::as_ptr(&self.0)));
        }
        if !std::thread::panicking() {
            // This machine's figure for CI's budget.
            record_duration(self.0.test, self.0.started.elapsed().as_secs());
            return;
        }
        // A panic on another thread than the test's reaches here with nothing printed yet.
        self.0.failed();
    }
}

impl Inner {
    /// The test failed: its diagnosis, once.
    fn failed(&self) {
        if self.diagnosed.swap(true, Ordering::SeqCst) {
            return;
        }
        say(&format!(
            "{}: failed after {:.0} s; diagnosis:",
            self.test,
            self.started.elapsed().as_secs_f64()
        ));
        self.diagnosis();
    }

    fn end_phase(&self) {
        if let Some((name, began)) = self.current.lock().unwrap().take() {
            say(&format!(
                "phase: {}: {name}: {} s",
                self.test,
                began.elapsed().as_secs()
            ));
        }
    }

    /// Each diagnosis under its heading, bounded in time.
    fn diagnosis(&self) {
        let probes = self.diagnoses.lock().unwrap().clone();
        for (what, probe) in probes {
            say(&format!("--- {what}"));
            say(&bounded(probe));
        }
    }

    fn expire(&self) {
        let phase = self
            .current
            .lock()
            .unwrap()
            .as_ref()
            .map(|(name, began)| format!("{name}, {} s into it", began.elapsed().as_secs()))
            .unwrap_or_else(|| "no phase".into());
        say(&format!(
            "{}: the test's overall deadline of {} s passed ({phase}); diagnosis:",
            self.test,
            self.limit.as_secs()
        ));
        self.diagnosis();
        // At least this long on this machine: CI's budget will not start it again where that does not fit.
        record_duration(self.test, self.limit.as_secs());
        // The compute nodes' qemu are libvirtd's children, not ours: their domains go by name.
        crate::libvirt::destroy_domains_of_this_process();
        kill_descendants();
        say(&format!(
            "{}: FAILED: overall deadline of {} s passed",
            self.test,
            self.limit.as_secs()
        ));
        std::process::exit(101);
    }
}

/// `probe`'s answer, or a note that it did not answer within [`DIAGNOSIS_LIMIT`].
fn bounded(probe: Arc<Probe>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(probe());
    });
    rx.recv_timeout(DIAGNOSIS_LIMIT)
        .unwrap_or_else(|_| format!("(no answer within {} s)", DIAGNOSIS_LIMIT.as_secs()))
}

/// SIGKILLs every process below this one (qemu, sushy-tools, relays): exiting does not run their owners'
/// destructors.
fn kill_descendants() {
    let me = std::process::id();
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command's name is in parentheses and may hold spaces: the fields after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut below = vec![me];
    let mut i = 0;
    while i < below.len() {
        let p = below[i];
        below.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == p)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    let pids: Vec<String> = below[1..].iter().map(u32::to_string).collect();
    if !pids.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .args(&pids)
            .status();
    }
}

/// The last `n` lines of the file at `path` (a console log: not always UTF-8), or why there are none.
pub fn tail_file(path: &std::path::Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("{}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_runs_when_its_last_time_and_a_sixth_fit_in_what_is_left() {
        assert_eq!(fits(Some(1800), 5400, 2100), Ok(()));
        assert_eq!(
            fits(Some(1800), 5400, 2099),
            Err("needs about 2100 s (its last run here took 1800 s), 2099 s are left of CI's budget".into())
        );
        // A machine that has not run it assumes `first`.
        assert_eq!(fits(None, 5400, 5400), Ok(()));
        assert!(fits(None, 5400, 5399)
            .unwrap_err()
            .contains("not run on this machine before"));
    }

    /// The diagnosis runs at the panic, while what the test made after its deadline (a temporary directory, a
    /// VM) still exists: run at the deadline's drop, after unwinding, it found the directory gone (seen in an
    /// appliance run: the console, SSH key and kubeconfig all "No such file or directory").
    #[test]
    fn a_failing_test_is_diagnosed_before_unwinding_drops_what_it_made() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen_in_test = seen.clone();
        let joined = std::thread::spawn(move || {
            let deadline = Deadline::start("deadline-unit-test", Duration::from_secs(600));
            let tmp = tempfile::tempdir().unwrap();
            let file = tmp.path().join("console-1.log");
            std::fs::write(&file, "the last line before the failure\n").unwrap();
            let seen = seen_in_test.clone();
            deadline.diagnose("the console", move || {
                let text = tail_file(&file, 1);
                seen.lock().unwrap().push(text.clone());
                text
            });
            panic!("the test's own assertion failed");
        })
        .join();
        assert!(joined.is_err(), "the test thread panicked");
        assert_eq!(
            *seen.lock().unwrap(),
            ["the last line before the failure"],
            "diagnosed once, with the file still there"
        );
    }
}
