//! Progress of a build. On a terminal: a spinner naming the running phase and its elapsed time, and a byte bar per
//! download (indicatif), above which each finished step is printed. Elsewhere (logs, CI): a line per step on
//! standard error. With `--json`: events on standard output for automation —
//! `{"event":"phase","phase":"rootfs","message":"…","elapsedMs":…}`, then `{"event":"done",…}`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    json: bool,
    started: Instant,
    /// Bars, when standard error is a terminal and not `--json`.
    multi: Option<MultiProgress>,
    phase: Mutex<Option<ProgressBar>>,
}

/// A download's byte bar (nothing when bars are off).
pub struct Bytes(Option<ProgressBar>);

impl Bytes {
    /// No bar.
    pub fn none() -> Bytes {
        Bytes(None)
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// Bytes already on disk when a download resumes.
    pub fn set_position(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_position(n);
        }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let target = ProgressDrawTarget::stderr();
        let multi = (!json && !target.is_hidden()).then(|| MultiProgress::with_draw_target(target));
        Progress {
            json,
            started: Instant::now(),
            multi,
            phase: Mutex::new(None),
        }
    }

    pub fn step(&self, phase: &str, message: &str) {
        let elapsed = self.started.elapsed();
        if self.json {
            println!(
                "{}",
                serde_json::json!({"event": "phase", "phase": phase, "message": message, "elapsedMs": elapsed.as_millis() as u64})
            );
            return;
        }
        let line = format!("[{:>6.1}s] {phase}: {message}", elapsed.as_secs_f64());
        let Some(multi) = &self.multi else {
            eprintln!("{line}");
            return;
        };
        let _ = multi.println(&line);
        let mut current = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        let bar = current.get_or_insert_with(|| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg} {elapsed}")
                    .expect("a valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        if bar.prefix() != phase {
            bar.reset_elapsed();
        }
        bar.set_prefix(phase.to_owned());
        bar.set_message(message.to_owned());
    }

    /// A byte bar for a download of `total` bytes (when known).
    pub fn bytes(&self, label: &str, total: Option<u64>) -> Bytes {
        let Some(multi) = &self.multi else {
            return Bytes(None);
        };
        let b = multi.add(match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::no_length(),
        });
        b.set_style(
            ProgressStyle::with_template(
                "  {msg:40!} {bar:30} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} {eta}",
            )
            .expect("a valid template"),
        );
        b.set_message(label.to_owned());
        Bytes(Some(b))
    }

    pub fn done(&self, outputs: &[std::path::PathBuf]) {
        let elapsed = self.started.elapsed();
        if let Some(b) = self.phase.lock().unwrap_or_else(|p| p.into_inner()).take() {
            b.finish_and_clear();
        }
        if self.json {
            println!(
                "{}",
                serde_json::json!({"event": "done", "outputs": outputs, "elapsedMs": elapsed.as_millis() as u64})
            );
        } else {
            for o in outputs {
                eprintln!("[{:>6.1}s] wrote {}", elapsed.as_secs_f64(), o.display());
            }
        }
    }
}
